"""The one reading rule: segments win, slices fill only what no segment holds, and the
first batch to commit an offset is its truth."""

from __future__ import annotations

import dataclasses

import pytest

from tests.support.stores.segments import chain, packed, upload
from tieredstore.backends.memory import MemoryBackend
from tieredstore.cold.history import (
    Committed,
    EntryKind,
    Span,
    Withdrawal,
    as_link,
    choose,
    load_history,
    read_span,
    span_bytes,
)
from tieredstore.cold.layout import QueuePath, lease_key
from tieredstore.cold.manifest import FenceMarker
from tieredstore.cold.segment import verify_record_pointers, verify_segment
from tieredstore.errors import CorruptRecordError
from tieredstore.formats.consumequeue import decode_units

Q = QueuePath("c", "b", "t", 0)


def _segments(counts: list[int], start: int = 0) -> list[Committed]:
    return [Committed.of_manifest(s.manifest) for s in chain(Q, counts, start=start)]


def _slice(seg: Committed, sequence: int) -> Committed:
    """The same offsets as ``seg``, committed as a slice of batch ``sequence``."""
    key = f"batch-{sequence}"
    return dataclasses.replace(
        seg,
        kind=EntryKind.SLICE,
        key=key,
        sequence=sequence,
        manifest=None,
        commit_log=Span(key, 100, seg.commit_log.size, seg.commit_log.digest, 10_000),
        consume_queue=Span(key, 9_000, seg.consume_queue.size, seg.consume_queue.digest, 10_000),
    )


def _ranges(links: tuple[Committed, ...]) -> list[tuple[str, int, int]]:
    return [(c.kind.value, c.start_offset, c.end_offset) for c in links]


def test_a_manifest_is_a_link_over_its_whole_objects() -> None:
    (seg,) = chain(Q, [5])
    link = as_link(seg.manifest)
    assert link.kind is EntryKind.SEGMENT and link.manifest is seg.manifest
    assert (link.commit_log.at, link.commit_log.size) == (0, len(seg.commit_log))
    assert link.commit_log.object_size == len(seg.commit_log)
    assert link.consume_queue.key == seg.manifest.consume_queue_key
    assert (link.message_count, link.cq_base) == (5, 0)
    assert as_link(link) is link


def test_slices_follow_segments_and_each_other() -> None:
    s0, s1, s2 = _segments([3, 4, 2])
    history = choose([s0], [_slice(s2, 8), _slice(s1, 7)])
    assert _ranges(history.links) == [("segment", 0, 3), ("slice", 3, 7), ("slice", 7, 9)]
    assert (history.min, history.commit, history.overlaps) == (0, 9, ())


def test_a_compacted_slice_gives_way_to_its_segment() -> None:
    s0, s1 = _segments([3, 4])
    slice_ = _slice(s1, 1)
    history = choose([s0, s1], [slice_])
    assert _ranges(history.links) == [("segment", 0, 3), ("segment", 3, 7)]
    assert history.overlaps == (slice_,)


def test_a_segment_over_several_slices_replaces_them_all() -> None:
    a, b = _segments([3, 4])
    (whole,) = _segments([7])
    history = choose([whole], [_slice(a, 1), _slice(b, 2)])
    assert _ranges(history.links) == [("segment", 0, 7)]
    assert len(history.overlaps) == 2


def test_the_first_batch_to_commit_an_offset_wins() -> None:
    (s,) = _segments([4])
    first, late = _slice(s, 3), _slice(s, 9)
    history = choose([], [late, first])
    assert history.links == (first,) and history.overlaps == (late,)


def test_a_slice_partly_under_a_segment_is_not_read_at_all() -> None:
    (seg,) = _segments([3])
    (wide,) = _segments([5])
    history = choose([seg], [_slice(wide, 1)])
    # Offsets 3 and 4 are in no chosen link: a gap the verifier reports, never a read
    # that switches between two truths inside one offset range.
    assert _ranges(history.links) == [("segment", 0, 3)]
    assert history.commit == 3 and len(history.overlaps) == 1


def test_a_withdrawal_takes_the_older_slices_past_its_offset_and_nothing_else() -> None:
    s0, s1, s2, s3 = _segments([3, 4, 2, 5])
    old1, old2 = _slice(s1, 1), _slice(s2, 2)
    cut = Withdrawal(Q, from_offset=3, sequence=4, key="batch-4")
    new = _slice(s2, 5)  # tiered again after the withdrawal: a later sequence
    other = Withdrawal(QueuePath("c", "b", "t", 1), 0, 9, "batch-9")  # another queue's
    history = choose([s0], [old1, old2, cut, new, other])
    assert _ranges(history.links) == [("segment", 0, 3), ("slice", 7, 9)]
    assert history.links[1] is new
    assert history.withdrawn == (old1, old2) and history.overlaps == ()
    # A slice that ends at the offset, a segment past it, and a later slice stay.
    history = choose([s2], [_slice(s0, 1), cut, _slice(s3, 6)])
    assert _ranges(history.links) == [("slice", 0, 3), ("segment", 7, 9), ("slice", 9, 14)]
    assert history.withdrawn == ()
    # A slice that straddles the offset is withdrawn whole.
    (wide,) = _segments([5])
    assert choose([], [_slice(wide, 1), cut]).withdrawn == (_slice(wide, 1),)


def test_nothing_committed_is_an_empty_history() -> None:
    history = choose([], [])
    assert (history.links, history.min, history.commit) == ((), 0, 0)


async def test_read_span_reads_inside_its_span_only() -> None:
    backend = MemoryBackend("history-test")
    await backend.write("obj", bytes(range(50)))
    span = Span("obj", 10, 20, "", 50)
    assert await read_span(backend, span, 0, 5) == bytes(range(10, 15))
    assert await read_span(backend, span, 15, 20) == bytes(range(25, 30))
    with pytest.raises(ValueError, match="outside the span"):
        await read_span(backend, span, 15, 21)


async def test_load_history_reads_every_wanted_queue_and_steps_over_markers() -> None:
    backend = MemoryBackend("history-load")
    other = QueuePath("c", "b", "u", 1)
    for seg in chain(Q, [3, 4]) + chain(other, [2]):
        await upload(backend, seg)
    marker = FenceMarker("c", "b", "t", 0, 7, lease_epoch=2, writer_id="gc", created_at_ms=1)
    await backend.write(marker.key, marker.to_json())
    await backend.write(lease_key("c", "b"), b"{}")  # tieredstore's own: not history
    history = await load_history(backend, "c", "b")
    assert _ranges(history.queues[Q].links) == [("segment", 0, 3), ("segment", 3, 7)]
    assert _ranges(history.queues[other].links) == [("segment", 0, 2)]
    assert [link.queue for link in history.links()] == [Q, Q, other]
    only_t = await load_history(backend, "c", "b", wants_topic=lambda t: t == "t")
    assert list(only_t.queues) == [Q]


async def test_a_link_is_named_and_read_by_its_spans() -> None:
    backend = MemoryBackend("history-spans")
    seg, other = chain(Q, [3, 2])
    data, (link, _) = packed([seg, other], "batch-1")
    await backend.write("batch-1", data)
    await upload(backend, seg)
    whole = as_link(seg.manifest)
    assert whole.history_key == seg.manifest.key and whole.commit_log.whole
    assert link.history_key == "batch-1#t/0" and not link.commit_log.whole
    assert await span_bytes(backend, link.commit_log) == seg.commit_log
    assert await span_bytes(backend, whole.consume_queue) == seg.consume_queue
    verify_segment(link, seg.commit_log, seg.consume_queue)
    # A record that disagrees with its unit is named where it lies in the batch object.
    bad = bytearray(seg.commit_log)
    bad[4:8] = b"\0\0\0\0"  # the first record's magic code
    units = decode_units(seg.consume_queue, where="cq")
    with pytest.raises(CorruptRecordError, match="bad magic") as e:
        verify_record_pointers(link, units, bytes(bad))
    assert e.value.where == f"batch-1@{link.commit_log.at}"
