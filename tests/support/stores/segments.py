"""Hot records and cold segments built by hand, without a hot store.

Records are real v1/v2 commitlog records (``MessageRecord.build``) with interleaved hot
commitlog offsets, as a broker with several queues would write them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from tests.support.stores.oracle import build_segment
from tieredstore.backends.base import Backend
from tieredstore.cold.history import Committed, EntryKind, Span
from tieredstore.cold.layout import QueuePath
from tieredstore.cold.manifest import Manifest
from tieredstore.cold.segment import Segment
from tieredstore.formats.consumequeue import Units, make_units
from tieredstore.formats.record import MessageRecord
from tieredstore.formats.tags import tags_code

T0 = 1_700_000_000_000
WRITER = "6f1c0c52-7a55-4d5e-9d7e-0c4c3c1b2a10@host-1"
#: The upload attempt of every segment these helpers build: equal inputs, equal segments.
ATTEMPT = "0123456789abcdef"


@dataclass(frozen=True)
class HotBatch:
    """Hot records of queue offsets ``[start, start + len(records))`` and their CQ units."""

    start: int
    records: list[bytes]
    units: Units
    timestamps: list[int]


def hot_batch(
    topic: str,
    queue_id: int,
    start: int,
    count: int,
    *,
    t0: int = T0,
    step_ms: int = 10,
    body_size: int = 16,
) -> HotBatch:
    """``count`` records of one queue; bodies vary in size so offsets are irregular."""
    records: list[bytes] = []
    hot_offsets: list[int] = []
    codes: list[int] = []
    stamps: list[int] = []
    for i in range(count):
        q = start + i
        tags = f"tag{q % 3}"
        ts = t0 + q * step_ms
        hot_offset = 1_000_000 + q * 4096  # other queues' records sit in between
        rec = MessageRecord.build(
            topic=topic,
            body=bytes([q % 251]) * (body_size + q % 7),
            queue_id=queue_id,
            queue_offset=q,
            physical_offset=hot_offset,
            store_timestamp=ts,
            properties={"TAGS": tags, "UNIQ_KEY": f"id-{q}"},
        )
        records.append(rec.encode())
        hot_offsets.append(hot_offset)
        codes.append(tags_code(tags))
        stamps.append(ts)
    units = make_units(hot_offsets, [len(r) for r in records], codes)
    return HotBatch(start, records, units, stamps)


def segment_of(
    queue: QueuePath,
    batch: HotBatch,
    *,
    cl_base: int,
    lease_epoch: int = 1,
    created_at_ms: int = T0 + 60_000,
) -> Segment:
    return build_segment(
        queue,
        start_offset=batch.start,
        cl_base=cl_base,
        records=batch.records,
        units=batch.units,
        writer_id=WRITER,
        lease_epoch=lease_epoch,
        created_at_ms=created_at_ms,
        attempt=ATTEMPT,
    )


def chain(queue: QueuePath, counts: Sequence[int], *, start: int = 0) -> list[Segment]:
    """Consecutive segments of ``counts`` records each, from queue offset ``start``."""
    out: list[Segment] = []
    offset, cl_base = start, 0
    for n in counts:
        seg = segment_of(queue, hot_batch(queue.topic, queue.queue_id, offset, n), cl_base=cl_base)
        out.append(seg)
        offset, cl_base = seg.manifest.end_offset, seg.manifest.cl_end
    return out


async def upload(backend: Backend, segment: Segment) -> Manifest:
    """Write a segment in commit order: COMMIT_LOG, CONSUME_QUEUE, then the manifest."""
    m = segment.manifest
    await backend.write(m.commit_log_key, segment.commit_log)
    await backend.write(m.consume_queue_key, segment.consume_queue)
    await backend.write(m.key, m.to_json())
    return m


def packed(
    segments: Sequence[Segment], key: str, *, sequence: int = 1, pad: int = 37
) -> tuple[bytes, list[Committed]]:
    """One object (to store at ``key``) holding every segment's COMMIT_LOG and
    CONSUME_QUEUE bytes at offsets inside it, ``pad`` filler bytes before each and at the
    end, and each segment as a batch slice of it (:class:`EntryKind.SLICE`, batch
    ``sequence``) whose spans are those ranges: the same offsets and bytes as the
    segment, laid out as a batch object's slices are, without the batch format."""
    parts: list[bytes] = []
    at = 0

    def put(data: bytes) -> int:
        nonlocal at
        parts.append(bytes([0xA5]) * pad + data)
        at += pad + len(data)
        return at - len(data)

    placed = [(seg, put(seg.commit_log), put(seg.consume_queue)) for seg in segments]
    parts.append(bytes([0x5A]) * pad)
    size = at + pad
    links = []
    for seg, cl_at, cq_at in placed:
        whole = Committed.of_manifest(seg.manifest)
        links.append(
            dataclasses.replace(
                whole,
                kind=EntryKind.SLICE,
                key=key,
                sequence=sequence,
                manifest=None,
                commit_log=Span(key, cl_at, whole.commit_log.size, whole.commit_log.digest, size),
                consume_queue=Span(
                    key, cq_at, whole.consume_queue.size, whole.consume_queue.digest, size
                ),
            )
        )
    return b"".join(parts), links
