"""SIGHUP reloads: what changes live, what waits for a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.sidecar.settings import put_in_force, settings_for
from tieredstore.backends.memory import reset_memory_stores
from tieredstore.cli.sidecar.reload import LIVE_KEYS, apply_reload, plan_reload
from tieredstore.cli.sidecar.runtime import Runtime, open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.dispatcher.topic_filter import TopicFilter
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.settings.loader import SETTINGS


def test_live_keys_are_settings() -> None:
    assert {s.key for s in SETTINGS} >= LIVE_KEYS


def test_plan_splits_live_changes_from_restart_ones(tmp_path: Path) -> None:
    running = settings_for(tmp_path, "memory://a", tmp_path / "s")
    same = plan_reload(running, running)
    assert not same.changed
    new = settings_for(
        tmp_path,
        "memory://b",
        tmp_path / "s",
        tiering__segment_max_bytes="1M",
        tiering__concurrency=9,
        log__level="debug",
    )
    plan = plan_reload(running, new)
    assert plan.applied == ("tiering.segment_max_bytes", "log.level")
    assert plan.needs_restart == ("cold.url", "tiering.concurrency")
    # Applied keys take the new value; the others keep the running one.
    assert plan.settings.tiering.segment_max_bytes == 1 << 20
    assert plan.settings.log.level == "debug"
    assert plan.settings.cold.url == "memory://a"
    assert plan.settings.tiering.concurrency == 4


async def test_apply_swaps_the_tiering_settings_and_retention_policy(tmp_path: Path) -> None:
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=1, messages=10))
    reset_memory_stores()
    running = settings_for(tmp_path / "store", "memory://reload", tmp_path / "state")
    async with open_runtime(running) as rt:
        new = settings_for(
            tmp_path / "store",
            "memory://reload",
            tmp_path / "state",
            tiering__tick_interval="250ms",
            tiering__exclude_topics="Secret*",
            tiering__concurrency=1,
            retention__default="1h",
        )
        plan = apply_reload(rt, new)
        assert plan.needs_restart == ("tiering.concurrency",)
        assert rt.dispatcher.tiering.tick_interval == 0.25
        assert not TopicFilter.of(rt.dispatcher.discovery.tiering).accepts("SecretTopic")
        assert rt.dispatcher.tiering.concurrency == 4  # its semaphore was built with 4
        assert rt.retention.policy.default_ms == 3_600_000
        assert rt.settings is plan.settings


def _gauge(rt: Runtime, name: str, **labels: str) -> float | None:
    return rt.metrics.registry.get_sample_value(name, labels)


async def test_a_reload_changes_what_each_part_uses_on_its_next_tick(tmp_path: Path) -> None:
    """One replacement of the settings in force reaches every part: discovery's filter
    and the rounds' guard at the next tick, the compactor's grace and the retention
    policy at their next pass, the upload pacing at its next reservation."""
    spec = SynthSpec(topics=2, queues=1, messages=10)
    synthesize(tmp_path / "store", spec)
    kept, held_back = spec.topic_names()
    reset_memory_stores()
    clock = VirtualClock()
    at = (tmp_path / "store", "memory://reload-parts", tmp_path / "state")
    running = settings_for(*at, tiering__exclude_topics=held_back)
    async with open_runtime(running, clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        assert not (await rt.dispatcher.tick(flush=True)).errors
        assert {q.topic for q in rt.catalogue.queues.all()} == {kept}
        assert _gauge(rt, "tieredstore_guard_mode", mode="sync") == 1

        new = settings_for(
            *at, tiering__guard="none", tiering__compact_after="2h", retention__default="1h"
        )
        plan = apply_reload(rt, new)
        assert rt.in_force.settings is plan.settings
        parts = (
            rt.dispatcher,
            rt.dispatcher.discovery,
            rt.dispatcher.rounds.in_force,
            rt.compactor,
        )
        assert all(part.tiering is plan.settings.tiering for part in parts)
        assert rt.compactor.grace_ms == 2 * 3_600_000
        assert rt.retention.policy.default_ms == 3_600_000
        assert not (await rt.dispatcher.tick(flush=True)).errors
        assert {q.topic for q in rt.catalogue.queues.all()} == {kept, held_back}
        assert _gauge(rt, "tieredstore_guard_mode", mode="none") == 1

        assert rt.upload_limit.reserve(1 << 20) == 0.0  # unlimited so far
        paced = settings_for(*at, tiering__guard="none", tiering__max_bytes_per_second="1K")
        assert apply_reload(rt, paced).applied == (
            "tiering.compact_after", "tiering.max_bytes_per_second", "retention.default",
        )  # fmt: skip
        assert _gauge(rt, "tieredstore_upload_rate_limit_bytes_per_second") == 1024
        # From unlimited to 1 KiB/s: a full bucket (1 KiB), so 2 KiB wait one second.
        assert rt.upload_limit.reserve(2048) == pytest.approx(1.0)


async def test_every_part_reads_the_holder_not_a_copy(tmp_path: Path) -> None:
    """The holder's content replaced by hand (no apply_reload) is what every part reads."""
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=1, messages=10))
    reset_memory_stores()
    at = (tmp_path / "store", "memory://reload-holder", tmp_path / "state")
    async with open_runtime(settings_for(*at)) as rt:
        new = put_in_force(
            rt.in_force, tiering__tick_interval=0.25, tiering__max_bytes_per_second=4096,
            retention__default=60.0,
        )  # fmt: skip
        assert rt.settings is new
        parts = (
            rt.dispatcher,
            rt.dispatcher.discovery,
            rt.dispatcher.rounds.in_force,
            rt.compactor,
        )
        assert [part.tiering.tick_interval for part in parts] == [0.25] * len(parts)
        assert rt.upload_limit.rate == 4096
        assert rt.retention.policy.default_ms == 60_000


async def test_a_reload_of_restart_only_keys_leaves_the_settings_in_force(
    tmp_path: Path,
) -> None:
    """The cold location, the state dir, the concurrency: refused as before (the plan
    names them), and the holder keeps the very settings it had."""
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=1, messages=10))
    reset_memory_stores()
    running = settings_for(tmp_path / "store", "memory://reload-refused", tmp_path / "state")
    async with open_runtime(running) as rt:
        before = rt.in_force.settings
        new = settings_for(
            tmp_path / "store", "memory://elsewhere", tmp_path / "other-state",
            tiering__concurrency=1,
        )  # fmt: skip
        plan = apply_reload(rt, new)
        assert plan.applied == ()
        assert plan.needs_restart == ("cold.url", "state.dir", "tiering.concurrency")
        assert rt.in_force.settings is before
        assert rt.dispatcher.tiering.concurrency == 4
