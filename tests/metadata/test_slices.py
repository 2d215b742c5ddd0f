"""The catalogue's batch slices: commits, compaction's swap, and the segment rules beside them.

Slices are built as the dispatcher will build them: real batch objects
(:func:`~tests.support.stores.batches.batch_of`) whose heads are parsed into links
(:func:`~tieredstore.cold.history.slices_of`), over real SQLite.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.batches import batch_of
from tests.support.stores.segments import T0, chain, hot_batch, segment_of
from tieredstore.clock import VirtualClock
from tieredstore.cold.batch import BatchHead, read_batch_head
from tieredstore.cold.history import Committed, EntryKind, slices_of
from tieredstore.cold.layout import QueuePath
from tieredstore.cold.manifest import Manifest
from tieredstore.cold.segment import Segment
from tieredstore.errors import CatalogueError
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueRow, QueueState, SegmentStatus

TOPIC = "TopicTest"
Q0 = QueuePath(CLUSTER, BROKER, TOPIC, 0)
Q1 = QueuePath(CLUSTER, BROKER, TOPIC, 1)


def head_of(segments: Sequence[Segment], *, sequence: int, created_at_ms: int = T0) -> BatchHead:
    """The parsed head of a batch holding ``segments`` (one per queue) as slices."""
    index, data = batch_of(segments, sequence=sequence, created_at_ms=created_at_ms)
    head = read_batch_head(data, key=index.key, object_size=len(data))
    assert isinstance(head, BatchHead)
    return head


def links_of(
    segments: Sequence[Segment], *, sequence: int, created_at_ms: int = T0
) -> list[Committed]:
    return slices_of(head_of(segments, sequence=sequence, created_at_ms=created_at_ms))


def merged(queue: QueuePath, start: int, count: int, cl_base: int) -> Manifest:
    """Compaction's segment over ``[start, start + count)``: the same records, one segment."""
    batch = hot_batch(queue.topic, queue.queue_id, start, count)
    return segment_of(queue, batch, cl_base=cl_base).manifest


def committed(results: Sequence[tuple[Committed, QueueRow] | CatalogueError]) -> list[Committed]:
    out = []
    for r in results:
        assert not isinstance(r, CatalogueError), r
        out.append(r[0])
    return out


def queue(catalogue: Catalogue, q: QueuePath = Q0) -> QueueRow:
    row = catalogue.queues.get(q.topic, q.queue_id)
    assert row is not None
    return row


@pytest.fixture
def sliced(catalogue: Catalogue) -> list[Segment]:
    """Q0 as three slices of batches 1, 2, 3: [0,4), [4,7), [7,12); Q1 [0,2) in batch 1."""
    segments = chain(Q0, [4, 3, 5])
    other = chain(Q1, [2])
    catalogue.queues.ensure_many([(TOPIC, 0, 0), (TOPIC, 1, 0)])
    committed(catalogue.slices.commit_batch(links_of([segments[0], other[0]], sequence=1)))
    for n, seg in enumerate(segments[1:], start=2):
        committed(catalogue.slices.commit_batch(links_of([seg], sequence=n)))
    return segments


# -- commits -------------------------------------------------------------------------------


def test_commit_batch_advances_every_queue_and_of_rebuilds_the_links(
    catalogue: Catalogue,
) -> None:
    a, b = chain(Q0, [4])[0], chain(Q1, [2], start=30)[0]
    catalogue.queues.ensure_many([(TOPIC, 0, 0), (TOPIC, 1, 30)])
    links = links_of([a, b], sequence=7)

    results = catalogue.slices.commit_batch(links)

    assert committed(results) == links
    rows = [r[1] for r in results if not isinstance(r, CatalogueError)]
    assert [(r.cold_min, r.cold_commit, r.cold_cl_end) for r in rows] == [
        (0, 4, a.manifest.cl_end), (30, 32, b.manifest.cl_end),
    ]  # fmt: skip
    assert rows == [queue(catalogue, Q0), queue(catalogue, Q1)]
    assert catalogue.slices.of(TOPIC, 0) == [links[0]]
    assert catalogue.slices.of(TOPIC, 1) == [links[1]]
    assert all(c.kind is EntryKind.SLICE and c.manifest is None for c in links)


def test_the_same_batch_again_is_a_no_op(catalogue: Catalogue, sliced: list[Segment]) -> None:
    before = queue(catalogue)
    again = links_of([sliced[2]], sequence=3)
    (result,) = catalogue.slices.commit_batch(again)
    assert result == (again[0], before)
    assert queue(catalogue) == before
    assert len(catalogue.slices.of(TOPIC, 0)) == 3


def test_a_refused_slice_fails_alone(catalogue: Catalogue) -> None:
    a, b = chain(Q0, [4])[0], chain(Q1, [2], start=5)[0]  # Q1 starts at 0: a gap
    catalogue.queues.ensure_many([(TOPIC, 0, 0), (TOPIC, 1, 0)])
    ok, refused = catalogue.slices.commit_batch(links_of([a, b], sequence=1))
    assert not isinstance(ok, CatalogueError)
    assert isinstance(refused, CatalogueError)
    assert refused.message == "slice [5, 7) leaves a gap after the cold commit offset 0"
    assert str(refused.where).endswith(f"queue {TOPIC}/1")
    assert queue(catalogue).cold_commit == 4
    assert queue(catalogue, Q1).cold_commit == 0
    assert catalogue.slices.of(TOPIC, 1) == []


def _refusal(catalogue: Catalogue, link: Committed) -> str:
    (result,) = catalogue.slices.commit_batch([link])
    assert isinstance(result, CatalogueError)
    return result.message


def test_gaps_and_overlaps_are_refused(catalogue: Catalogue, sliced: list[Segment]) -> None:
    more = chain(Q0, [4, 3, 5, 2])[3]  # [12, 14)
    (link,) = links_of([more], sequence=9)
    gap = dataclasses.replace(link, start_offset=13, end_offset=15)
    overlap = links_of([sliced[2]], sequence=9)[0]  # [7, 12) again, in another batch
    wrong_cl = dataclasses.replace(link, cl_base=link.cl_base + 1, cl_end=link.cl_end + 1)
    assert _refusal(catalogue, gap) == "slice [13, 15) leaves a gap after the cold commit offset 12"
    assert _refusal(catalogue, overlap) == (
        "a different slice of batch 3 [7, 12) of TopicTest/0 is already committed at offset 7"
    )
    shifted = dataclasses.replace(overlap, start_offset=8, end_offset=13)
    assert _refusal(catalogue, shifted) == "slice [8, 13) overlaps the cold commit offset 12"
    assert _refusal(catalogue, wrong_cl).startswith("slice [12, 14) starts at cold commitlog")
    lying = dataclasses.replace(link, cl_base=link.cl_base + 1)  # spans no longer fit
    assert _refusal(catalogue, lying).endswith("do not match its offsets and cold commitlog")
    assert queue(catalogue).cold_commit == 12
    (ok,) = catalogue.slices.commit_batch([link])
    assert not isinstance(ok, CatalogueError)


def test_a_queue_not_active_unknown_or_of_another_broker_is_refused(
    catalogue: Catalogue, sliced: list[Segment]
) -> None:
    more = chain(Q0, [4, 3, 5, 2])[3]
    (link,) = links_of([more], sequence=9)
    catalogue.queues.set_state(TOPIC, 0, QueueState.PAUSED)
    assert _refusal(catalogue, link) == "queue is PAUSED; commits are refused"
    catalogue.queues.set_state(TOPIC, 0, QueueState.ACTIVE)

    unknown = links_of(chain(QueuePath(CLUSTER, BROKER, "Other", 0), [1]), sequence=9)[0]
    assert _refusal(catalogue, unknown) == "unknown queue"
    theirs = links_of(chain(QueuePath(CLUSTER, "broker-b", TOPIC, 0), [4, 3, 5, 2])[3:],
                      sequence=9)[0]  # fmt: skip
    assert _refusal(catalogue, theirs) == (
        "batch slice of cluster 'DefaultCluster' broker 'broker-b' does not belong in this "
        "catalogue"
    )
    segment = Committed.of_manifest(more.manifest)
    assert _refusal(catalogue, segment) == "slice [12, 14): a segment link, not a batch slice"
    assert queue(catalogue).cold_commit == 12


def test_segments_and_slices_continue_one_another(
    catalogue: Catalogue, sliced: list[Segment]
) -> None:
    segments = chain(Q0, [4, 3, 5, 2, 6])
    seg = catalogue.segments.commit(segments[3].manifest)  # a segment after slices
    assert queue(catalogue).cold_commit == 14
    (link,) = links_of([segments[4]], sequence=4)  # and a slice after that segment
    (result,) = catalogue.slices.commit_batch([link])
    assert not isinstance(result, CatalogueError)
    assert (result[1].cold_commit, result[1].cold_cl_end) == (20, segments[4].manifest.cl_end)
    with pytest.raises(CatalogueError, match=r"segment \[4, 7\) overlaps .* offset 20"):
        catalogue.segments.commit(segments[1].manifest)
    assert catalogue.segments.commit(segments[3].manifest) == seg


# -- compaction ----------------------------------------------------------------------------


def test_compact_swaps_the_slices_for_the_segment(
    catalogue: Catalogue, sliced: list[Segment]
) -> None:
    before = queue(catalogue)
    m = merged(Q0, 0, 7, 0)
    assert m.cl_end == sliced[1].manifest.cl_end

    row = catalogue.slices.compact(m)

    assert row.manifest == m and row.status is SegmentStatus.COMMITTED
    assert catalogue.segments.of(TOPIC, 0) == [row]
    assert [(c.start_offset, c.end_offset) for c in catalogue.slices.of(TOPIC, 0)] == [(7, 12)]
    after = queue(catalogue)
    assert (after.cold_min, after.cold_commit, after.cold_cl_end) == (
        before.cold_min, before.cold_commit, before.cold_cl_end,
    )  # fmt: skip
    assert catalogue.slices.compact(m) == row  # again after the swap: a no-op
    assert catalogue.slices.of(TOPIC, 1) != []  # another queue's slices of batch 1 stay


def test_compact_needs_the_slices_to_tile_the_segment(
    catalogue: Catalogue, sliced: list[Segment]
) -> None:
    cases = {
        merged(Q0, 0, 5, 0): "the last slice ends at offset 7",  # ends inside [4, 7)
        merged(Q0, 1, 6, 50): "the first slice starts at offset 0",  # starts inside [0, 4)
        merged(Q0, 7, 6, sliced[1].manifest.cl_end): "the last slice ends at offset 12",
        merged(Q0, 12, 2, 0): "no batch slice holds these offsets",
        merged(Q0, 0, 7, 1): "cold commitlog 0, not 0, 1",
    }
    for m, problem in cases.items():
        with pytest.raises(CatalogueError, match=problem) as info:
            catalogue.slices.compact(m)
        assert info.value.message.startswith(f"cannot compact [{m.start_offset}, {m.end_offset}): ")
    assert len(catalogue.slices.of(TOPIC, 0)) == 3 and catalogue.segments.of(TOPIC, 0) == []


def test_compact_refuses_a_hole_between_slices(catalogue: Catalogue, clock: VirtualClock) -> None:
    segments = chain(Q0, [4, 3])
    catalogue.queues.ensure(TOPIC, 0, 0)
    committed(catalogue.slices.commit_batch(links_of(segments[:1], sequence=1)))
    catalogue.segments.commit(segments[1].manifest)  # [4, 7) is a segment, not a slice
    with pytest.raises(CatalogueError, match=r"cannot compact \[0, 7\): the last slice ends"):
        catalogue.slices.compact(merged(Q0, 0, 7, 0))


def test_compact_refuses_another_segment_and_another_broker(
    catalogue: Catalogue, sliced: list[Segment]
) -> None:
    m = merged(Q0, 0, 7, 0)
    catalogue.slices.compact(m)
    other = dataclasses.replace(m, writer_id="someone-else")
    with pytest.raises(CatalogueError, match=r"cannot compact \[0, 7\): segment .* already"):
        catalogue.slices.compact(other)
    theirs = merged(QueuePath(CLUSTER, "broker-b", TOPIC, 0), 7, 5, m.cl_end)
    with pytest.raises(CatalogueError, match="broker 'broker-b' does not belong"):
        catalogue.slices.compact(theirs)


# -- what compaction and GC ask ------------------------------------------------------------


def test_referenced_batches(catalogue: Catalogue, sliced: list[Segment]) -> None:
    keys = {c.key for q in (0, 1) for c in catalogue.slices.of(TOPIC, q)}
    assert len(keys) == 3
    assert catalogue.slices.referenced_batches() == keys
    catalogue.slices.compact(merged(Q0, 0, 7, 0))
    # batch 1 is still named by Q1's slice; batch 2 by nothing
    assert catalogue.slices.referenced_batches() == keys - {catalogue_key(sliced[1], 2)}


def catalogue_key(segment: Segment, sequence: int) -> str:
    return head_of([segment], sequence=sequence).index.key


def test_due_by_age_or_by_size(catalogue: Catalogue) -> None:
    a, b = chain(Q0, [4])[0], chain(Q1, [2])[0]
    catalogue.queues.ensure_many([(TOPIC, 0, 0), (TOPIC, 1, 0)])
    committed(catalogue.slices.commit_batch(links_of([a], sequence=1, created_at_ms=1_000)))
    committed(catalogue.slices.commit_batch(links_of([b], sequence=2, created_at_ms=5_000)))
    big = 10**9
    assert catalogue.slices.due(1_000, 0, big) == [(TOPIC, 0)]
    assert catalogue.slices.due(5_999, 1_000, big) == [(TOPIC, 0)]
    assert catalogue.slices.due(6_000, 1_000, big) == [(TOPIC, 0), (TOPIC, 1)]
    assert catalogue.slices.due(0, 1_000, big) == []
    size = a.manifest.commit_log.size
    assert catalogue.slices.due(0, 1_000, size) == [(TOPIC, 0)]
    assert catalogue.slices.due(0, 1_000, size + 1) == []


# -- segments and queues with slices present -----------------------------------------------


def _segment_then_slices(catalogue: Catalogue) -> list[Segment]:
    """Q0: segments [0,4), [4,7), then slices [7,12), [12,14)."""
    segments = chain(Q0, [4, 3, 5, 2])
    catalogue.queues.ensure(TOPIC, 0, 0)
    for seg in segments[:2]:
        catalogue.segments.commit(seg.manifest)
    for n, seg in enumerate(segments[2:], start=1):
        committed(catalogue.slices.commit_batch(links_of([seg], sequence=n)))
    return segments


def test_a_segment_after_a_slice_waits_for_compaction(catalogue: Catalogue) -> None:
    segments = chain(Q0, [4, 3, 5])
    catalogue.queues.ensure(TOPIC, 0, 0)
    committed(catalogue.slices.commit_batch(links_of(segments[:1], sequence=1)))
    catalogue.segments.commit(segments[1].manifest)
    with pytest.raises(CatalogueError, match=r"before the older batch slice \[0, 4\).*compaction"):
        catalogue.segments.mark_deleting(TOPIC, 0, 4)
    catalogue.slices.compact(segments[0].manifest)
    catalogue.segments.mark_deleting(TOPIC, 0, 0)
    assert catalogue.segments.mark_deleting(TOPIC, 0, 4).status is SegmentStatus.DELETING


def test_drop_moves_cold_min_to_the_first_slice(catalogue: Catalogue) -> None:
    _segment_then_slices(catalogue)
    for start in (0, 4):
        catalogue.segments.mark_deleting(TOPIC, 0, start)
    assert catalogue.segments.drop(TOPIC, 0, 0).cold_min == 4
    row = catalogue.segments.drop(TOPIC, 0, 4)
    assert (row.cold_min, row.cold_commit) == (7, 14)


def test_truncate_forgets_slices_past_the_cut_never_inside_one(catalogue: Catalogue) -> None:
    segments = _segment_then_slices(catalogue)
    for to in (9, 13):
        with pytest.raises(CatalogueError) as info:
            catalogue.segments.truncate(TOPIC, 0, to)
        start, end = (7, 12) if to < 12 else (12, 14)
        assert (
            info.value.message
            == f"cannot truncate to {to}: inside the batch slice [{start}, {end})"
        )
    assert catalogue.segments.truncate(TOPIC, 0, 14) == []  # nothing after the slices
    assert len(catalogue.slices.of(TOPIC, 0)) == 2
    assert catalogue.segments.truncate(TOPIC, 0, 12) == []  # the last slice only
    assert [c.start_offset for c in catalogue.slices.of(TOPIC, 0)] == [7]
    row = queue(catalogue)
    assert (row.cold_commit, row.cold_cl_end) == (12, segments[3].manifest.cl_base)
    dropped = catalogue.segments.truncate(TOPIC, 0, 4)
    assert [s.start_offset for s in dropped] == [4]
    assert catalogue.slices.of(TOPIC, 0) == []
    row = queue(catalogue)
    assert (row.cold_commit, row.cold_cl_end) == (4, segments[1].manifest.cl_base)


def test_deleting_a_queue_forgets_its_slices(catalogue: Catalogue, sliced: list[Segment]) -> None:
    row = catalogue.queues.set_state(TOPIC, 0, QueueState.DELETED)
    assert (row.cold_min, row.cold_commit, row.state) == (12, 12, QueueState.DELETED)
    assert catalogue.slices.of(TOPIC, 0) == []
    assert catalogue.slices.referenced_batches() == {catalogue.slices.of(TOPIC, 1)[0].key}
    assert catalogue.queues.set_state(TOPIC, 1, QueueState.PAUSED).cold_min == 0
    assert len(catalogue.slices.of(TOPIC, 1)) == 1  # other states keep them
