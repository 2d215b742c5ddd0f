"""Group commit of catalogue rows: concurrent commits share transactions, each caller
gets its own outcome, and nothing is committed twice or lost."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.segments import chain
from tieredstore.clock import VirtualClock
from tieredstore.cold.layout import QueuePath
from tieredstore.dispatcher.tiering.group_commit import GroupCommit
from tieredstore.errors import CatalogueError
from tieredstore.metadata.catalogue import Catalogue

QUEUES = 40


def _open(tmp_path: Path) -> Catalogue:
    return Catalogue.open(tmp_path, cluster=CLUSTER, broker=BROKER, clock=VirtualClock())


def test_concurrent_commits_share_one_transaction(tmp_path: Path) -> None:
    firsts = [chain(QueuePath(CLUSTER, BROKER, "T", q), [2, 3]) for q in range(QUEUES)]

    async def go(catalogue: Catalogue) -> tuple[list[int], int]:
        group = GroupCommit(catalogue, asyncio.Lock())
        rows = await asyncio.gather(*(group.commit(c[0].manifest) for c in firsts))
        # A second wave while nothing is flushing: again one transaction.
        rows2 = await asyncio.gather(*(group.commit(c[1].manifest) for c in firsts))
        assert [r.queue_id for r in rows] == list(range(QUEUES))
        return [r.cold_commit for r in rows + rows2], group.groups

    with _open(tmp_path) as catalogue:
        for q in range(QUEUES):
            catalogue.queues.ensure("T", q, 0)
        commits, groups = asyncio.run(go(catalogue))
        assert commits == [2] * QUEUES + [5] * QUEUES
        assert groups == 2  # 80 segments, two transactions
        for q in range(QUEUES):
            row = catalogue.queues.get("T", q)
            assert row is not None and row.cold_commit == 5
            assert len(catalogue.segments.of("T", q)) == 2


def test_a_refused_segment_fails_alone(tmp_path: Path) -> None:
    good = chain(QueuePath(CLUSTER, BROKER, "T", 0), [2])[0].manifest
    gap = chain(QueuePath(CLUSTER, BROKER, "T", 1), [2, 3])[1].manifest  # [2, 5) first

    async def go(catalogue: Catalogue) -> list[object]:
        group = GroupCommit(catalogue, asyncio.Lock())
        return list(
            await asyncio.gather(group.commit(good), group.commit(gap), return_exceptions=True)
        )

    with _open(tmp_path) as catalogue:
        catalogue.queues.ensure("T", 0, 0)
        catalogue.queues.ensure("T", 1, 0)
        ok, refused = asyncio.run(go(catalogue))
        assert isinstance(refused, CatalogueError) and "leaves a gap" in str(refused)
        assert not isinstance(ok, BaseException)
        assert [s.manifest for s in catalogue.segments.of("T", 0)] == [good]
        assert catalogue.segments.of("T", 1) == []


def test_a_failed_transaction_fails_the_whole_group(tmp_path: Path) -> None:
    manifest = chain(QueuePath(CLUSTER, BROKER, "T", 0), [2])[0].manifest
    catalogue = _open(tmp_path)
    catalogue.queues.ensure("T", 0, 0)
    catalogue.close()  # a closed catalogue refuses every transaction

    async def go() -> None:
        await GroupCommit(catalogue, asyncio.Lock()).commit(manifest)

    with pytest.raises(CatalogueError, match="catalogue is closed"):
        asyncio.run(go())


async def _steps_done() -> None:
    """Return once every step already scheduled on the loop has run (FIFO), not a sleep."""
    reached = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(reached.set_result, None)
    await reached


@pytest.mark.parametrize("started", [True, False], ids=["waiting-for-the-lock", "not-started"])
def test_a_cancelled_flush_leaves_no_caller_waiting(tmp_path: Path, started: bool) -> None:
    manifests = [chain(QueuePath(CLUSTER, BROKER, "T", q), [2])[0].manifest for q in range(3)]

    async def go(catalogue: Catalogue) -> list[object]:
        lock = asyncio.Lock()
        group = GroupCommit(catalogue, lock)
        async with lock:  # held: a group cannot start its transaction
            if started:  # the callers queue, then the flush starts and waits for the lock
                callers = [asyncio.ensure_future(group.commit(m)) for m in manifests]
                await _steps_done()
            else:  # the test wakes after the callers queued, before the flush's first step
                loop = asyncio.get_running_loop()
                woken = loop.create_future()
                loop.call_soon(woken.set_result, None)  # scheduled before the callers
                callers = [asyncio.ensure_future(group.commit(m)) for m in manifests]
                await woken
            flushing = group._flushing
            assert flushing is not None and len(callers) == 3
            assert group.groups == (1 if started else 0)  # a group is counted at its start
            flushing.cancel()
            outcomes: list[object] = list(await asyncio.gather(*callers, return_exceptions=True))
        # A later commit starts a new flush and is served.
        catalogue.queues.ensure("T", 0, 0)
        row = await group.commit(manifests[0])
        assert row.cold_commit == 2
        return outcomes

    with _open(tmp_path) as catalogue:
        outcomes = asyncio.run(go(catalogue))
        assert all(isinstance(o, asyncio.CancelledError) for o in outcomes)
