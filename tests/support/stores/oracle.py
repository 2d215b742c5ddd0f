"""The test oracle: the plain segment builder production output is compared with.

The sidecar builds segments its own way, for speed:
:mod:`tieredstore.dispatcher.tiering.commitlog_pass` gathers
many queues' records in one commitlog-order read and spools them, and
:mod:`tieredstore.dispatcher.tiering.cold_writer` writes their units and manifest. This module
builds the same segment the simple way, one queue at a time, all in memory, from the format's rules
alone (:mod:`tieredstore.cold.segment`): tests compare the sidecar's objects with it byte for
byte, and test helpers (:mod:`tests.support.stores.segments`,
:mod:`tests.support.stores.coldimage`) use it to make cold stores without a sidecar. The
sidecar never imports it (an import-linter contract keeps ``tests.support`` out).

:class:`SegmentBuilder` takes records one at a time (:meth:`~SegmentBuilder.add`) or as a
batch with their hot CQ units (:meth:`~SegmentBuilder.extend`, vectorised by
:func:`rewrite_records`), and :meth:`~SegmentBuilder.seal` returns a
:class:`~tieredstore.cold.segment.Segment`; :func:`build_segment` does all three at once.
Every record is held to the one record-head check, :class:`~tieredstore.cold.segment.RecordHeads`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tieredstore.cold.digests import digest
from tieredstore.cold.layout import MAX_OFFSET, QueuePath, new_attempt, object_name
from tieredstore.cold.manifest import DIGEST_ALGORITHM, FORMAT_VERSION, Manifest, ObjectRef
from tieredstore.cold.segment import MIN_RECORD_SIZE, RecordHeads, Segment
from tieredstore.errors import CorruptRecordError
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE, Units, encode_units, make_units
from tieredstore.formats.record import PHYSICAL_OFFSET_AT
from tieredstore.formats.vector import scatter_be_i64, store_timestamps

__all__ = ["RewrittenBatch", "SegmentBuilder", "build_segment", "rewrite_records"]

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class RewrittenBatch:
    """Hot records turned cold: concatenated, physicalOffset rewritten, checked."""

    data: bytes
    min_store_timestamp: int
    max_store_timestamp: int


def rewrite_records(
    records: Sequence[bytes],
    sizes: npt.ArrayLike,
    *,
    start_offset: int,
    cold_base: int,
    where: Callable[[int], str],
) -> RewrittenBatch:
    """Check a batch of consecutive hot records and rewrite them for cold (vectorised).

    ``records[i]`` is the hot record of queue offset ``start_offset + i``; ``sizes[i]`` is
    its hot CQ unit's size. Every record must be ``sizes[i]`` bytes (at least
    :data:`MIN_RECORD_SIZE`) with a known magic, totalSize == size and queueOffset field
    == its queue offset. Its bytes [28, 36) become its cold offset: ``cold_base`` plus its
    position in the batch. Store timestamps are read from the records.

    Raises CorruptRecordError naming ``where(queue_offset)`` of the first bad record.
    """
    size_arr: I64 = np.asarray(sizes, dtype=np.int64)
    if len(records) != len(size_arr):
        raise ValueError(f"{len(records)} records but {len(size_arr)} CQ units")
    if not records:
        raise ValueError("an empty batch: there is no empty segment")
    lengths: I64 = np.fromiter(map(len, records), dtype=np.int64, count=len(records))
    bad = np.flatnonzero((lengths != size_arr) | (size_arr < MIN_RECORD_SIZE))
    if bad.size:
        i = int(bad[0])
        raise CorruptRecordError(
            f"record is {int(lengths[i])} bytes, its CQ unit says {int(size_arr[i])} "
            f"(minimum {MIN_RECORD_SIZE})",
            where=where(start_offset + i),
        )
    batch = np.frombuffer(bytearray().join(records), dtype=np.uint8)  # one copy, writable
    starts: I64 = np.concatenate((np.zeros(1, np.int64), np.cumsum(size_arr)[:-1]))
    offsets: I64 = start_offset + np.arange(len(records), dtype=np.int64)
    heads = RecordHeads.check(batch, starts, size_arr, offsets)
    first = heads.first_bad()
    if first is not None:
        raise CorruptRecordError(heads.fault(first), where=where(int(offsets[first])))
    stamps = store_timestamps(batch, starts)
    scatter_be_i64(batch, starts + PHYSICAL_OFFSET_AT, cold_base + starts)
    return RewrittenBatch(batch.tobytes(), int(stamps.min()), int(stamps.max()))


class SegmentBuilder:
    """Accumulates one queue's hot records, in queue-offset order, into a segment.

    Records must arrive contiguous from ``start_offset``; each is checked against what
    the caller says about it (size == len == totalSize field, queueOffset field, store
    timestamp) and its physicalOffset is rewritten as it is appended. A mismatch is hot
    data that cannot be tiered as is: :class:`CorruptRecordError`. Passing the wrong
    queue offset is a caller bug: :class:`ValueError`.

    The builder holds the commitlog bytes in memory (one segment, at most the byte limit
    plus one record). :meth:`seal` hands them over once; the builder is then spent.
    """

    def __init__(self, queue: QueuePath, *, start_offset: int, cl_base: int) -> None:
        if not 0 <= start_offset <= MAX_OFFSET // CQ_UNIT_SIZE:
            raise ValueError(f"start_offset {start_offset} out of range")
        if not 0 <= cl_base <= MAX_OFFSET:
            raise ValueError(f"cl_base {cl_base} out of range")
        self.queue = queue
        self.start_offset = start_offset
        self.cl_base = cl_base
        self._buf = bytearray()
        self._sizes: list[int] = []
        self._tags: list[int] = []
        self._min_ts = 0
        self._max_ts = 0
        self._sealed = False

    # -- progress, for the group-commit decision -------------------------------------
    @property
    def count(self) -> int:
        """Records added so far."""
        return len(self._sizes)

    @property
    def nbytes(self) -> int:
        """Commitlog bytes added so far."""
        return len(self._buf)

    @property
    def next_offset(self) -> int:
        """The queue offset the next record must have."""
        return self.start_offset + self.count

    @property
    def cl_end(self) -> int:
        """The cold commitlog offset right after the last record added."""
        return self.cl_base + self.nbytes

    @property
    def min_store_timestamp(self) -> int:
        """Oldest store time added so far; ValueError while empty (there is none)."""
        self._require_records()
        return self._min_ts

    @property
    def max_store_timestamp(self) -> int:
        """Newest store time added so far; ValueError while empty (there is none)."""
        self._require_records()
        return self._max_ts

    def _require_records(self) -> None:
        if not self._sizes:
            raise ValueError("an empty segment builder has no store timestamps")

    def _require_open(self) -> None:
        if self._sealed:
            raise ValueError("segment builder already sealed")

    def _where(self, queue_offset: int) -> str:
        return f"hot record of {self.queue} at queue offset {queue_offset}"

    def _note_timestamps(self, low: int, high: int) -> None:
        if self._sizes:
            self._min_ts, self._max_ts = min(self._min_ts, low), max(self._max_ts, high)
        else:
            self._min_ts, self._max_ts = low, high

    # -- adding ----------------------------------------------------------------------
    def add(
        self,
        queue_offset: int,
        record: bytes | bytearray | memoryview,
        size: int,
        tags_code: int,
        store_timestamp: int,
    ) -> None:
        """Append one hot record (``size`` and ``tags_code`` from its hot CQ unit)."""
        self._require_open()
        if queue_offset != self.next_offset:
            raise ValueError(f"queue offset {queue_offset} added, expected {self.next_offset}")
        batch = rewrite_records(
            [bytes(record)], [size], start_offset=queue_offset, cold_base=self.cl_end,
            where=self._where,
        )  # fmt: skip
        if batch.min_store_timestamp != store_timestamp:
            raise CorruptRecordError(
                f"storeTimestamp field {batch.min_store_timestamp} != {store_timestamp} given",
                where=self._where(queue_offset),
            )
        self._note_timestamps(store_timestamp, store_timestamp)
        self._buf += batch.data
        self._sizes.append(size)
        self._tags.append(tags_code)

    def extend(self, records: Sequence[bytes], units: Units) -> None:
        """Append a batch: ``records[i]`` is the hot record of queue offset
        ``next_offset + i`` and ``units[i]`` its hot CQ unit (size, tagsCode used).

        Vectorised (see :func:`rewrite_records`). On error nothing is appended.
        """
        self._require_open()
        if not records and not len(units):
            return
        batch = rewrite_records(
            records,
            units["size"],
            start_offset=self.next_offset,
            cold_base=self.cl_end,
            where=self._where,
        )
        self._note_timestamps(batch.min_store_timestamp, batch.max_store_timestamp)
        self._buf += batch.data
        self._sizes.extend(units["size"].astype(np.int64).tolist())
        self._tags.extend(units["tags_code"].astype(np.int64).tolist())

    # -- sealing ---------------------------------------------------------------------
    def seal(
        self, *, writer_id: str, lease_epoch: int, created_at_ms: int, attempt: str | None = None
    ) -> Segment:
        """Return the segment of everything added; the builder is spent afterwards.

        ``attempt`` names the upload attempt in the data objects' names (a fresh one when
        not given). Raises ValueError when nothing was added: there is no empty segment.
        """
        self._require_open()
        self._require_records()
        sizes = np.asarray(self._sizes, dtype=np.int64)
        cold_offsets = self.cl_base + np.concatenate((np.zeros(1, np.int64), np.cumsum(sizes)[:-1]))
        cq = encode_units(make_units(cold_offsets, sizes, np.asarray(self._tags, np.int64)))
        cl = bytes(self._buf)
        self._sealed = True
        self._buf = bytearray()
        attempt = new_attempt() if attempt is None else attempt
        manifest = Manifest(
            format_version=FORMAT_VERSION,
            cluster=self.queue.cluster,
            broker=self.queue.broker,
            topic=self.queue.topic,
            queue_id=self.queue.queue_id,
            start_offset=self.start_offset,
            end_offset=self.start_offset + len(sizes),
            cl_base=self.cl_base,
            cl_end=self.cl_base + len(cl),
            commit_log=ObjectRef(object_name(self.cl_base, attempt), len(cl), digest(cl)),
            consume_queue=ObjectRef(
                object_name(self.start_offset * CQ_UNIT_SIZE, attempt), len(cq), digest(cq)
            ),
            digest_algorithm=DIGEST_ALGORITHM,
            min_store_timestamp=self._min_ts,
            max_store_timestamp=self._max_ts,
            message_count=len(sizes),
            writer_id=writer_id,
            lease_epoch=lease_epoch,
            created_at_ms=created_at_ms,
        )
        return Segment(manifest, cl, cq)


def build_segment(
    queue: QueuePath,
    *,
    start_offset: int,
    cl_base: int,
    records: Sequence[bytes],
    units: Units,
    writer_id: str,
    lease_epoch: int,
    created_at_ms: int,
    attempt: str | None = None,
) -> Segment:
    """Build a whole segment from a batch of hot records and their hot CQ units.

    ``attempt`` names the data objects' upload attempt (a fresh one when not given).
    """
    builder = SegmentBuilder(queue, start_offset=start_offset, cl_base=cl_base)
    builder.extend(records, units)
    return builder.seal(
        writer_id=writer_id, lease_epoch=lease_epoch, created_at_ms=created_at_ms, attempt=attempt
    )
