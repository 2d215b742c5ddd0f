"""Reading a queue whose newest data sits in batch objects: the same messages, the same
bytes, whether a range is read from a batch slice or, after compaction, from its segment.

Stores are built by hand (:mod:`tests.support.stores.segments`, :mod:`tests.support.
batches`): a slice holds exactly the bytes of the segment over the same offsets, so the
segment is the compacted form of the slice.
"""

from __future__ import annotations

import uuid

import pytest

from tests.support.stores.batches import upload_batch
from tests.support.stores.segments import chain, upload
from tieredstore.backends.counting import CountingBackend
from tieredstore.backends.memory import MemoryBackend
from tieredstore.cold.batch import BatchFence
from tieredstore.cold.compressed.frames import FrameSettings
from tieredstore.cold.history import EntryKind, load_history, read_span, span_bytes
from tieredstore.cold.layout import QueuePath, batch_key
from tieredstore.cold.reader import BoundaryType, ColdReader
from tieredstore.cold.segment import Segment, verify_segment
from tieredstore.cold.serving import ServingReader, read_raw
from tieredstore.errors import CorruptBatchError, OffsetOutOfRangeError

Q = QueuePath("c", "b", "t", 0)
OTHER = QueuePath("c", "b", "t", 1)


async def _store() -> tuple[MemoryBackend, list[Segment], list[Segment]]:
    """Queue 0: a segment [0, 3), then [3, 7) and [7, 9) in batches 0 and 1; queue 1:
    [0, 5) in batch 0 only."""
    backend = MemoryBackend(f"reading-batches-{uuid.uuid4().hex}")
    q0 = chain(Q, [3, 4, 2])
    q1 = chain(OTHER, [5])
    await upload(backend, q0[0])
    await upload_batch(backend, [q0[1], q1[0]], sequence=0)
    await upload_batch(backend, [q0[2]], sequence=1)
    return backend, q0, q1


async def _messages(
    reader: ColdReader, queue: QueuePath, offset: int, count: int
) -> list[tuple[int, int, bytes, bytes]]:
    got = await reader.read(queue.topic, queue.queue_id, offset, count)
    return [(m.queue_offset, m.cold_commitlog_offset, m.record.encode(), m.body) for m in got]


async def test_a_read_runs_from_a_segment_through_two_batches() -> None:
    backend, _, _ = await _store()
    reader = ColdReader(backend, "c", "b")
    assert str(await reader.range("t", 0)) == "[0, 9)"
    assert str(await reader.range("t", 1)) == "[0, 5)"
    got = await reader.read("t", 0, 0, 100)
    assert [m.queue_offset for m in got] == list(range(9))
    assert [m.queue_offset for m in await reader.read("t", 1, 2, 100)] == [2, 3, 4]
    with pytest.raises(OffsetOutOfRangeError, match=r"outside what cold holds \[0, 9\)"):
        await reader.read("t", 0, 9, 1)


async def test_one_offset_from_a_batch_then_from_its_segment_byte_identical() -> None:
    backend, q0, _ = await _store()
    reader = ColdReader(backend, "c", "b")
    _, link = await reader.locate("t", 0, 5)
    assert link.kind is EntryKind.SLICE and link.sequence == 0
    from_batch = await _messages(reader, Q, 5, 1)
    raw_batch = await read_raw(reader, "t", 0, 3, 100, 1 << 20)

    await upload(backend, q0[1])  # compaction: the same offsets as a segment
    compacted = ColdReader(backend, "c", "b")
    _, link = await compacted.locate("t", 0, 5)
    assert link.kind is EntryKind.SEGMENT and link.key == q0[1].manifest.key
    assert await _messages(compacted, Q, 5, 1) == from_batch
    raw_segment = await read_raw(compacted, "t", 0, 3, 100, 1 << 20)
    assert b"".join(raw_segment.records) == b"".join(raw_batch.records)
    assert raw_segment.units.tolist() == raw_batch.units.tolist()

    # The batch collected: the segment alone serves the same bytes.
    await backend.delete(batch_key("c", "b", 0))
    collected = ColdReader(backend, "c", "b")
    assert await _messages(collected, Q, 5, 1) == from_batch
    # ... but queue 1 had no segment: its offsets left cold with the batch.
    assert str(await collected.range("t", 1)) == "[0, 0)"


async def test_offset_by_time_searches_slices_too() -> None:
    backend, q0, _ = await _store()
    reader = ColdReader(backend, "c", "b")
    for seg in q0:
        m = seg.manifest
        found = await reader.offset_by_time("t", 0, m.min_store_timestamp, BoundaryType.LOWER)
        assert found == m.start_offset
    last = q0[-1].manifest
    after = await reader.offset_by_time("t", 0, last.max_store_timestamp + 1, BoundaryType.LOWER)
    assert after == last.end_offset


async def test_a_fence_at_a_batch_key_is_no_batch() -> None:
    backend, _, _ = await _store()
    fence = BatchFence("c", "b", 2, lease_epoch=2, writer_id="successor", created_at_ms=1)
    await backend.create(fence.key, fence.to_json())
    reader = ColdReader(backend, "c", "b")
    assert str(await reader.range("t", 0)) == "[0, 9)"
    history = await load_history(backend, "c", "b")
    assert [c.sequence for c in history.queues[Q].links] == [-1, 0, 1]


async def test_a_corrupt_batch_is_named_not_skipped() -> None:
    backend, _, _ = await _store()
    key = batch_key("c", "b", 1)
    data = bytearray(await backend.read(key))
    data[0] ^= 0xFF
    await backend.write(key, bytes(data))
    with pytest.raises(CorruptBatchError, match="batch magic") as caught:
        await ColdReader(backend, "c", "b").read("t", 0, 0, 1)
    assert caught.value.where == key


async def test_the_read_service_lists_again_when_a_slice_was_collected() -> None:
    backend, q0, _ = await _store()
    now = [0.0]
    reader = ServingReader(backend, "c", "b", listing_ttl=60.0, clock=lambda: now[0])
    before = await _messages(reader, Q, 3, 4)
    await upload(backend, q0[1])
    await backend.delete(batch_key("c", "b", 0))  # compacted and collected meanwhile
    with pytest.raises(OffsetOutOfRangeError, match="expired while it was being read"):
        await _messages(reader, Q, 3, 4)  # the cached listing still names the slice
    now[0] += 61
    assert await _messages(reader, Q, 3, 4) == before


async def test_the_read_service_lists_the_batches_once_for_every_queue() -> None:
    backend, _, _ = await _store()
    lists: list[str] = []
    counting = CountingBackend(backend, on_request=lists.append, on_bytes=lambda _op, _n: None)
    now = [0.0]
    reader = ServingReader(counting, "c", "b", listing_ttl=1.0, clock=lambda: now[0])
    await read_raw(reader, "t", 0, 0, 100, 1 << 20)
    assert lists.count("list") == 2  # queue 0's MANIFEST/ and the broker's _batches/
    await read_raw(reader, "t", 1, 0, 100, 1 << 20)
    assert lists.count("list") == 3  # queue 1's MANIFEST/ only
    now[0] = 2.0  # both listings are stale: each listed again, _batches/ once
    await read_raw(reader, "t", 0, 0, 1, 1 << 20)
    await read_raw(reader, "t", 1, 0, 1, 1 << 20)
    assert lists.count("list") == 6


# -- compressed batches (format 2) ------------------------------------------------------------

ZSTD = FrameSettings(frame_bytes=256, level=3)


async def _mixed_store() -> tuple[MemoryBackend, MemoryBackend]:
    """:func:`_store`'s queues twice: all plain, and with batch 0 compressed (batch 1
    stays plain: a store written before and after the change)."""
    plain, mixed = (MemoryBackend(f"batches-{w}-{uuid.uuid4().hex}") for w in ("p", "m"))
    q0, q1 = chain(Q, [3, 40, 2]), chain(OTHER, [25])
    for backend, frames in ((plain, None), (mixed, ZSTD)):
        await upload(backend, q0[0])
        await upload_batch(backend, [q0[1], q1[0]], sequence=0, frames=frames)
        await upload_batch(backend, [q0[2]], sequence=1)
    return plain, mixed


async def test_a_compressed_batch_reads_as_the_plain_one_for_every_reader() -> None:
    plain, mixed = await _mixed_store()
    assert (await mixed.size(batch_key("c", "b", 0))) < (await plain.size(batch_key("c", "b", 0)))
    want_plain = await load_history(plain, "c", "b")
    got = await load_history(mixed, "c", "b")
    assert [link.commit_log.framed is None for link in got.links()] == [
        True, False, True, False,
    ]  # fmt: skip
    for theirs, ours in zip(want_plain.links(), got.links(), strict=True):
        for a, b in (
            (theirs.commit_log, ours.commit_log),
            (theirs.consume_queue, ours.consume_queue),
        ):
            assert (a.size, a.digest) == (b.size, b.digest)  # (a longer index: another at)
            assert await span_bytes(mixed, b) == await span_bytes(plain, a)
            assert await read_span(mixed, b, 7, b.size - 3) == await read_span(
                plain, a, 7, a.size - 3
            )
        verify_segment(ours, await span_bytes(mixed, ours.commit_log),
                       await span_bytes(mixed, ours.consume_queue), where="mixed")  # fmt: skip
    for queue, end in ((Q, 45), (OTHER, 25)):
        for reader in (ColdReader(plain, "c", "b"), ColdReader(mixed, "c", "b")):
            assert [
                m.queue_offset for m in await reader.read(queue.topic, queue.queue_id, 0, 100)
            ] == list(range(min(end, 100)))
        want_messages = await _messages(ColdReader(plain, "c", "b"), queue, 0, end)
        assert await _messages(ColdReader(mixed, "c", "b"), queue, 0, end) == want_messages
        raw = await read_raw(
            ServingReader(mixed, "c", "b", listing_ttl=60.0),
            queue.topic,
            queue.queue_id,
            4,
            9,
            1 << 20,
        )
        want = await read_raw(
            ServingReader(plain, "c", "b", listing_ttl=60.0),
            queue.topic,
            queue.queue_id,
            4,
            9,
            1 << 20,
        )
        assert b"".join(raw.records) == b"".join(want.records)


async def test_one_record_of_a_compressed_batch_decodes_its_frames_not_the_batch() -> None:
    _, mixed = await _mixed_store()
    key = batch_key("c", "b", 0)
    stored = await mixed.size(key)
    read: list[int] = []
    counting = CountingBackend(
        mixed, on_request=lambda _op: None, on_bytes=lambda _op, n: read.append(n)
    )
    reader = ColdReader(counting, "c", "b")
    await reader.read("t", 0, 20, 1)  # the head and seek table, then one record's frames
    read.clear()
    got = await reader.read("t", 0, 30, 1)
    assert [m.queue_offset for m in got] == [30]
    assert 0 < sum(read) <= 4 * ZSTD.frame_bytes < stored  # its unit's and record's frames
