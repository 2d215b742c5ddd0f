"""The durability guard, end to end: unflushed records wait; old enough ones go."""

from __future__ import annotations

from pathlib import Path

from dispatcher.runtime import open_runtime
from tests.dispatcher.helpers import settings_for
from tieredstore.clock import VirtualClock
from tieredstore.hotstore import HotStore
from tieredstore.synth import SynthSpec, synthesize

T0 = 1_800_000_000_000


async def test_guard_holds_back_unflushed_records_until_checkpoint_or_age(tmp_path: Path) -> None:
    spec = SynthSpec(topics=1, queues=1, messages=100, start_time=T0, interval_ms=100)
    store = synthesize(tmp_path / "store", spec)
    store.set_checkpoint(T0 + 49 * 100)  # the broker flushed offsets 0..49 only
    clock = VirtualClock(start_ms=T0 + 100 * 100)  # just after the last write
    settings = settings_for(
        store.root, "memory://guard", tmp_path / "state", tiering__guard_age="30s"
    )
    hot = HotStore(store.root)
    async with open_runtime(settings, clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        assert (await rt.dispatcher.catch_up()).messages == 50
        clock.set_ms(T0 + 74 * 100 + 30_000)  # offsets up to 74 are now 30 s old
        assert (await rt.dispatcher.catch_up()).messages == 25
        store.set_checkpoint(T0 + 99 * 100)  # the broker flushes everything
        assert (await rt.dispatcher.catch_up()).messages == 25
        assert rt.catalogue.queues()[0].cold_commit == hot.queue_range("SynthTopic0", 0).max


async def test_guard_none_tiers_everything(tmp_path: Path) -> None:
    spec = SynthSpec(topics=1, queues=1, messages=100, start_time=T0, interval_ms=100)
    store = synthesize(tmp_path / "store", spec)
    store.set_checkpoint(T0)
    clock = VirtualClock(start_ms=T0 + 100 * 100)
    settings = settings_for(
        store.root, "memory://noguard", tmp_path / "state", tiering__guard="none"
    )
    async with open_runtime(settings, clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        assert (await rt.dispatcher.catch_up()).messages == 100
