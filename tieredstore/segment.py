"""Cold segments: build a COMMIT_LOG / CONSUME_QUEUE object pair and its manifest; verify.

A *segment* covers the queue offsets ``[start, end)`` of one queue (never empty). Its
three objects (names from :mod:`tieredstore.layout`):

* **COMMIT_LOG** at cold commitlog offset ``cl_base``: the hot records in queue-offset
  order, concatenated, each byte-identical to the hot record except bytes [28, 36)
  (physicalOffset), rewritten to the record's cold offset ``cl_base + position``.
* **CONSUME_QUEUE** at ``start * 20``: one 20-byte big-endian unit per offset
  (cold commitlog offset i64, size i32, tagsCode i64); size and tagsCode are the hot ones.
* **MANIFEST** at ``start``: the commit point (:mod:`tieredstore.manifest`, re-exported
  here). Objects without a manifest are uncommitted and never read.

So ``cl_end - cl_base`` is the COMMIT_LOG size, the CONSUME_QUEUE is ``20 * count``
bytes, and the next segment of the queue starts at ``(end, cl_end)``.

Building is streaming-friendly: :class:`SegmentBuilder` takes records one at a time
(:meth:`~SegmentBuilder.add`) or as a batch with their hot CQ units
(:meth:`~SegmentBuilder.extend`, vectorised), tracks bytes, count and timestamps for the
group-commit decision, and :meth:`~SegmentBuilder.seal` returns a :class:`Segment`.

Verification never trusts the manifest alone: :func:`verify_objects` checks sizes and
digests; :func:`verify_segment` also checks every CQ unit against the record it points
at (size == totalSize, queueOffset field == q, physicalOffset field == cold offset).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

from tieredstore.errors import (
    CorruptRecordError,
    CorruptUnitError,
    DigestMismatchError,
    SizeMismatchError,
)
from tieredstore.formats.consumequeue import (
    CQ_UNIT_SIZE,
    Units,
    decode_units,
    encode_units,
    make_units,
)
from tieredstore.formats.record import (
    MAGIC_AT,
    MAGIC_CODE_V1,
    MAGIC_CODE_V2,
    PHYSICAL_OFFSET_AT,
    QUEUE_OFFSET_AT,
    STORE_TIMESTAMP_AT_V4,
    STORE_TIMESTAMP_AT_V6,
    SYS_FLAG_AT,
    TOTAL_SIZE_AT,
    SysFlag,
)
from tieredstore.formats.vector import gather_be, scatter_be_i64, store_timestamps
from tieredstore.layout import MAX_OFFSET, QueuePath, new_attempt, object_name
from tieredstore.manifest import (
    DIGEST_ALGORITHM,
    FORMAT_VERSION,
    Manifest,
    ObjectRef,
    digest,
    read_manifest,
)

if TYPE_CHECKING:  # the backends package pulls in s3fs; the codec must stay light
    from tieredstore.backends.base import Backend

__all__ = [
    "DIGEST_ALGORITHM",
    "FORMAT_VERSION",
    "MIN_RECORD_SIZE",
    "Manifest",
    "ObjectRef",
    "RewrittenBatch",
    "Segment",
    "SegmentBuilder",
    "build_segment",
    "check_record_heads",
    "digest",
    "parse_cq_object",
    "read_manifest",
    "read_segment",
    "rewrite_records",
    "verify_objects",
    "verify_record_pointers",
    "verify_segment",
]

#: Fixed part of a v1 IPv4 record (docs/format.md); no real record is smaller.
MIN_RECORD_SIZE: Final = 91

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

I64 = npt.NDArray[np.int64]


def _at(where: str, key: str, pos: int | None = None) -> str:
    """Name an object (``where`` is an optional location prefix, e.g. the backend URL)."""
    full = f"{where.rstrip('/')}/{key}" if where else key
    return full if pos is None else f"{full}@{pos}"


# -- building -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Segment:
    """A sealed segment: its manifest and the exact bytes of its two data objects.

    Commit order: write ``commit_log`` to ``manifest.commit_log_key``, then
    ``consume_queue`` to ``manifest.consume_queue_key``, then ``manifest.to_json()`` to
    ``manifest.key`` (create-if-absent), then advance the catalogue.
    """

    manifest: Manifest
    commit_log: bytes
    consume_queue: bytes


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
    magic = gather_be(batch, starts + MAGIC_AT, 4)
    total = gather_be(batch, starts + TOTAL_SIZE_AT, 4)
    field_offsets = gather_be(batch, starts + QUEUE_OFFSET_AT, 8)
    bad = np.flatnonzero(
        ((magic != MAGIC_CODE_V1) & (magic != MAGIC_CODE_V2))
        | (total != size_arr)
        | (field_offsets != offsets)
    )
    if bad.size:
        i = int(bad[0])
        SegmentBuilder._check_fields(
            where(int(offsets[i])),
            total=(int(total[i]), int(size_arr[i])),
            magic=int(magic[i]),
            queue_offset=(int(field_offsets[i]), int(offsets[i])),
            store_timestamp=(0, 0),
        )
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
        where = self._where(queue_offset)
        if len(record) != size or size < MIN_RECORD_SIZE:
            raise CorruptRecordError(
                f"record is {len(record)} bytes, its CQ unit says {size} "
                f"(minimum {MIN_RECORD_SIZE})",
                where=where,
            )
        (total,) = _I32.unpack_from(record, TOTAL_SIZE_AT)
        (magic,) = _I32.unpack_from(record, MAGIC_AT)
        (field_offset,) = _I64.unpack_from(record, QUEUE_OFFSET_AT)
        (sys_flag,) = _I32.unpack_from(record, SYS_FLAG_AT)
        ts_at = STORE_TIMESTAMP_AT_V6 if sys_flag & SysFlag.BORNHOST_V6 else STORE_TIMESTAMP_AT_V4
        (field_ts,) = _I64.unpack_from(record, ts_at)
        self._check_fields(
            where,
            total=(total, size),
            magic=magic,
            queue_offset=(field_offset, queue_offset),
            store_timestamp=(field_ts, store_timestamp),
        )
        pos = len(self._buf)
        self._buf += record
        _I64.pack_into(self._buf, pos + PHYSICAL_OFFSET_AT, self.cl_base + pos)
        self._note_timestamps(store_timestamp, store_timestamp)
        self._sizes.append(size)
        self._tags.append(tags_code)

    @staticmethod
    def _check_fields(
        where: str,
        *,
        total: tuple[int, int],
        magic: int,
        queue_offset: tuple[int, int],
        store_timestamp: tuple[int, int],
    ) -> None:
        if magic not in (MAGIC_CODE_V1, MAGIC_CODE_V2):
            raise CorruptRecordError(f"bad magic code 0x{magic & 0xFFFFFFFF:08X}", where=where)
        if total[0] != total[1]:
            raise CorruptRecordError(
                f"totalSize field {total[0]} != CQ unit size {total[1]}", where=where
            )
        if queue_offset[0] != queue_offset[1]:
            raise CorruptRecordError(
                f"queueOffset field {queue_offset[0]} != queue offset {queue_offset[1]}",
                where=where,
            )
        if store_timestamp[0] != store_timestamp[1]:
            raise CorruptRecordError(
                f"storeTimestamp field {store_timestamp[0]} != {store_timestamp[1]} given",
                where=where,
            )

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
            where=lambda q: self._where(q),
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


# -- verification ---------------------------------------------------------------------


def verify_objects(
    manifest: Manifest,
    commit_log: bytes | bytearray | memoryview,
    consume_queue: bytes | bytearray | memoryview,
    *,
    where: str = "",
) -> None:
    """Check both objects' sizes, then digests, against ``manifest``.

    ``where`` (e.g. the backend URL) is put before object keys in error messages.

    Raises:
        SizeMismatchError / DigestMismatchError: naming the object.
    """
    for key, ref, data in (
        (manifest.commit_log_key, manifest.commit_log, commit_log),
        (manifest.consume_queue_key, manifest.consume_queue, consume_queue),
    ):
        if len(data) != ref.size:
            raise SizeMismatchError(
                f"object is {len(data)} bytes, its manifest says {ref.size}",
                where=_at(where, key),
            )
        algorithm = manifest.algorithm
        actual = digest(data, algorithm)
        if actual != ref.digest:
            raise DigestMismatchError(
                f"object {algorithm} is {actual}, its manifest says {ref.digest}",
                where=_at(where, key),
            )


def parse_cq_object(data: bytes | bytearray | memoryview, *, where: str) -> Units:
    """View a CONSUME_QUEUE object as units (zero-copy; read-only for ``bytes``).

    Raises TruncatedDataError (a CorruptDataError) when its length is not a multiple of
    20, naming ``where`` and the byte offset of the partial unit.
    """
    return decode_units(data, where=where)


def verify_record_pointers(
    manifest: Manifest,
    units: Units,
    commit_log: bytes | bytearray | memoryview,
    *,
    where: str = "",
) -> None:
    """Check every CQ unit against the COMMIT_LOG record it points at (vectorised).

    Unit ``i`` (queue offset ``start + i``) must point at ``cl_base`` plus the sizes of
    the units before it (records are contiguous, none missing or overlapping), the sizes
    must add up to the COMMIT_LOG size, and the record there must have totalSize ==
    the unit's size, a known magic, queueOffset field == ``start + i`` and
    physicalOffset field == its cold offset.

    Raises:
        CorruptUnitError: a unit that points wrong (named by CQ key and byte offset).
        CorruptRecordError: a record that disagrees with its unit (CL key and offset).
    """
    cq_key = manifest.consume_queue_key
    n = len(units)
    if n != manifest.message_count:
        raise CorruptUnitError(
            f"{n} units, manifest says {manifest.message_count}", where=_at(where, cq_key)
        )
    sizes: I64 = units["size"].astype(np.int64)
    cold: I64 = units["commitlog_offset"].astype(np.int64)
    rel = _check_units_contiguous(manifest, sizes, cold, len(commit_log), where)
    arr = np.frombuffer(commit_log, dtype=np.uint8)
    check_record_heads(manifest, manifest.start_offset, arr, rel, sizes, cold, where)


def _check_units_contiguous(
    manifest: Manifest, sizes: I64, cold: I64, cl_size: int, where: str
) -> I64:
    """Each unit's offset inside the COMMIT_LOG object; CorruptUnitError unless they are
    back to back from ``cl_base`` and cover the object exactly."""
    cq_key = manifest.consume_queue_key
    rel: I64 = np.concatenate((np.zeros(1, np.int64), np.cumsum(sizes)[:-1]))
    bad = np.flatnonzero((sizes < MIN_RECORD_SIZE) | (cold != manifest.cl_base + rel))
    if bad.size:
        i = int(bad[0])
        raise CorruptUnitError(
            f"unit of queue offset {manifest.start_offset + i} points at cold offset "
            f"{int(cold[i])} size {int(sizes[i])}; contiguous records need offset "
            f"{manifest.cl_base + int(rel[i])} and size >= {MIN_RECORD_SIZE}",
            where=_at(where, cq_key, i * CQ_UNIT_SIZE),
        )
    total = int(sizes.sum())
    if total != cl_size:
        raise CorruptUnitError(
            f"units cover {total} bytes, the commit-log object has {cl_size}",
            where=_at(where, cq_key),
        )
    return rel


def check_record_heads(
    manifest: Manifest,
    first: int,
    arr: npt.NDArray[np.uint8],
    starts: I64,
    sizes: I64,
    cold: I64,
    where: str = "",
) -> None:
    """CorruptRecordError unless every record agrees with its unit: the records of queue
    offsets ``first``, ``first + 1``, ... start at ``starts`` in ``arr``, and their units
    say ``sizes`` and cold offsets ``cold``. Errors name ``object@offset`` within the
    COMMIT_LOG object (``where``: an optional location prefix)."""
    cl_key, n = manifest.commit_log_key, len(starts)
    magic = gather_be(arr, starts + MAGIC_AT, 4)
    checks: tuple[tuple[str, I64, I64], ...] = (
        ("totalSize", gather_be(arr, starts + TOTAL_SIZE_AT, 4), sizes),
        ("queueOffset", gather_be(arr, starts + QUEUE_OFFSET_AT, 8),
         first + np.arange(n, dtype=np.int64)),
        ("physicalOffset", gather_be(arr, starts + PHYSICAL_OFFSET_AT, 8), cold),
    )  # fmt: skip
    bad = np.flatnonzero((magic != MAGIC_CODE_V1) & (magic != MAGIC_CODE_V2))
    if bad.size:
        i = int(bad[0])
        raise CorruptRecordError(
            f"bad magic code 0x{int(magic[i]) & 0xFFFFFFFF:08X} at queue offset {first + i}",
            where=_at(where, cl_key, int(cold[i]) - manifest.cl_base),
        )
    for field, found, expected in checks:
        bad = np.flatnonzero(found != expected)
        if bad.size:
            i = int(bad[0])
            raise CorruptRecordError(
                f"record of queue offset {first + i}: {field} field {int(found[i])}, "
                f"expected {int(expected[i])}",
                where=_at(where, cl_key, int(cold[i]) - manifest.cl_base),
            )


def verify_segment(
    manifest: Manifest,
    commit_log: bytes | bytearray | memoryview,
    consume_queue: bytes | bytearray | memoryview,
    *,
    where: str = "",
) -> Units:
    """Fully check a segment's objects against its manifest and each other.

    Runs :func:`verify_objects`, :func:`parse_cq_object` and
    :func:`verify_record_pointers`; returns the CQ units on success.
    """
    verify_objects(manifest, commit_log, consume_queue, where=where)
    units = parse_cq_object(consume_queue, where=_at(where, manifest.consume_queue_key))
    verify_record_pointers(manifest, units, commit_log, where=where)
    return units


async def read_segment(backend: Backend, manifest_key: str) -> Segment:
    """Read the committed segment whose manifest is ``manifest_key``, fully verified.

    Raises:
        ObjectNotFoundError: the manifest or one of its objects is missing (the
            backend names the key).
        CorruptManifestError: the manifest does not validate or is misplaced.
        SizeMismatchError / DigestMismatchError / CorruptDataError: the objects do not
            match the manifest or each other (see :func:`verify_segment`).
    """
    manifest = read_manifest(await backend.read(manifest_key), manifest_key)
    commit_log = await backend.read(manifest.commit_log_key)
    consume_queue = await backend.read(manifest.consume_queue_key)
    verify_segment(manifest, commit_log, consume_queue, where=backend.url)
    return Segment(manifest, commit_log, consume_queue)
