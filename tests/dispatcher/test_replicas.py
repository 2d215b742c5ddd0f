"""The broker group rule (dispatcher/replicas.py): cold never ahead of a live replica.

Two stores stand for a master and its slave: the slave is a copy of the master cut at a
commitlog offset (what it had received when the master died). Each has its own sidecar
runtime on the same cold prefix (``memory://``) and a virtual clock.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path

import pytest

from tests.support.broker.powercut import cut_at
from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot, read_cold
from tieredstore.backends import open_backend
from tieredstore.backends.memory import reset_memory_stores
from tieredstore.cli.sidecar.http import health
from tieredstore.cli.sidecar.reload import apply_reload
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.cold.replicas import read_reports
from tieredstore.dispatcher.replicas import held_end
from tieredstore.dispatcher.tiering.durability import CommitlogSyncer
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.metadata.rows import QueueState

SPEC = SynthSpec(topics=2, queues=2, messages=800, body_min=50, body_max=400, seed=5)
COLD = "memory://group"


def _group(replica: str, **more: object) -> dict[str, object]:
    return {"group__replica": replica, "group__replicas": 2, **more}


@pytest.fixture
def stores(tmp_path: Path) -> tuple[Path, Path, int]:
    """A master store and its slave, which lacks the newest third of the commitlog."""
    master = synthesize(tmp_path / "master", SPEC).root
    slave = tmp_path / "slave"
    shutil.copytree(master, slave)
    hot = HotStore(master)
    ends = sorted(
        int(u["commitlog_offset"]) + int(u["size"])
        for q in hot.queues()
        for u in hot.read_units(q.topic, q.queue_id, 0, hot.queue_range(q.topic, q.queue_id).max)
    )
    position = ends[len(ends) * 2 // 3]
    cut_at(slave, position)
    reset_memory_stores()
    return master, slave, position


def _queue_max(store: Path) -> dict[tuple[str, int], int]:
    hot = HotStore(store)
    return {(q.topic, q.queue_id): hot.queue_range(q.topic, q.queue_id).max for q in hot.queues()}


async def _cold_ends() -> dict[tuple[str, int], int]:
    async with open_backend(COLD) as backend:
        cold = await read_cold(backend, CLUSTER, BROKER)
    return {(q.topic, q.queue_id): c.end for q, c in cold.items()}


async def test_master_tiers_only_what_the_slave_holds_and_the_slave_takes_over(
    stores: tuple[Path, Path, int], tmp_path: Path
) -> None:
    master, slave, position = stores
    clock = VirtualClock()
    slave_settings = settings_for(slave, COLD, tmp_path / "s-state", **_group("slave"))
    async with open_runtime(slave_settings, clock=clock) as standby:
        report = await standby.group.report()  # the standby reports while it waits
        assert report.confirmed == held_end(HotStore(slave)) <= position
        ok, _why = standby.group.report_healthy()
        assert not ok  # report() alone does not record; report_until does (below)

        master_settings = settings_for(master, COLD, tmp_path / "m-state", **_group("master"))
        async with open_runtime(master_settings, clock=clock) as rt:
            await rt.group.report()
            await rt.dispatcher.start(wait_for_lease=False)
            done = await rt.dispatcher.catch_up()
            assert done.messages > 0 and not done.errors
            assert rt.group.metrics.confirmed_offset._value.get() == report.confirmed
            assert rt.group.metrics.unconfirmed_bytes._value.get() > 0
            await rt.dispatcher.close()  # the master host dies: nothing more from it

        held = _queue_max(slave)
        ends = await _cold_ends()
        assert ends, "nothing tiered"
        assert all(ends[q] <= held[q] for q in ends), (ends, held)
        assert any(ends[q] < _queue_max(master)[q] for q in ends)

        # Failover: the slave's sidecar takes the lease and goes on on its own store.
        await standby.dispatcher.start(wait_for_lease=False)
        first = await standby.dispatcher.catch_up()
        assert first.messages == 0  # the dead master's last report is live for a timeout
        await clock.advance(31)  # group.replica_timeout (30 s) without a new beat
        after = await standby.dispatcher.catch_up()
        assert not after.errors and not after.diverged
        rows = standby.catalogue.queues.all()
        assert all(r.state is QueueState.ACTIVE for r in rows)
        assert standby.group.metrics.replicas_missing._value.get() == 1
        async with open_backend(COLD) as backend:
            await assert_cold_matches_hot(backend, HotStore(slave), CLUSTER, BROKER)
        assert await _cold_ends() == held


async def test_without_the_rule_the_failover_diverges(
    stores: tuple[Path, Path, int], tmp_path: Path
) -> None:
    """The control: a master that does not wait for its slave leaves cold ahead of it."""
    master, slave, _ = stores
    async with open_runtime(settings_for(master, COLD, tmp_path / "m-state")) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.catch_up()
    async with open_runtime(settings_for(slave, COLD, tmp_path / "s-state")) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        report = await rt.dispatcher.catch_up()
        assert report.diverged


async def test_a_slave_that_stops_reporting_no_longer_holds_tiering_back(
    stores: tuple[Path, Path, int], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    master, slave, _ = stores
    clock = VirtualClock()
    async with open_runtime(
        settings_for(slave, COLD, tmp_path / "s-state", **_group("slave")), clock=clock
    ) as standby:
        await standby.group.report()
    async with open_runtime(
        settings_for(master, COLD, tmp_path / "m-state", **_group("master")), clock=clock
    ) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.catch_up()
        assert all(e <= _queue_max(slave)[q] for q, e in (await _cold_ends()).items())
        await clock.advance(30)  # exactly the timeout: still live
        assert (await rt.dispatcher.catch_up()).messages == 0
        await clock.advance(1)
        with caplog.at_level(logging.WARNING):
            rest = await rt.dispatcher.catch_up()
        assert rest.messages > 0
        assert "replica slave stopped reporting" in caplog.text
        assert rt.group.metrics.replicas_missing._value.get() == 1
        assert rt.group.metrics.confirmed_offset._value.get() == -1
        async with open_backend(COLD) as backend:
            await assert_cold_matches_hot(backend, HotStore(master), CLUSTER, BROKER)


async def test_a_replica_never_heard_from_is_waited_for_one_timeout(
    stores: tuple[Path, Path, int], tmp_path: Path
) -> None:
    master, _, _ = stores
    clock = VirtualClock()
    settings = settings_for(master, COLD, tmp_path / "m-state", **_group("master"))
    async with open_runtime(settings, clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        assert (await rt.dispatcher.catch_up()).messages == 0
        await clock.advance(31)
        assert (await rt.dispatcher.catch_up()).messages > 0
        assert await _cold_ends() == _queue_max(master)


async def test_a_standby_is_healthy_while_its_reports_go_out(
    stores: tuple[Path, Path, int], tmp_path: Path
) -> None:
    _, slave, _ = stores
    clock = VirtualClock()
    settings = settings_for(slave, COLD, tmp_path / "s-state", **_group("slave"))
    async with open_runtime(settings, clock=clock) as rt:
        h = health(rt.dispatcher, clock.now_ms(), group=rt.group)
        assert (h.ok, h.reason) == (False, "standby: no replica report published yet")
        stopping = asyncio.Event()
        loop = asyncio.create_task(rt.group.report_until(stopping, lambda: 1.0))
        await clock.parked()  # the first report is out, the loop sleeps
        h = health(rt.dispatcher, clock.now_ms(), group=rt.group)
        assert h.ok and h.reason.startswith("standby: waiting on the writer lease; replica slave")
        reports = await read_reports(rt.backend, CLUSTER, BROKER)
        assert [(r.replica, r.confirmed) for r in reports] == [("slave", held_end(rt.hot))]

        def refuse(_fd: int) -> None:
            raise OSError(5, "Input/output error")

        rt.group.syncer = CommitlogSyncer(rt.hot, fdatasync=refuse)
        await clock.advance(1.0)
        await clock.parked()
        h = health(rt.dispatcher, clock.now_ms(), group=rt.group)
        assert not h.ok and h.reason.startswith("standby: replica report failing: fdatasync")
        assert rt.group.metrics.report_failures._value.get() >= 1
        stopping.set()
        await loop
        # Not in a group: a sidecar waiting on the lease is "starting", as before.
    plain = settings_for(slave, COLD, tmp_path / "p-state")
    async with open_runtime(plain, clock=clock) as rt:
        assert not health(rt.dispatcher, clock.now_ms(), group=rt.group).ok


def test_a_store_cut_by_a_crash_reports_no_more_than_it_holds(tmp_path: Path) -> None:
    """A store as a power cut leaves it before the broker recovered (whole consume-queue
    files zeroed past the cut): the report leaves such a queue out (a lower end, never a
    higher one) instead of failing."""
    spec = SynthSpec(topics=1, queues=1, messages=600, body_min=50, body_max=60,
                     cq_file_size=100 * 20)  # fmt: skip
    root = synthesize(tmp_path / "store", spec).root
    hot = HotStore(root)
    units = hot.read_units("SynthTopic0", 0, 0, hot.queue_range("SynthTopic0", 0).max)
    position = int(units["commitlog_offset"][150])  # in the second of six CQ files
    cut_at(root, position)
    assert held_end(HotStore(root)) <= position


async def test_the_report_interval_in_force_is_read_after_each_report(
    stores: tuple[Path, Path, int], tmp_path: Path
) -> None:
    """``run`` hands the loop ``tiering.tick_interval`` in force: a reload changes the
    wait that follows the next report."""
    _, slave, _ = stores
    clock = VirtualClock()
    settings = settings_for(
        slave, COLD, tmp_path / "s-state", tiering__tick_interval="1s", **_group("slave")
    )
    async with open_runtime(settings, clock=clock) as rt:
        stopping = asyncio.Event()
        interval = lambda: rt.settings.tiering.tick_interval  # noqa: E731 (as run.py's)
        loop = asyncio.create_task(rt.group.report_until(stopping, interval))
        await clock.parked()  # the first report is out, the loop sleeps 1 s
        first = rt.group.state.published_ms
        apply_reload(rt, settings_for(
            slave, COLD, tmp_path / "s-state", tiering__tick_interval="5s", **_group("slave")
        ))  # fmt: skip
        await clock.advance(1.0)
        await clock.parked()  # the second report (the wait begun before), then 5 s
        second = rt.group.state.published_ms
        assert first is not None and second == first + 1000
        await clock.advance(4.0)
        await clock.parked()
        assert rt.group.state.published_ms == second  # not yet: 5 s now
        await clock.advance(1.0)
        await clock.parked()
        assert rt.group.state.published_ms == second + 5000
        stopping.set()
        await loop
