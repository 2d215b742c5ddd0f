"""The composition root (:mod:`tieredstore.dispatcher.assembly`): one builder, one shared queue
state.

The builder alone turns what the edge opened into a working sidecar; the queue state the
tiering parts share (:class:`tieredstore.dispatcher.shared_state.SharedState`) is one object, handed
to each of them, so what the committer records (a stopped queue) is what discovery and
``status`` see.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tieredstore.backends import open_cold
from tieredstore.backends.retry import RetryPolicy
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import SystemClock
from tieredstore.dispatcher import stopped_file
from tieredstore.dispatcher.assembly import build_dispatcher
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.errors import CorruptRecordError
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.metadata.catalogue import Catalogue

SPEC = SynthSpec(topics=1, queues=2, messages=200, body_min=100, body_max=300, seed=36)


async def test_the_builder_alone_builds_a_sidecar_that_tiers(tmp_path: Path) -> None:
    store = synthesize(tmp_path / "store", SPEC).root
    settings = settings_for(store, str(tmp_path / "cold"), tmp_path / "state")
    backend = open_cold(settings.cold, retry=None)
    catalogue = Catalogue.open(
        settings.state.dir, cluster=CLUSTER, broker=BROKER, cold_url=settings.cold.url
    )
    hot = HotStore(store)
    try:
        built = build_dispatcher(
            settings, backend=backend, hot=hot, catalogue=catalogue,
            clock=SystemClock(), metrics=Metrics(), retry=RetryPolicy(),
        )  # fmt: skip
        await built.dispatcher.start(wait_for_lease=False)
        report = await built.dispatcher.catch_up()
        await built.dispatcher.close()
        assert report.messages == SPEC.messages  # every message synthesized, all queues
        assert not report.errors
        rows = catalogue.queues.all()
        assert len(rows) == SPEC.topics * SPEC.queues
        for row in rows:
            assert row.cold_commit == hot.queue_range(row.topic, row.queue_id).max
    finally:
        catalogue.close()
        await backend.close()


async def test_one_queue_state_reaches_every_part(tmp_path: Path) -> None:
    store = synthesize(tmp_path / "store", SPEC).root
    settings = settings_for(store, str(tmp_path / "cold"), tmp_path / "state")
    async with open_runtime(settings) as rt:
        d = rt.dispatcher
        states = d.states
        assert d.discovery.states is states
        assert d.rounds.states is states
        assert d.rounds.committer.states is states


async def test_a_queue_the_committer_stops_is_left_out_by_discovery_and_saved(
    tmp_path: Path,
) -> None:
    store = synthesize(tmp_path / "store", SPEC).root
    settings = settings_for(store, str(tmp_path / "cold"), tmp_path / "state")
    async with open_runtime(settings) as rt:
        d = rt.dispatcher
        await d.start(wait_for_lease=False)
        rows = await d.discover()
        assert len(rows) == 2
        broken = rows[0]
        d.rounds.committer.stop_inconsistent(broken, CorruptRecordError("a record", where="x"))
        key = QueueKey(broken.topic, broken.queue_id)
        assert [(r.topic, r.queue_id) for r in await d.discover()] == [
            (r.topic, r.queue_id) for r in rows[1:]
        ]
        assert key in d.states.stopped
        saved = stopped_file.load(settings.state.dir / stopped_file.FILE_NAME)
        assert list(saved) == [key]
        assert "inconsistent hot store" in saved[key]
