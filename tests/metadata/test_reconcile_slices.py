"""Reconcile and rebuild with batch slices: real batch objects in a memory bucket."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.batches import upload_batch
from tests.support.stores.segments import chain, hot_batch, segment_of, upload
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.clock import VirtualClock
from tieredstore.cold.history import Committed, load_history
from tieredstore.cold.layout import QueuePath, batch_key
from tieredstore.cold.segment import Segment
from tieredstore.errors import CatalogueError
from tieredstore.findings import FindingKind
from tieredstore.metadata.catalogue import DB_NAME, Catalogue
from tieredstore.metadata.reconcile import ReconcileReport, rebuild, reconcile
from tieredstore.metadata.rows import QueueRow, QueueState, SegmentRow

Q0 = QueuePath(CLUSTER, BROKER, "TopicTest", 0)
Q1 = QueuePath(CLUSTER, BROKER, "TopicTest", 1)


@pytest.fixture
async def backend() -> AsyncIterator[MemoryBackend]:
    async with MemoryBackend(f"reconcile-slices-{uuid.uuid4().hex}") as made:
        yield made
    reset_memory_stores()


async def _links(backend: MemoryBackend, q: QueuePath) -> list[Committed]:
    """The queue's slices as a reader of the cold store sees them."""
    history = await load_history(backend, CLUSTER, BROKER)
    return [c for c in history.queues[q].links if c.manifest is None]


async def _batch(
    catalogue: Catalogue | None, backend: MemoryBackend, segments: list[Segment], sequence: int
) -> list[Committed]:
    """What the dispatcher's batch commit does: create the batch, then (unless
    ``catalogue`` is None: a crash in between) commit its slices to the catalogue."""
    key = await upload_batch(backend, segments, sequence=sequence)
    history = await load_history(backend, CLUSTER, BROKER)
    links = [c for h in history.queues.values() for c in (*h.links, *h.overlaps) if c.key == key]
    if catalogue is not None:
        for result in catalogue.slices.commit_batch(links):
            assert not isinstance(result, CatalogueError), result
    return links


def _snapshot(
    cat: Catalogue,
) -> tuple[list[QueueRow], list[list[SegmentRow]], list[list[Committed]]]:
    queues = cat.queues.all()
    return (
        queues,
        [cat.segments.of(q.topic, q.queue_id) for q in queues],
        [cat.slices.of(q.topic, q.queue_id) for q in queues],
    )


async def _store(catalogue: Catalogue, backend: MemoryBackend) -> list[Segment]:
    """Q0: segments [0,4), [4,7), then slices [7,12) (batch 1, with Q1 [0,2)) and [12,14)
    (batch 2)."""
    segments = chain(Q0, [4, 3, 5, 2])
    catalogue.queues.ensure_many([(Q0.topic, 0, 0), (Q1.topic, 1, 0)])
    for seg in segments[:2]:
        catalogue.segments.commit(await upload(backend, seg))
    await _batch(catalogue, backend, [segments[2], chain(Q1, [2])[0]], 1)
    await _batch(catalogue, backend, [segments[3]], 2)
    return segments


async def test_a_clean_catalogue_with_slices_stays_as_it_is(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    await _store(catalogue, backend)
    before = _snapshot(catalogue)
    assert await reconcile(catalogue, backend) == ReconcileReport()
    assert _snapshot(catalogue) == before


async def test_a_batch_the_catalogue_missed_is_adopted_once(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    await _store(catalogue, backend)
    more = chain(Q0, [4, 3, 5, 2, 6])[4]
    links = await _batch(None, backend, [more], 3)  # crash between create and commit

    report = await reconcile(catalogue, backend)

    assert report.clean, report.findings
    assert report.adopted_slices == tuple(links)
    assert str(report) == "adopted 0 segments and 1 slices, created 0 queues, 0 issues"
    row = catalogue.queues.get(Q0.topic, 0)
    assert row is not None and (row.cold_commit, row.cold_cl_end) == (20, more.manifest.cl_end)
    assert catalogue.slices.of(Q0.topic, 0) == (await _links(backend, Q0))
    assert await reconcile(catalogue, backend) == ReconcileReport()


async def test_rebuild_gives_the_slice_rows_back(
    catalogue: Catalogue, backend: MemoryBackend, state_dir: Path, clock: VirtualClock
) -> None:
    await _store(catalogue, backend)
    before = _snapshot(catalogue)
    catalogue.close()
    for suffix in ("", "-wal", "-shm"):
        (state_dir / f"{DB_NAME}{suffix}").unlink(missing_ok=True)

    report = await rebuild(backend, state_dir, cluster=CLUSTER, broker=BROKER, clock=clock)

    assert report.clean, report.findings
    assert (len(report.adopted), len(report.adopted_slices)) == (2, 3)
    with Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER, clock=clock) as rebuilt:
        queues, segments, slices = _snapshot(rebuilt)
        assert (segments, slices) == before[1:]
        assert [
            (q.topic, q.queue_id, q.cold_min, q.cold_commit, q.cold_cl_end) for q in queues
        ] == [(q.topic, q.queue_id, q.cold_min, q.cold_commit, q.cold_cl_end) for q in before[0]]


async def test_a_queue_known_only_from_a_batch_is_created(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    q = QueuePath(CLUSTER, BROKER, "Small", 3)
    (seg,) = chain(q, [2], start=50)
    links = await _batch(None, backend, [seg], 0)
    report = await reconcile(catalogue, backend)
    assert report.clean, report.findings
    assert [(r.topic, r.queue_id, r.init_offset, r.cq_base) for r in report.created] == [
        ("Small", 3, 50, 1000)
    ]
    row = catalogue.queues.get("Small", 3)
    assert row is not None and (row.cold_min, row.cold_commit) == (50, 52)
    assert catalogue.slices.of("Small", 3) == links


async def test_compacted_and_duplicate_slices_are_neither_adopted_nor_reported(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    segments = await _store(catalogue, backend)
    # batch 2's slice [12, 14) compacted: its segment written and swapped in, batch kept
    compacted = segments[3].manifest
    await upload(backend, segments[3])
    catalogue.slices.compact(compacted)
    # a stale writer's duplicate of [7, 12) in a later batch
    await upload_batch(backend, [segments[2]], sequence=5)
    before = _snapshot(catalogue)
    assert await reconcile(catalogue, backend) == ReconcileReport()
    assert _snapshot(catalogue) == before


async def test_a_batch_head_that_does_not_parse_is_one_issue(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    await _store(catalogue, backend)
    bad = batch_key(CLUSTER, BROKER, 3)
    await backend.create(bad, b"TSBATCH\x01" + b"\x00" * 7 + b"\x05{}{}}")
    more = chain(Q0, [4, 3, 5, 2, 6])[4]
    await upload(backend, more)  # and a segment after the slices, still adopted

    report = await reconcile(catalogue, backend)

    assert [(i.kind, i.key) for i in report.findings] == [(FindingKind.CORRUPT_MANIFEST, bad)]
    assert report.findings[0].detail.startswith("batch head: ")
    assert [s.manifest for s in report.adopted] == [more.manifest]


async def test_a_slice_that_does_not_continue_is_reported(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    await _store(catalogue, backend)
    later = chain(Q0, [4, 3, 5, 2, 6, 1])[5]  # [20, 21): [14, 20) never committed
    await _batch(None, backend, [later], 3)
    report = await reconcile(catalogue, backend)
    assert [(i.kind, i.key) for i in report.findings] == [
        (FindingKind.GAP, batch_key(CLUSTER, BROKER, 3))
    ]
    assert "slice [20, 21)" in report.findings[0].detail
    assert report.adopted_slices == ()


async def test_slices_of_a_paused_queue_are_not_adopted(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    await _store(catalogue, backend)
    catalogue.queues.set_state(Q0.topic, 0, QueueState.PAUSED)
    await _batch(None, backend, [chain(Q0, [4, 3, 5, 2, 6])[4]], 3)
    report = await reconcile(catalogue, backend)
    assert [i.kind for i in report.findings] == [FindingKind.NOT_ADOPTED]
    assert "PAUSED; its slices are not adopted" in report.findings[0].detail


async def test_an_interrupted_compaction_is_swapped_in(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    segments = await _store(catalogue, backend)
    start, cl_base = segments[2].manifest.start_offset, segments[2].manifest.cl_base
    merged = segment_of(Q0, hot_batch(Q0.topic, 0, start, 7), cl_base=cl_base)
    await upload(backend, merged)  # compaction wrote [7, 14), then crashed before the swap

    report = await reconcile(catalogue, backend)

    assert report.clean, report.findings
    assert [s.manifest for s in report.adopted] == [merged.manifest]
    assert catalogue.slices.of(Q0.topic, 0) == []
    assert [s.start_offset for s in catalogue.segments.of(Q0.topic, 0)] == [0, 4, 7]
    assert await reconcile(catalogue, backend) == ReconcileReport()


async def test_a_missing_batch_of_catalogue_slices_is_reported(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    await _store(catalogue, backend)
    gone = batch_key(CLUSTER, BROKER, 2)
    await backend.delete(gone)
    report = await reconcile(catalogue, backend)
    assert [(i.kind, i.key) for i in report.findings] == [(FindingKind.MISSING_OBJECT, gone)]
    assert len(catalogue.slices.of(Q0.topic, 0)) == 2  # reported, never dropped


async def test_of_two_uncommitted_duplicates_the_lowest_sequence_is_adopted(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    await _store(catalogue, backend)
    more = chain(Q0, [4, 3, 5, 2, 6])[4]
    later = await _batch(None, backend, [more], 9)
    first = await _batch(None, backend, [more], 4)
    report = await reconcile(catalogue, backend)
    assert report.clean, report.findings
    assert report.adopted_slices == tuple(first) != tuple(later)
    assert catalogue.slices.of(Q0.topic, 0)[-1].sequence == 4
