"""The archive view of the cold store: one row per committed message, as Arrow.

Both ways of querying the archive share this module: the Spark data source
(:mod:`tieredstore.verifier.archive`) and ``tieredstore export`` (Parquet). A row is what a consumer
sees of one message, plus where it lives:

===================  ==============================  ==========================================
column               Arrow type                      value
===================  ==============================  ==========================================
``topic``            string                          the record's topic
``queue_id``         int32                           the record's queue
``queue_offset``     int64                           its consume-queue offset
``store_timestamp``  timestamp[us, UTC]              storeTimestamp (the broker's ms, exact)
``born_timestamp``   timestamp[us, UTC]              bornTimestamp (the producer's ms);
                                                     a time outside years 1 to 9999 (a
                                                     damaged field) is refused
``msg_id``           string, null when unset         client id, property ``UNIQ_KEY``
``offset_msg_id``    string                          store host + *cold* commitlog offset
``keys``             list<string>                    property ``KEYS`` split on spaces
``tags``             string, null when unset         property ``TAGS``
``properties``       map<string, string>             every property, as the record holds them
``body``             binary                          the body as a consumer gets it
                                                     (decompressed when the producer compressed)
``body_size``        int32                           ``len(body)``
``sys_flag``         int32                           sysFlag as a consumer sees it
                                                     (COMPRESSED cleared: body is inflated)
``reconsume_times``  int32                           the record's reconsumeTimes
``broker``           string                          the broker whose cold prefix holds it
``cluster``          string                          its cluster
===================  ==============================  ==========================================

Every field comes from :class:`~tieredstore.cold.reader.ColdMessage` as ``tieredstore read``
prints it (``offset_msg_id`` is the same cold offset id; see :mod:`tieredstore.cold.reader`).
Rows are decoded by :func:`~tieredstore.cold.reader.decode_messages`: each record is checked
against its consume-queue unit, and a whole link of the committed history
(:meth:`SegmentSlice.whole`: a segment, or a batch slice) is first checked against its
commit point (sizes and digests of its spans' bytes).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tieredstore.cold.history import Committed, as_link
from tieredstore.cold.manifest import Manifest
from tieredstore.cold.reader import ColdMessage, check_units, decode_messages
from tieredstore.cold.segment import verify_segment
from tieredstore.errors import CorruptRecordError
from tieredstore.formats.arrownp import primitive
from tieredstore.formats.columnar import (
    RecordColumns,
    decode_columns,
    equal_each,
    offset_msg_ids,
    repeat_string,
)
from tieredstore.formats.consumequeue import Units
from tieredstore.formats.propcolumns import property_columns
from tieredstore.formats.record import SysFlag
from tieredstore.formats.vector import store_timestamps

__all__ = [
    "ARCHIVE_COLUMNS",
    "ARCHIVE_SCHEMA",
    "BATCH_BYTES",
    "BATCH_ROWS",
    "SegmentSlice",
    "TimeWindow",
    "record_span",
    "window_mask",
]

#: Messages per record batch, at most; with :data:`BATCH_BYTES`, bounds a task's memory
#: beside the segment's bytes.
BATCH_ROWS: Final = 8192
#: Record bytes per record batch, at most (a batch holds one message at least).
BATCH_BYTES: Final = 16 << 20

_TIMESTAMP: Final = pa.timestamp("us", tz="UTC")
_US_PER_MS: Final = 1000
# A timestamp column holds years 1 to 9999 (Python's datetime and Spark's TimestampType):
# a record whose time lies outside (a damaged field) is refused, never wrapped around.
_MIN_MS: Final = -62_135_596_800_000
_MAX_MS: Final = 253_402_300_799_999
_COMPRESSED: Final = int(SysFlag.COMPRESSED)

#: The archive's columns, in order (see the module docstring).
ARCHIVE_SCHEMA: Final = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("queue_id", pa.int32(), nullable=False),
        pa.field("queue_offset", pa.int64(), nullable=False),
        pa.field("store_timestamp", _TIMESTAMP, nullable=False),
        pa.field("born_timestamp", _TIMESTAMP, nullable=False),
        pa.field("msg_id", pa.string()),
        pa.field("offset_msg_id", pa.string(), nullable=False),
        pa.field("keys", pa.list_(pa.string()), nullable=False),
        pa.field("tags", pa.string()),
        pa.field("properties", pa.map_(pa.string(), pa.string()), nullable=False),
        pa.field("body", pa.binary(), nullable=False),
        pa.field("body_size", pa.int32(), nullable=False),
        pa.field("sys_flag", pa.int32(), nullable=False),
        pa.field("reconsume_times", pa.int32(), nullable=False),
        pa.field("broker", pa.string(), nullable=False),
        pa.field("cluster", pa.string(), nullable=False),
    ]
)
ARCHIVE_COLUMNS: Final = tuple(ARCHIVE_SCHEMA.names)


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """Store times ``[lo, hi]`` in epoch ms, both ends inclusive; None is unbounded."""

    lo: int | None = None
    hi: int | None = None

    @property
    def unbounded(self) -> bool:
        return self.lo is None and self.hi is None

    def overlaps(self, first: int, last: int) -> bool:
        """Whether any time in ``[first, last]`` lies inside the window."""
        return (self.lo is None or last >= self.lo) and (self.hi is None or first <= self.hi)

    def mask(self, stamps: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """One flag per store time: inside the window."""
        keep = np.ones(stamps.shape, dtype=np.bool_)
        if self.lo is not None:
            keep &= stamps >= self.lo
        if self.hi is not None:
            keep &= stamps <= self.hi
        return keep


def window_mask(
    window: TimeWindow, units: Units, data: bytes, data_base: int
) -> npt.NDArray[np.bool_] | None:
    """Flags of the units whose record's store time lies in ``window`` (None: all do).

    Reads only the storeTimestamp field of each record (vectorised), so records outside
    the window are never decoded. ``data`` holds the records from cold offset
    ``data_base`` on; ``units`` must have been checked against it.
    """
    if window.unbounded or not len(units):
        return None
    arr = np.frombuffer(data, dtype=np.uint8)
    positions = units["commitlog_offset"].astype(np.int64) - data_base
    return window.mask(store_timestamps(arr, positions))


@dataclass(frozen=True)
class SegmentSlice:
    """Queue offsets ``[offset, offset + len(units))`` of one committed link (a segment
    or a batch slice): their checked CQ units and the COMMIT_LOG bytes (from cold offset
    ``data_base`` on) that hold their records. Build one with :meth:`whole` or
    :meth:`part` (either takes a link or a segment's manifest).
    """

    link: Committed
    offset: int
    units: Units
    data: bytes
    data_base: int

    @classmethod
    def whole(
        cls,
        link: Committed | Manifest,
        commit_log: bytes,
        consume_queue: bytes,
        *,
        where: str = "",
    ) -> SegmentSlice:
        """A whole link, checked against its commit point and itself first
        (:func:`~tieredstore.cold.segment.verify_segment`: sizes, digests, unit
        pointers). ``commit_log`` and ``consume_queue`` are its spans' bytes (a segment's
        whole objects); ``where`` (e.g. the cold URL) prefixes object keys in errors.

        Raises:
            SizeMismatchError / DigestMismatchError / CorruptDataError: as verify_segment.
        """
        c = as_link(link)
        units = verify_segment(c, commit_log, consume_queue, where=where)
        return cls(c, c.start_offset, units, commit_log, c.cl_base)

    @classmethod
    def part(
        cls, link: Committed | Manifest, offset: int, units: Units, data: bytes
    ) -> SegmentSlice:
        """Some offsets of a link: ``units`` from its CONSUME_QUEUE at ``offset``, and
        ``data`` the COMMIT_LOG bytes :func:`record_span` named for them.

        Raises:
            CorruptUnitError: units that do not point at contiguous records of the link.
        """
        c = as_link(link)
        check_units(c, offset, units)
        first, _ = record_span(units)
        return cls(c, offset, units, data, first)

    def batches(
        self,
        *,
        cluster: str,
        broker: str,
        window: TimeWindow | None = None,
        rows: int = BATCH_ROWS,
    ) -> Iterator[pa.RecordBatch]:
        """The slice's archive rows, ``rows`` messages (and :data:`BATCH_BYTES` record
        bytes) at a time; with ``window``, only messages whose store time lies in it
        (others never decoded).

        Raises:
            CorruptRecordError / TruncatedDataError: as
                :func:`~tieredstore.cold.reader.decode_messages` (the first bad record of a
                batch is decoded by it, so the error is the one ``read`` gives).
            CorruptRecordError: a store or born timestamp outside years 1 to 9999, which
                a timestamp column cannot hold (``read`` prints such a record as it is).
        """
        keep = (
            None if window is None else window_mask(window, self.units, self.data, self.data_base)
        )
        picked = np.arange(len(self.units)) if keep is None else np.flatnonzero(keep)
        for part in _batches(picked, self.units["size"][picked].astype(np.int64), rows):
            yield self._batch(part, cluster=cluster, broker=broker)

    def _batch(self, picked: npt.NDArray[np.intp], *, cluster: str, broker: str) -> pa.RecordBatch:
        """The archive rows of units ``picked`` (indices into :attr:`units`), decoded
        column by column (:func:`~tieredstore.formats.columnar.decode_columns`)."""
        units = self.units[picked]
        cold = units["commitlog_offset"].astype(np.int64)
        cols = decode_columns(self.data, cold - self.data_base, units["size"].astype(np.int64))
        self._check(picked, units, cols)
        body = self._consumer_bodies(picked, cols)
        props = property_columns(cols.properties)
        n = len(picked)
        columns = [
            repeat_string(self.link.topic, n),
            primitive(cols.queue_id.astype(np.int32), pa.int32()),
            primitive(self.offset + picked.astype(np.int64), pa.int64()),
            primitive(cols.store_timestamp * _US_PER_MS, _TIMESTAMP),
            primitive(cols.born_timestamp * _US_PER_MS, _TIMESTAMP),
            props.msg_id,
            offset_msg_ids(cols.store_host, cols.physical_offset),
            props.keys,
            props.tags,
            props.properties,
            body,
            pc.binary_length(body),
            primitive((cols.sys_flag & ~_COMPRESSED).astype(np.int32), pa.int32()),
            primitive(cols.reconsume_times.astype(np.int32), pa.int32()),
            repeat_string(broker, n),
            repeat_string(cluster, n),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=ARCHIVE_SCHEMA)

    def _check(self, picked: npt.NDArray[np.intp], units: Units, cols: RecordColumns) -> None:
        """Raise, as ``read`` would, for the first record that does not decode or does not
        match its unit (totalSize, queueOffset, physicalOffset, queue id, topic)."""
        m = self.link
        bad = (
            cols.bad
            | (cols.total_size != units["size"])
            | (cols.queue_offset != self.offset + picked)
            | (cols.physical_offset != units["commitlog_offset"])
            | (cols.queue_id != m.queue_id)
            | ~equal_each(cols.topic, m.topic.encode())
        )
        if bad.any():
            self._decode_one(int(picked[int(np.argmax(bad))]))  # raises the error
            raise AssertionError("a record the columnar decoder refused decodes")
        for name, ms in (("storeTimestamp", cols.store_timestamp),
                         ("bornTimestamp", cols.born_timestamp)):  # fmt: skip
            outside = (ms < _MIN_MS) | (ms > _MAX_MS)
            if outside.any():
                i = int(np.argmax(outside))
                at = m.commit_log.at + int(units["commitlog_offset"][i]) - m.cl_base
                raise CorruptRecordError(
                    f"record of queue offset {self.offset + int(picked[i])}: {name} field "
                    f"{int(ms[i])} ms lies outside years 1 to 9999",
                    where=f"{m.commit_log_key}@{at}",
                )

    def _consumer_bodies(self, picked: npt.NDArray[np.intp], cols: RecordColumns) -> pa.Array:
        """Bodies as a consumer gets them: the few compressed ones inflated (by the
        reference path, which names a body that does not inflate)."""
        compressed = np.flatnonzero(cols.sys_flag & _COMPRESSED)
        if not compressed.size:
            return cols.body
        pieces: list[pa.Array] = []
        last = 0
        for i in compressed.tolist():
            pieces += [cols.body[last:i], pa.array([self._decode_one(int(picked[i])).body])]
            last = i + 1
        pieces.append(cols.body[last:])
        return pa.concat_arrays(pieces)

    def _decode_one(self, i: int) -> ColdMessage:
        """The message of unit ``i``, decoded by
        :func:`~tieredstore.cold.reader.decode_messages`."""
        unit = self.units[i : i + 1]
        (message,) = decode_messages(self.link, self.offset + i, unit, self.data,
                                     self.data_base)  # fmt: skip
        return message


def _batches(picked: npt.NDArray[np.intp], sizes: npt.NDArray[np.int64],
             rows: int) -> Iterator[npt.NDArray[np.intp]]:  # fmt: skip
    """``picked`` cut into runs of at most ``rows`` messages and :data:`BATCH_BYTES`
    record bytes (one message at least)."""
    ends = np.cumsum(sizes)
    i = 0
    while i < len(picked):
        base = int(ends[i - 1]) if i else 0
        fit = int(np.searchsorted(ends, base + BATCH_BYTES, side="right"))
        j = min(max(fit, i + 1), i + rows)
        yield picked[i:j]
        i = j


def record_span(units: Units) -> tuple[int, int]:
    """The cold commitlog offsets ``[first, end)`` of the (contiguous) records ``units``
    point at; ``units`` must not be empty."""
    first = int(units["commitlog_offset"][0])
    return first, int(units["commitlog_offset"][-1]) + int(units["size"][-1])
