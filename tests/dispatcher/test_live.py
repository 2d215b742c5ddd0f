"""The sidecar loop keeps up with a store that grows while it runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.backends import open_backend
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.dispatcher.tiering.planner import SegmentPlan
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize


async def test_cold_catches_up_while_the_store_grows(tmp_path: Path) -> None:
    store, cold, state = tmp_path / "store", tmp_path / "cold", tmp_path / "state"
    live = synthesize(store, SynthSpec(topics=2, queues=2, messages=300, seed=21))
    hot = HotStore(store)
    settings = settings_for(store, str(cold), state, tiering__tick_interval="20ms")
    committed = asyncio.Event()

    def on_segment(_plan: SegmentPlan, _sliced: bool) -> None:
        committed.set()

    async with open_runtime(settings, on_segment=on_segment) as rt:

        def caught_up() -> bool:
            rows = {(r.topic, r.queue_id): r.cold_commit for r in rt.catalogue.queues.all()}
            return len(rows) == 4 and all(
                rows.get((q.topic, q.queue_id)) == hot.queue_range(q.topic, q.queue_id).max
                for q in hot.queues()
            )

        async def wait_caught_up() -> None:
            async with asyncio.timeout(60):  # a bound on failure, not a synchronisation
                while not caught_up():
                    committed.clear()
                    await committed.wait()

        await rt.dispatcher.start(wait_for_lease=False)
        runner = asyncio.create_task(rt.dispatcher.run(shutdown_deadline=5))
        for _ in range(4):
            await asyncio.to_thread(live.append, 250)
            await wait_caught_up()
        rt.dispatcher.stop()
        await runner
    assert live.written == 1300
    async with open_backend(str(cold)) as backend:
        await assert_cold_matches_hot(backend, hot, CLUSTER, BROKER)
