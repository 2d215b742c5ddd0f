"""The read service's ``TSR1`` answer as it was built before the copy-free read path:
a pure reference that the package's answers are compared with, byte for byte.

This is the implementation of ``tieredstore.cold.serving`` at commit ``5568ca9``
(``read_raw`` joining the records into one ``bytes``, ``encode_records`` concatenating
the head, the units and the records), kept verbatim but for names, so that a change of
the wire format — or of which records an answer holds — fails a test. It reads through
:meth:`ColdReader.read_commit_log` (one ``bytes`` per range).
"""

from __future__ import annotations

import struct
from typing import Final

import numpy as np

from tieredstore.cold.history import Committed
from tieredstore.cold.reader import ColdRange, ColdReader, check_units
from tieredstore.errors import CorruptRecordError
from tieredstore.formats.consumequeue import CQ_UNIT_DTYPE, Units

_RECORDS_HEAD: Final = struct.Struct(">4sqqqi")
_OFFSETS_AT: Final = 20
_HEAD: Final = np.arange(36, dtype=np.int64)


async def reference_answer(
    reader: ColdReader, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int
) -> bytes:
    """The whole ``TSR1`` answer the old read service gave for this request (the cold
    range as ``reader.range`` answers it after the read, as the handler did)."""
    start, units, records = await _read_raw(reader, topic, queue_id, offset, max_count, max_bytes)
    rng = await reader.range(topic, queue_id)
    return _encode_records(start, units, records, rng)


async def _read_raw(
    reader: ColdReader, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int
) -> tuple[int, Units, bytes]:
    segs, manifest = await reader.locate(topic, queue_id, offset)
    units_parts: list[Units] = []
    records: list[bytes] = []
    start, count, size = offset, 0, 0
    current: Committed | None = manifest
    while current is not None and count < max_count and size < max_bytes:
        n = min(max_count - count, current.end_offset - offset)
        units = check_units(current, offset, await reader.read_units(current, offset, n))
        ends = np.cumsum(units["size"].astype(np.int64)) + size
        k = int(np.searchsorted(ends, max_bytes, side="right"))
        k = max(k, 1 if count == 0 else 0)
        if k == 0:
            break
        units = units[:k]
        records.append(await _read_records(reader, current, offset, units))
        units_parts.append(units)
        count, size, offset = count + k, int(ends[k - 1]), offset + k
        if offset < current.end_offset:
            break
        current = await reader.following(segs, current)
    return start, np.concatenate(units_parts), b"".join(records)


async def _read_records(
    reader: ColdReader, manifest: Committed, offset: int, units: Units
) -> bytes:
    first = int(units["commitlog_offset"][0])
    end = int(units["commitlog_offset"][-1]) + int(units["size"][-1])
    data = await reader.read_commit_log(manifest, first - manifest.cl_base, end - manifest.cl_base)
    cold = units["commitlog_offset"].astype(np.int64)
    heads = np.frombuffer(data, dtype=np.uint8)[(cold - first)[:, None] + _HEAD]
    sizes = heads[:, 0:4].copy().view(">i4")[:, 0]
    offsets = heads[:, _OFFSETS_AT : _OFFSETS_AT + 8].copy().view(">i8")[:, 0]
    physical = heads[:, _OFFSETS_AT + 8 : _OFFSETS_AT + 16].copy().view(">i8")[:, 0]
    expected = offset + np.arange(len(units), dtype=np.int64)
    bad = np.flatnonzero((sizes != units["size"]) | (offsets != expected) | (physical != cold))
    if bad.size:
        raise CorruptRecordError(
            f"record of queue offset {offset + int(bad[0])} does not match its unit",
            where=manifest.commit_log_key,
        )
    return data


def _encode_records(start: int, units: Units, records: bytes, rng: ColdRange) -> bytes:
    head = _RECORDS_HEAD.pack(b"TSR1", rng.min, rng.commit, start, len(units))
    return head + np.ascontiguousarray(units, dtype=CQ_UNIT_DTYPE).tobytes() + records
