"""The read service's answers: raw cold records for the broker plugin, and their wire format.

The broker plugin (``broker-plugin/``) asks the sidecar for what a broker would read from
its own commitlog and consume queue: the records as cold holds them, byte for byte, and
their consume-queue units, so that it can filter by tagsCode (and SQL92 on the record)
exactly as the broker does on hot data. :func:`read_raw` reads them through a
:class:`~tieredstore.cold.reader.ColdReader` (manifests, never the catalogue; no lease), and
the ``encode_*`` functions write the binary answers of ``docs/serving.md``.

All integers are big-endian (as RocketMQ's own formats), lengths are exact, and every
answer starts with a 4-byte magic naming its kind and version:

``TSR1`` — records (``GET /v1/cold/records``)::

    magic      4   b"TSR1"
    coldMin    8   int64, the queue's cold min
    coldCommit 8   int64, the queue's cold commit (one past the last cold offset)
    offset     8   int64, queue offset of the first record in this answer
    count      4   int32, records in this answer (>= 1)
    units      count x 20   the CQ units as cold stores them: cold commitlog offset
                            int64, size int32, tagsCode int64
    records    sum(size)    the records, concatenated in queue-offset order

``TSQ1`` — range (``GET /v1/cold/range``): magic, coldMin int64, coldCommit int64,
earliestStoreTime int64 (storeTimestamp of the oldest cold message; 0 when
``coldMin == coldCommit``, i.e. cold holds nothing of the queue).

``TSO1`` — offset by time (``GET /v1/cold/offset``): magic, offset int64, coldMin int64,
coldCommit int64; ``offset`` as :meth:`ColdReader.offset_by_time`.

A record differs from the broker's hot record only in bytes ``[28, 36)``, its
physicalOffset field: cold rewrites it to the record's cold commitlog offset (the unit's
first field), so the ``offsetMsgId`` a consumer builds from it differs from the one the
producer got. Every record of an answer has been checked against its unit (size,
queueOffset and physicalOffset fields) before it is sent.

Records are never copied here: :func:`read_raw` keeps them as views over the read-ahead
cache's parts (:class:`~tieredstore.cold.pieces.Pieces`), reading only their 36 header
bytes for the checks, and :func:`encode_records` returns the answer as those views after
one small head (``docs/serving.md``, "The read path without copies").
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from tieredstore.cold.history import Committed, Withdrawal
from tieredstore.cold.layout import QueuePath
from tieredstore.cold.pieces import Pieces
from tieredstore.cold.reader import ColdRange, ColdReader, Segments, check_units
from tieredstore.errors import CorruptRecordError, OffsetOutOfRangeError
from tieredstore.formats.consumequeue import CQ_UNIT_DTYPE, Units

if TYPE_CHECKING:
    from tieredstore.backends.base import Backend

__all__ = [
    "OFFSET_MAGIC",
    "RANGE_MAGIC",
    "RECORDS_MAGIC",
    "RawBatch",
    "ServingReader",
    "encode_offset",
    "encode_range",
    "encode_records",
    "read_raw",
]

RECORDS_MAGIC: Final = b"TSR1"
RANGE_MAGIC: Final = b"TSQ1"
OFFSET_MAGIC: Final = b"TSO1"
_RECORDS_HEAD: Final = struct.Struct(">4sqqqi")
_RANGE: Final = struct.Struct(">4sqqq")
_OFFSET: Final = struct.Struct(">4sqqq")
#: Record fields checked before a record is sent: totalSize, then queueOffset and
#: physicalOffset from this byte on.
_OFFSETS_AT: Final = 20


class ServingReader(ColdReader):
    """A :class:`ColdReader` that reuses each queue's manifest listing for ``listing_ttl``
    seconds (``clock``), so a consumer's pulls do not list the cold store once each.

    The broker's batch links (``_batches/``, shared by every queue) are listed once per
    ``listing_ttl`` too, for all queues at once, not once per queue listing.

    A stale listing can only lack the newest segments or slices or hold expired ones: a
    read past its end lists both again at once (:meth:`locate`), and an expired segment
    is an offset out of range, as it is without the cache.
    """

    def __init__(
        self,
        backend: Backend,
        cluster: str,
        broker: str,
        *,
        listing_ttl: float,
        clock: Callable[[], float] = time.monotonic,
        **kwargs: Any,
    ) -> None:
        super().__init__(backend, cluster, broker, **kwargs)
        self.listing_ttl = listing_ttl
        self._clock = clock
        self._listings: dict[QueuePath, tuple[float, Segments]] = {}
        self._batch_links: _Listed | None = None

    async def _segments(self, queue: QueuePath) -> Segments:
        now = self._clock()
        cached = self._listings.get(queue)
        if cached is not None and now - cached[0] < self.listing_ttl:
            return cached[1]
        segs = await super()._segments(queue)
        self._listings[queue] = (now, segs)
        return segs

    async def _slices(self, queue: QueuePath) -> list[Committed | Withdrawal]:
        now = self._clock()
        cached = self._batch_links
        if cached is None or now - cached.at >= self.listing_ttl:
            cached = self._batch_links = _Listed(now, await self._batches.by_queue())
        return cached.links.get(queue, [])

    async def locate(self, topic: str, queue_id: int, offset: int) -> tuple[Segments, Committed]:
        try:
            return await super().locate(topic, queue_id, offset)
        except OffsetOutOfRangeError:
            if self._listings.pop(self.queue_path(topic, queue_id), None) is None:
                raise
            self._batch_links = None
            return await super().locate(topic, queue_id, offset)  # listed afresh


@dataclass(frozen=True, slots=True)
class _Listed:
    """The broker's batch links by queue, as listed at ``at`` (the reader's clock)."""

    at: float
    links: dict[QueuePath, list[Committed | Withdrawal]]


@dataclass(frozen=True, slots=True)
class RawBatch:
    """Queue offsets ``[offset, offset + len(units))`` as cold holds them.

    ``records`` are the records, concatenated in queue-offset order, as read-only views
    over the read-ahead cache's parts (or the backend's answers): one or more views per
    segment or slice read, never copied; ``size`` is their total length.
    """

    offset: int
    units: Units
    records: tuple[memoryview, ...]
    size: int

    def __len__(self) -> int:
        return len(self.units)


async def read_raw(
    reader: ColdReader, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int
) -> RawBatch:
    """Up to ``max_count`` records from ``offset``, stopping before the record that would
    take the answer past ``max_bytes`` (at least one record, however large: never a stall).

    The answer may cross segments; it ends at cold commit or a gap (offsets lost before
    tiering), and the caller continues from ``offset + len(batch)``. Every record has
    been checked against its unit; none is copied (:class:`RawBatch`).

    Raises:
        OffsetOutOfRangeError: ``offset`` is not in what cold holds.
        CorruptUnitError / CorruptRecordError: damaged cold data, named by key and byte.
    """
    if max_count < 1 or max_bytes < 1:
        raise ValueError("max_count and max_bytes must be positive")
    segs, manifest = await reader.locate(topic, queue_id, offset)
    units_parts: list[Units] = []
    records: list[memoryview] = []
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
        records += (await _read_records(reader, current, offset, units)).views
        units_parts.append(units)
        count, size, offset = count + k, int(ends[k - 1]), offset + k
        if offset < current.end_offset:
            break
        current = await reader.following(segs, current)
    return RawBatch(start, np.concatenate(units_parts), tuple(records), size)


async def _read_records(
    reader: ColdReader, manifest: Committed, offset: int, units: Units
) -> Pieces:
    """The records the (checked, contiguous) units point at, each checked against its unit."""
    first = int(units["commitlog_offset"][0])
    end = int(units["commitlog_offset"][-1]) + int(units["size"][-1])
    data = await reader.read_commit_log_pieces(
        manifest, first - manifest.cl_base, end - manifest.cl_base
    )
    _check_records(
        data,
        first,
        offset,
        units,
        manifest.commit_log_key,
        manifest.cl_base - manifest.commit_log.at,
    )
    return data


#: The header bytes each check reads: totalSize [0, 4), queueOffset [20, 28) and
#: physicalOffset [28, 36) (every unit is at least MIN_RECORD_SIZE, checked before).
_HEAD_BYTES: Final = 36


def _check_records(
    data: Pieces, first: int, offset: int, units: Units, key: str, cl_base: int
) -> None:
    """Each record's totalSize, queueOffset and physicalOffset fields equal its unit's,
    for all records at once (numpy: no Python work per record). Only the 36 header bytes
    of each record are read (:meth:`Pieces.rows`), whichever parts they lie in."""
    cold = units["commitlog_offset"].astype(np.int64)
    heads = data.rows(cold - first, _HEAD_BYTES)
    sizes = heads[:, 0:4].copy().view(">i4")[:, 0]
    offsets = heads[:, _OFFSETS_AT : _OFFSETS_AT + 8].copy().view(">i8")[:, 0]
    physical = heads[:, _OFFSETS_AT + 8 : _OFFSETS_AT + 16].copy().view(">i8")[:, 0]
    expected = offset + np.arange(len(units), dtype=np.int64)
    bad = np.flatnonzero((sizes != units["size"]) | (offsets != expected) | (physical != cold))
    if bad.size:
        i = int(bad[0])
        fields = (int(sizes[i]), int(offsets[i]), int(physical[i]))
        want = (int(units["size"][i]), offset + i, int(cold[i]))
        raise CorruptRecordError(
            f"record of queue offset {offset + i}: totalSize/queueOffset/physicalOffset "
            f"fields {fields}, expected {want}",
            where=f"{key}@{int(cold[i]) - cl_base}",
        )


def encode_records(batch: RawBatch, rng: ColdRange) -> tuple[bytes | memoryview, ...]:
    """The ``TSR1`` answer for ``batch`` of a queue whose cold range is ``rng``, as the
    buffers to write in order: the head and units (one small ``bytes``), then the
    records' views as :func:`read_raw` read them. ``b"".join`` of them is the answer;
    the records are not copied."""
    head = _RECORDS_HEAD.pack(RECORDS_MAGIC, rng.min, rng.commit, batch.offset, len(batch))
    units = np.ascontiguousarray(batch.units, dtype=CQ_UNIT_DTYPE).view(np.uint8)
    return (b"".join((head, units.data)), *batch.records)


def encode_range(rng: ColdRange, earliest_store_time: int) -> bytes:
    """The ``TSQ1`` answer; ``earliest_store_time`` is 0 when ``rng`` is empty."""
    return _RANGE.pack(RANGE_MAGIC, rng.min, rng.commit, earliest_store_time)


def encode_offset(offset: int, rng: ColdRange) -> bytes:
    """The ``TSO1`` answer."""
    return _OFFSET.pack(OFFSET_MAGIC, offset, rng.min, rng.commit)
