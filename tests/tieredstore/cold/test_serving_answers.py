"""The read service's ``TSR1`` answers are byte for byte what they were before the
copy-free read path (:mod:`tests.support.serving_reference`), whatever the read-ahead's
part size: records that straddle parts, answers that cross segments and batch slices.

The store is built by hand (queue 0: two segments, then two batch slices; queue 1: a
slice only), in the memory backend.
"""

from __future__ import annotations

import uuid

import pytest

from tests.support.serving_reference import reference_answer
from tests.support.stores.batches import upload_batch
from tests.support.stores.segments import hot_batch, segment_of, upload
from tieredstore.backends.memory import MemoryBackend
from tieredstore.cold.layout import QueuePath
from tieredstore.cold.readahead import ReadAhead
from tieredstore.cold.reader import ColdReader
from tieredstore.cold.segment import Segment
from tieredstore.cold.serving import ServingReader, encode_records, read_raw

Q0 = QueuePath("c", "b", "t", 0)
Q1 = QueuePath("c", "b", "t", 1)
#: Queue 0's links: segments [0, 40) and [40, 70), slices [70, 100) and [100, 120).
COUNTS = (40, 30, 30, 20)


def _chain(queue: QueuePath, counts: tuple[int, ...]) -> list[Segment]:
    out: list[Segment] = []
    offset, cl_base = 0, 0
    for n in counts:
        batch = hot_batch(queue.topic, queue.queue_id, offset, n, body_size=300 + 97 * len(out))
        seg = segment_of(queue, batch, cl_base=cl_base)
        out.append(seg)
        offset, cl_base = seg.manifest.end_offset, seg.manifest.cl_end
    return out


async def _store() -> MemoryBackend:
    backend = MemoryBackend(f"serving-answers-{uuid.uuid4().hex}")
    q0, q1 = _chain(Q0, COUNTS), _chain(Q1, (25,))
    await upload(backend, q0[0])
    await upload(backend, q0[1])
    await upload_batch(backend, [q0[2], q1[0]], sequence=0)
    await upload_batch(backend, [q0[3]], sequence=1)
    return backend


def _reader(backend: MemoryBackend, part_bytes: int | None) -> ColdReader:
    """No read-ahead (None), the cache turned off (0), or parts of ``part_bytes``."""
    if part_bytes is None:
        return ColdReader(backend, "c", "b")
    readahead = ReadAhead(backend, capacity_bytes=64 * part_bytes, part_bytes=max(part_bytes, 1))
    return ServingReader(backend, "c", "b", readahead=readahead, listing_ttl=60.0)


# 1013: odd-sized parts, so record heads and records straddle parts; 0 turns the cache off.
@pytest.mark.parametrize("part_bytes", [None, 0, 1013, 8192, 1 << 20])
async def test_answers_are_the_reference_bytes(part_bytes: int | None) -> None:
    backend = await _store()
    reader = _reader(backend, part_bytes)
    plain = ColdReader(backend, "c", "b")
    requests = [
        (queue, offset, count, size)
        for queue, end in ((0, sum(COUNTS)), (1, 25))
        for offset in (0, 1, 39, 40, 69, 70, 99, end - 1)
        if offset < end
        for count, size in ((1, 1), (7, 1 << 20), (256, 5000), (256, 2 << 20), (1000, 16 << 20))
    ]
    for queue, offset, count, size in requests:
        batch = await read_raw(reader, "t", queue, offset, count, size)
        answer = b"".join(encode_records(batch, await reader.range("t", queue)))
        expected = await reference_answer(plain, "t", queue, offset, count, size)
        assert answer == expected, (queue, offset, count, size)
        assert (
            batch.size == sum(v.nbytes for v in batch.records) == len(answer) - 32 - 20 * len(batch)
        )
    if reader.readahead is not None:
        await reader.readahead.close()


async def test_an_answer_across_links_holds_views_not_copies() -> None:
    backend = await _store()
    reader = _reader(backend, 1013)
    batch = await read_raw(reader, "t", 0, 35, 1000, 16 << 20)
    assert (batch.offset, len(batch)) == (35, sum(COUNTS) - 35)
    # Every record span is a view over a cached part (a bytes object of part_bytes or
    # the object's tail), never a bytes object of its own.
    assert all(isinstance(v.obj, bytes) and len(v.obj) <= 1013 for v in batch.records)
    assert reader.readahead is not None
    await reader.readahead.close()
