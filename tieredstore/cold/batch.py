"""Batch objects: one tick's data of many small queues in ONE object, committed at once.

A per-queue segment costs three objects (COMMIT_LOG, CONSUME_QUEUE, MANIFEST). For a
broker with many small queues the dispatcher instead writes, on a tick, every small
queue's new data into one **batch object** per broker, stored at
``<broker_prefix>/_batches/<name(sequence)>.batch`` (:func:`~tieredstore.cold.layout.batch_key`)
by one conditional create under the lease: the batch exists, with every slice in it, or
not at all. Sequences are per broker; a listing orders batches by the sequence
:func:`~tieredstore.cold.layout.parse_batch_key` returns, never by key.

Encoding, written once and never changed (docs/format.md, "Batch objects")::

    offset  size          field
    0       8             BATCH_MAGIC = b"TSBATCH\\x01"
    8       8             index length L, big-endian unsigned 64-bit
    16      L             the index: canonical JSON of BatchIndex
    16 + L  data_size     the data section: each slice's COMMIT_LOG bytes, then its
                          CONSUME_QUEUE bytes, slices in (topic, queue_id) order

A slice's ``commit_log_at`` / ``consume_queue_at`` are offsets *relative to the data
section*; the data section's offset (``16 + L``) is not stored: :func:`read_batch_head`
computes it (:attr:`BatchHead.data_offset`). A slice's two byte ranges hold exactly what
a segment's COMMIT_LOG and CONSUME_QUEUE objects would hold for the same range, with
the same digests (by the index's ``digest_algorithm``).

**Compressed batches** (``cold.compression = zstd``): the data section is stored as
seekable zstd frames (:mod:`tieredstore.cold.compressed.frames`, the segments' encoder
and settings) and the index is **format 2**, which adds ``compression`` (``"zstd"``),
``stored_data_size`` (the stored data section's length) and ``stored_data_digest`` (its
CRC32C, hex: the compressed bytes' own integrity, which frame checksums alone miss for a
few flips). ``data_size``, slice offsets and slice digests stay in uncompressed
coordinates: the object reads as the header followed by the decoded data section
(:attr:`BatchHead.framed` says so to :mod:`tieredstore.cold.compressed.framed`), and the
object is ``16 + L + stored_data_size`` bytes. A plain batch is format 1, byte for byte
as before; a reader of format 1 alone refuses format 2 with
:class:`~tieredstore.errors.UnsupportedFormatError`.

A **batch fence** (:class:`BatchFence`) may stand at a batch key instead: a successor
writer creates one (create-if-absent) at the next sequence when it takes the lease, so a
paused writer of an older epoch can never commit that batch afterwards. It is canonical
JSON (so it begins with ``{``, never with the magic); :func:`read_batch_head` returns
it, and it means "no batch has this sequence".

Parsing is strict: a wrong magic, a truncated or oversized object, unknown, missing or
duplicate fields, wrong JSON types, every violated invariant and a batch stored at
another key than its own raise :class:`~tieredstore.errors.CorruptBatchError` naming the
key; a newer ``format_version`` / ``fence_version`` raises
:class:`~tieredstore.errors.UnsupportedFormatError`. The index and the fence are
canonical, so ``to_json(from_json(b)) == b`` for every one we write.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Final, TypeAlias

from tieredstore.canonical_json import Fields, canonical, parse_object
from tieredstore.cold.compressed.framed import STORED_DIGEST, Framed, decode_stored
from tieredstore.cold.compressed.frames import Compression, FrameSettings, encode
from tieredstore.cold.digests import DigestAlgorithm, digest
from tieredstore.cold.layout import (
    MAX_OFFSET,
    QueuePath,
    batch_key,
    parse_batch_key,
)
from tieredstore.cold.manifest import DIGEST_ALGORITHM, SEGMENT_RANGE_FIELDS, range_problem
from tieredstore.errors import CorruptBatchError, CorruptFrameError, InvalidNameError
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE

__all__ = [
    "BATCH_FENCE_VERSION",
    "BATCH_FORMATS",
    "BATCH_FORMAT_COMPRESSED",
    "BATCH_FORMAT_VERSION",
    "BATCH_MAGIC",
    "HEADER_FIXED_SIZE",
    "HEAD_PROBE",
    "BatchFence",
    "BatchHead",
    "BatchIndex",
    "BatchSlice",
    "QueueOffsets",
    "SlicePart",
    "Withdrawn",
    "build_batch",
    "check_slice",
    "commit_log_span",
    "consume_queue_span",
    "data_section",
    "decoded_batch",
    "encode_batch",
    "head_reads",
    "read_batch_head",
]

#: The batch index format of a plain batch.
BATCH_FORMAT_VERSION: Final = 1
#: The batch index format of a batch whose data section is stored compressed.
BATCH_FORMAT_COMPRESSED: Final = 2
#: Every batch index format this tieredstore reads.
BATCH_FORMATS: Final = frozenset({BATCH_FORMAT_VERSION, BATCH_FORMAT_COMPRESSED})
#: The batch-fence format this tieredstore writes and reads.
BATCH_FENCE_VERSION: Final = 1
#: Bytes a slice part may be given as (a spool file's bytes, or views of one buffer).
Bytes: TypeAlias = bytes | bytearray | memoryview
#: The first 8 bytes of every batch object.
BATCH_MAGIC: Final = b"TSBATCH\x01"
#: Magic (8 bytes) and index length (8 bytes): where the index begins.
HEADER_FIXED_SIZE: Final = 16
#: How many bytes a reader fetches first (the whole object if smaller): the header of a
#: batch of a few hundred slices, or any fence.
HEAD_PROBE: Final = 64 * 1024

_LENGTH_SIZE: Final = HEADER_FIXED_SIZE - len(BATCH_MAGIC)
_HEXDIGITS: Final = frozenset("0123456789abcdef")
_ALGORITHMS: Final = frozenset(a.value for a in DigestAlgorithm)


class QueueOffsets:
    """What follows from queue offsets ``[start_offset, end_offset)``: a mixin of the
    frozen dataclasses that declare both (a batch slice, a link of a queue's history)."""

    __slots__ = ()
    start_offset: int
    end_offset: int

    @property
    def message_count(self) -> int:
        """``end_offset - start_offset``."""
        return self.end_offset - self.start_offset

    @property
    def cq_base(self) -> int:
        """The CQ byte offset of the first unit: ``start * 20``."""
        return self.start_offset * CQ_UNIT_SIZE


@dataclass(frozen=True, slots=True)
class BatchSlice(QueueOffsets):
    """One queue's contiguous data in a batch: queue offsets ``[start, end)``, cold
    commitlog ``[cl_base, cl_end)``, and where its two byte ranges sit in the data section.

    ``commit_log_at`` / ``consume_queue_at`` are byte offsets relative to the start of the
    data section (not of the object). The commit-log range holds ``cl_end - cl_base``
    bytes, the consume-queue range ``20 * (end - start)``; both are digested like a
    segment's objects, by the index's algorithm.

    Invariants (checked on construction; :class:`CorruptBatchError` otherwise): the range
    rules of a manifest (:func:`~tieredstore.cold.manifest.range_problem`). The names,
    digests and byte ranges are checked by the :class:`BatchIndex` that holds the slice.
    """

    topic: str
    queue_id: int
    start_offset: int
    end_offset: int
    cl_base: int
    cl_end: int
    commit_log_at: int
    consume_queue_at: int
    commit_log_digest: str
    consume_queue_digest: str
    min_store_timestamp: int
    max_store_timestamp: int

    def __post_init__(self) -> None:
        if problem := self.problem():
            where = f"batch slice {self.topic}/{self.queue_id} at offset {self.start_offset}"
            raise CorruptBatchError(problem, where=where)

    def problem(self) -> str:
        """The first violated range invariant, or ``""``."""
        return range_problem(self)

    @property
    def commit_log_size(self) -> int:
        """``cl_end - cl_base``: the commit-log range's length."""
        return self.cl_end - self.cl_base

    @property
    def consume_queue_size(self) -> int:
        """``20 * message_count``: the consume-queue range's length."""
        return CQ_UNIT_SIZE * self.message_count

    def ranges(self) -> tuple[tuple[int, int, str], tuple[int, int, str]]:
        """Both byte ranges as ``(at, size, what)``, relative to the data section."""
        return (
            (self.commit_log_at, self.commit_log_size, f"{self} commit_log"),
            (self.consume_queue_at, self.consume_queue_size, f"{self} consume_queue"),
        )

    def __str__(self) -> str:
        return f"slice {self.topic}/{self.queue_id}"


@dataclass(frozen=True, slots=True)
class BatchIndex:
    """What a batch object holds: its slices, their digests, and who committed it.

    Invariants (checked on construction; :class:`CorruptBatchError` naming the key
    otherwise): ``format_version`` is one of :data:`BATCH_FORMATS`, valid names (the
    cluster and broker, and every slice's queue: ``QueuePath.problem``), ``0 <= sequence
    <= MAX_OFFSET``, a known ``digest_algorithm`` with every digest its length in lowercase
    hex, at least one slice, slices sorted by ``(topic, queue_id)`` with each queue at most
    once, each slice's two byte ranges inside ``[0, data_size)``, no two ranges (of any
    slices) overlapping and every byte of the data section in exactly one range (so
    ``data_size`` is the sum of the sizes: no slack), ``lease_epoch >= 1``, a non-empty
    ``writer_id``, ``created_at_ms >= 0``. Format 1 (plain): ``compression`` is ``""``,
    ``stored_data_size`` 0 and ``stored_data_digest`` ``""`` (none is written); format 2
    (compressed): ``compression`` is ``"zstd"``, ``stored_data_size > 0`` and
    ``stored_data_digest`` is a CRC32C in lowercase hex.
    """

    format_version: int
    cluster: str
    broker: str
    sequence: int
    digest_algorithm: str
    data_size: int
    slices: tuple[BatchSlice, ...]
    writer_id: str
    lease_epoch: int
    created_at_ms: int
    compression: str = ""
    stored_data_size: int = 0
    stored_data_digest: str = ""

    def __post_init__(self) -> None:
        if problem := self._problem():
            raise CorruptBatchError(problem, where=self._where())

    def _where(self) -> str:
        try:
            return self.key
        except InvalidNameError:
            return f"batch {self.sequence} of {self.cluster!r}/{self.broker!r}"

    def _problem(self) -> str:
        """Return the first violated invariant, or ``""``."""
        if self.format_version not in BATCH_FORMATS:
            return (
                f"unsupported format_version {self.format_version} "
                f"(this tieredstore reads {sorted(BATCH_FORMATS)})"
            )
        return (
            self._stored_problem()
            or _key_problem(self.cluster, self.broker, self.sequence)
            or self._slices_problem()
            or self._layout_problem()
            or _provenance_problem(self.lease_epoch, self.writer_id, self.created_at_ms)
        )

    def _stored_problem(self) -> str:
        """The format's compression fields: absent (format 1) or all valid (format 2)."""
        stored = (self.compression, self.stored_data_size, self.stored_data_digest)
        if self.format_version == BATCH_FORMAT_VERSION:
            if stored != ("", 0, ""):
                return "a format 1 (plain) batch has no compression fields"
            return ""
        if self.compression != Compression.ZSTD.value:
            return f"compression {self.compression!r} is not {Compression.ZSTD.value!r}"
        if self.stored_data_size <= 0:
            return f"stored_data_size {self.stored_data_size} <= 0"
        value = self.stored_data_digest
        if len(value) != STORED_DIGEST.hex_length or not set(value) <= _HEXDIGITS:
            return (
                f"stored_data_digest {value!r} is not {STORED_DIGEST.hex_length} lowercase "
                f"hex digits ({STORED_DIGEST.value})"
            )
        return ""

    def _slices_problem(self) -> str:
        if self.digest_algorithm not in _ALGORITHMS:
            return f"digest_algorithm {self.digest_algorithm!r} is not one of {sorted(_ALGORITHMS)}"
        if not self.slices:
            return "a batch holds at least one slice, this has none"
        length = self.algorithm.hex_length
        previous: tuple[str, int] | None = None
        for piece in self.slices:
            name_problem = QueuePath.problem(self.cluster, self.broker, piece.topic, piece.queue_id)
            if name_problem:
                return f"{piece}: {name_problem}"
            if previous is not None and (piece.topic, piece.queue_id) <= previous:
                return (
                    f"{piece} is not after {previous[0]}/{previous[1]}: slices are sorted by "
                    "(topic, queue_id), each queue at most once"
                )
            previous = (piece.topic, piece.queue_id)
            for field in ("commit_log_digest", "consume_queue_digest"):
                value = getattr(piece, field)
                if len(value) != length or not set(value) <= _HEXDIGITS:
                    return (
                        f"{piece}: {field} {value!r} is not {length} lowercase hex digits "
                        f"({self.digest_algorithm})"
                    )
        return ""

    def _layout_problem(self) -> str:
        """Every byte range inside ``[0, data_size)``; together they tile it exactly."""
        ranges = sorted(r for piece in self.slices for r in piece.ranges())
        for at, size, what in ranges:
            if at < 0 or at + size > self.data_size:
                return f"{what} bytes [{at}, {at + size}) are not inside [0, {self.data_size})"
        end = 0
        for at, size, what in ranges:
            if at < end:
                return f"{what} bytes [{at}, {at + size}) overlap another range ending at {end}"
            if at > end:
                return f"data bytes [{end}, {at}) belong to no slice (before {what})"
            end = at + size
        if end != self.data_size:
            return f"data bytes [{end}, {self.data_size}) belong to no slice"
        return ""

    # -- derived views ---------------------------------------------------------------
    @property
    def compressed(self) -> bool:
        """Whether the data section is stored as zstd frames (format 2)."""
        return self.format_version == BATCH_FORMAT_COMPRESSED

    @property
    def stored_size(self) -> int:
        """The data section's stored length: ``stored_data_size`` (compressed) or
        ``data_size`` (plain)."""
        return self.stored_data_size if self.compressed else self.data_size

    @property
    def algorithm(self) -> DigestAlgorithm:
        """The digest algorithm of every slice (a validated index names a known one)."""
        return DigestAlgorithm(self.digest_algorithm)

    @property
    def key(self) -> str:
        """This batch's own object key: ``batch_key(cluster, broker, sequence)``."""
        return batch_key(self.cluster, self.broker, self.sequence)

    def queue(self, slice: BatchSlice) -> QueuePath:
        """The queue ``slice`` (one of this batch's) holds data of."""
        return QueuePath(self.cluster, self.broker, slice.topic, slice.queue_id)

    # -- JSON ------------------------------------------------------------------------
    def to_json(self) -> bytes:
        """Canonical JSON (sorted keys, no whitespace, ASCII; slices a list of objects;
        a plain batch without the compression fields). ``from_json`` inverts it."""
        doc = asdict(self)
        if not self.compressed:
            for name in _STORED_FIELDS:
                del doc[name]
        return canonical(doc)

    @classmethod
    def from_json(cls, data: bytes, *, where: str) -> BatchIndex:
        """Parse and fully validate an index; ``where`` names the object.

        Raises:
            UnsupportedFormatError: a ``format_version`` newer than this reads.
            CorruptBatchError: invalid JSON; unknown, missing or duplicate fields; wrong
                types (a bool is not an int); any violated invariant.
        """
        fields = parse_object(data, error=CorruptBatchError, what="batch index", where=where)
        return cls._from_fields(fields, where=where)

    @classmethod
    def _from_fields(cls, fields: Fields, *, where: str) -> BatchIndex:
        version = fields.version("format_version", BATCH_FORMATS, label="batch ")
        wanted = _INDEX_FIELDS if version == BATCH_FORMAT_VERSION else _INDEX_FIELDS_COMPRESSED
        values: dict[str, Any] = {name: fields.scalar(name, typ) for name, typ in wanted.items()}
        values["slices"] = _slices(fields, where=where)
        fields.no_extra()
        try:
            return cls(format_version=version, **values)
        except CorruptBatchError as exc:
            raise CorruptBatchError(exc.message, where=where) from exc


def _key_problem(cluster: str, broker: str, sequence: int) -> str:
    try:
        batch_key(cluster, broker, 0)  # validates both names
    except InvalidNameError as exc:
        return exc.message
    if not 0 <= sequence <= MAX_OFFSET:
        return f"sequence {sequence} is outside [0, {MAX_OFFSET}]"
    return ""


def _provenance_problem(lease_epoch: int, writer_id: str, created_at_ms: int) -> str:
    if lease_epoch < 1:
        return f"lease_epoch {lease_epoch} < 1 (epochs start at 1)"
    if not writer_id:
        return "writer_id is empty"
    if created_at_ms < 0:
        return f"created_at_ms {created_at_ms} < 0"
    return ""


_INDEX_FIELDS: Final[dict[str, type]] = {
    "cluster": str,
    "broker": str,
    "sequence": int,
    "digest_algorithm": str,
    "data_size": int,
    "writer_id": str,
    "lease_epoch": int,
    "created_at_ms": int,
}
_STORED_FIELDS: Final[dict[str, type]] = {
    "compression": str,
    "stored_data_size": int,
    "stored_data_digest": str,
}
_INDEX_FIELDS_COMPRESSED: Final[dict[str, type]] = {**_INDEX_FIELDS, **_STORED_FIELDS}
_SLICE_FIELDS: Final[dict[str, type]] = {
    **SEGMENT_RANGE_FIELDS,
    "commit_log_at": int,
    "consume_queue_at": int,
    "commit_log_digest": str,
    "consume_queue_digest": str,
    "min_store_timestamp": int,
    "max_store_timestamp": int,
}


def _slices(fields: Fields, *, where: str) -> tuple[BatchSlice, ...]:
    raw = fields.get("slices")
    if not isinstance(raw, list):
        raise CorruptBatchError(
            f"batch index field 'slices' is {type(raw).__name__}, not list", where=where
        )
    out = []
    for n, item in enumerate(raw):
        sub = Fields(item, error=CorruptBatchError, what=f"batch slice {n}", where=where)
        values: dict[str, Any] = {name: sub.scalar(name, t) for name, t in _SLICE_FIELDS.items()}
        sub.no_extra()
        try:
            out.append(BatchSlice(**values))
        except CorruptBatchError as exc:
            piece = f"slice {values['topic']}/{values['queue_id']}"
            raise CorruptBatchError(f"{piece}: {exc.message}", where=where) from exc
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """ "Every slice of queue ``topic``/``queue_id`` in a batch of a lower sequence than the
    fence naming this, holding any offset at or after ``from_offset``, is withdrawn."

    What ``repair`` and the heal of a lost tail write when they cut a queue's history at
    ``from_offset`` while batch slices lie past the cut: a batch is shared by many queues
    and never rewritten, so its slices are withdrawn by this later record instead
    (:func:`tieredstore.cold.history.choose` reads none of them; ``repair`` copies them
    to the quarantine first, and the batch collector counts them as done).
    """

    topic: str
    queue_id: int
    from_offset: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.queue_id} from offset {self.from_offset}"


@dataclass(frozen=True, slots=True)
class BatchFence:
    """ "No batch has this sequence, and none of an epoch below ``lease_epoch`` ever will."

    Stored at ``_batches/<name(sequence)>.batch`` by a successor writer (create-if-absent)
    when it takes over, exactly as :class:`~tieredstore.cold.manifest.FenceMarker` is at a
    manifest key: a paused writer of an older epoch finds the key taken. Canonical JSON,
    so it begins with ``{`` where a batch begins with :data:`BATCH_MAGIC`.

    ``withdrawn`` (:class:`Withdrawn`, sorted by queue, each queue at most once) also
    withdraws slices of lower sequences; the field is written only when it is not empty,
    so a plain fence's bytes are those of a fence without it.
    """

    cluster: str
    broker: str
    sequence: int
    lease_epoch: int
    writer_id: str
    created_at_ms: int
    fence_version: int = BATCH_FENCE_VERSION
    withdrawn: tuple[Withdrawn, ...] = ()

    def __post_init__(self) -> None:
        problem = (
            _key_problem(self.cluster, self.broker, self.sequence)
            or _provenance_problem(self.lease_epoch, self.writer_id, self.created_at_ms)
            or self._withdrawn_problem()
        )
        if not problem and self.fence_version != BATCH_FENCE_VERSION:
            problem = f"unsupported fence_version {self.fence_version}"
        if problem:
            where = f"batch fence {self.sequence} of {self.cluster!r}/{self.broker!r}"
            raise CorruptBatchError(problem, where=where)

    def _withdrawn_problem(self) -> str:
        previous: tuple[str, int] | None = None
        for w in self.withdrawn:
            name_problem = QueuePath.problem(self.cluster, self.broker, w.topic, w.queue_id)
            if name_problem:
                return f"withdrawn {w}: {name_problem}"
            if not 0 <= w.from_offset <= MAX_OFFSET:
                return f"withdrawn {w}: from_offset is outside [0, {MAX_OFFSET}]"
            if previous is not None and (w.topic, w.queue_id) <= previous:
                return f"withdrawn {w}: not sorted by (topic, queue_id), each queue at most once"
            previous = (w.topic, w.queue_id)
        return ""

    @property
    def key(self) -> str:
        """The batch key this fence occupies."""
        return batch_key(self.cluster, self.broker, self.sequence)

    def to_json(self) -> bytes:
        """Canonical JSON (sorted keys, no whitespace, ASCII); no ``withdrawn`` field
        when there is nothing withdrawn."""
        doc = asdict(self)
        if not self.withdrawn:
            del doc["withdrawn"]
        return canonical(doc)

    def describe(self) -> str:
        what = f"batch fence of epoch {self.lease_epoch} ({self.writer_id}) at {self.key}"
        if self.withdrawn:
            what += ", withdrawing " + ", ".join(str(w) for w in self.withdrawn)
        return what


_FENCE_FIELDS: Final[dict[str, type]] = {
    "cluster": str,
    "broker": str,
    "sequence": int,
    "lease_epoch": int,
    "writer_id": str,
    "created_at_ms": int,
}


def _fence_from_json(data: bytes, *, where: str) -> BatchFence:
    fields = parse_object(data, error=CorruptBatchError, what="batch fence", where=where)
    fields.version("fence_version", {BATCH_FENCE_VERSION}, label="batch ")
    values: dict[str, Any] = {n: fields.scalar(n, t) for n, t in _FENCE_FIELDS.items()}
    values["withdrawn"] = _withdrawn(fields, where=where) if "withdrawn" in fields.doc else ()
    fields.no_extra()
    try:
        return BatchFence(**values)
    except CorruptBatchError as exc:
        raise CorruptBatchError(exc.message, where=where) from exc


_WITHDRAWN_FIELDS: Final[dict[str, type]] = {"topic": str, "queue_id": int, "from_offset": int}


def _withdrawn(fields: Fields, *, where: str) -> tuple[Withdrawn, ...]:
    raw = fields.get("withdrawn")
    if not isinstance(raw, list) or not raw:
        raise CorruptBatchError(
            "batch fence field 'withdrawn' is not a non-empty list", where=where
        )
    out = []
    for n, item in enumerate(raw):
        sub = Fields(item, error=CorruptBatchError, what=f"withdrawn {n}", where=where)
        values: dict[str, Any] = {k: sub.scalar(k, t) for k, t in _WITHDRAWN_FIELDS.items()}
        sub.no_extra()
        out.append(Withdrawn(**values))
    return tuple(out)


# -- writing ------------------------------------------------------------------------------


def check_slice(
    index: BatchIndex, slice: BatchSlice, commit_log: Bytes, consume_queue: Bytes
) -> str:
    """``""`` if ``commit_log`` and ``consume_queue`` are ``slice``'s bytes as ``index``
    records them (sizes, then digests by the index's algorithm), else the one-line problem.
    """
    for what, data, size, expected in (
        ("commit_log", commit_log, slice.commit_log_size, slice.commit_log_digest),
        ("consume_queue", consume_queue, slice.consume_queue_size, slice.consume_queue_digest),
    ):
        if len(data) != size:
            return f"{slice}: {what} is {len(data)} bytes, the index says {size}"
        actual = digest(data, index.algorithm)
        if actual != expected:
            return f"{slice}: {what} digest {actual} != {expected} in the index"
    return ""


def encode_batch(index: BatchIndex, data: Bytes) -> bytes:
    """The whole batch object: magic, index length, index, ``data``.

    Raises:
        CorruptBatchError: ``data`` is not ``index.data_size`` bytes, or a slice's bytes
            in it do not check (:func:`check_slice`): a writer never commits such a batch.
    """
    return _laid_out(index, [data])


def _laid_out(index: BatchIndex, pieces: Sequence[Bytes]) -> bytes:
    """Magic, index length, index and ``pieces`` (the data section) joined by one copy,
    then every slice checked where it landed (:func:`encode_batch`'s contract)."""
    head = _header(index)
    obj = b"".join((head, *pieces))
    data = memoryview(obj)[len(head) :]
    if len(data) != index.data_size:
        raise CorruptBatchError(
            f"data section is {len(data)} bytes, the index says {index.data_size}",
            where=index.key,
        )
    for piece in index.slices:
        cl_at, cq_at = piece.commit_log_at, piece.consume_queue_at
        problem = check_slice(
            index,
            piece,
            data[cl_at : cl_at + piece.commit_log_size],
            data[cq_at : cq_at + piece.consume_queue_size],
        )
        if problem:
            raise CorruptBatchError(problem, where=index.key)
    return obj


def _header(index: BatchIndex) -> bytes:
    """Magic, index length and index: the bytes before the data section."""
    encoded = index.to_json()
    return BATCH_MAGIC + len(encoded).to_bytes(_LENGTH_SIZE, "big") + encoded


@dataclass(frozen=True, slots=True)
class SlicePart:
    """One queue's data for :func:`build_batch`: its range and its two byte strings (what
    a segment's COMMIT_LOG and CONSUME_QUEUE objects would hold)."""

    topic: str
    queue_id: int
    start_offset: int
    end_offset: int
    cl_base: int
    commit_log: Bytes
    consume_queue: Bytes
    min_store_timestamp: int
    max_store_timestamp: int


def build_batch(
    *,
    cluster: str,
    broker: str,
    sequence: int,
    writer_id: str,
    lease_epoch: int,
    created_at_ms: int,
    parts: Sequence[SlicePart],
    frames: FrameSettings | None = None,
) -> tuple[BatchIndex, bytes]:
    """Lay ``parts`` out in one batch object: the index and the object's bytes.

    The object is made by one copy of the parts' bytes (each digest is taken once, over
    the part, and checked again where it landed). Parts go in ``(topic, queue_id)``
    order, each as its commit-log bytes then its consume-queue bytes, contiguously; each
    slice's ``cl_end`` is ``cl_base`` plus its commit-log length; digests are by
    :data:`~tieredstore.cold.manifest.DIGEST_ALGORITHM`. With ``frames``, the data section
    is stored as seekable zstd frames (format 2, after every slice is checked in the
    uncompressed data); without, the batch is plain (format 1).

    Raises:
        CorruptBatchError: a part whose consume-queue bytes are not 20 per offset, or an
            index that does not validate (no parts, a queue twice, bad names or ranges).
    """
    ordered = sorted(parts, key=lambda p: (p.topic, p.queue_id))
    slices: list[BatchSlice] = []
    at = 0
    for part in ordered:
        count = part.end_offset - part.start_offset
        if len(part.consume_queue) != CQ_UNIT_SIZE * count:
            raise CorruptBatchError(
                f"slice {part.topic}/{part.queue_id}: consume_queue is "
                f"{len(part.consume_queue)} bytes, not 20 * {count}",
                where=f"batch {sequence} of {cluster!r}/{broker!r}",
            )
        cl_at, cq_at = at, at + len(part.commit_log)
        at = cq_at + len(part.consume_queue)
        slices.append(_slice_of(part, cl_at, cq_at))
    index = BatchIndex(
        format_version=BATCH_FORMAT_VERSION, cluster=cluster, broker=broker, sequence=sequence,
        digest_algorithm=DIGEST_ALGORITHM.value, data_size=at, slices=tuple(slices),
        writer_id=writer_id, lease_epoch=lease_epoch, created_at_ms=created_at_ms,
    )  # fmt: skip
    pieces = [b for p in ordered for b in (p.commit_log, p.consume_queue)]
    if frames is None:
        return index, _laid_out(index, pieces)
    plain = _laid_out(index, pieces)  # every slice checked where it landed
    stored = encode(memoryview(plain)[len(plain) - index.data_size :], frames)
    del plain
    index = replace(
        index, format_version=BATCH_FORMAT_COMPRESSED, compression=Compression.ZSTD.value,
        stored_data_size=len(stored), stored_data_digest=digest(stored, STORED_DIGEST),
    )  # fmt: skip
    return index, _header(index) + stored


def _slice_of(part: SlicePart, cl_at: int, cq_at: int) -> BatchSlice:
    return BatchSlice(
        topic=part.topic,
        queue_id=part.queue_id,
        start_offset=part.start_offset,
        end_offset=part.end_offset,
        cl_base=part.cl_base,
        cl_end=part.cl_base + len(part.commit_log),
        commit_log_at=cl_at,
        consume_queue_at=cq_at,
        commit_log_digest=digest(part.commit_log, DIGEST_ALGORITHM),
        consume_queue_digest=digest(part.consume_queue, DIGEST_ALGORITHM),
        min_store_timestamp=part.min_store_timestamp,
        max_store_timestamp=part.max_store_timestamp,
    )


# -- reading ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BatchHead:
    """A batch object's parsed header: its index, where its data section starts
    (``16 + index length``) and the object's whole (stored) size."""

    index: BatchIndex
    data_offset: int
    object_size: int

    @property
    def size(self) -> int:
        """The object's size in uncompressed coordinates: the header and the decoded data
        section (``object_size`` for a plain batch)."""
        return self.data_offset + self.index.data_size

    @property
    def framed(self) -> Framed | None:
        """How a reader decodes a compressed batch (frames from the data section on, their
        stored digest ``stored_data_digest``), or None for a plain one."""
        if not self.index.compressed:
            return None
        return Framed(self.object_size, self.index.stored_data_digest, at=self.data_offset)


#: The most reads a head takes: the probe, the fixed header, the whole header.
_MAX_HEAD_READS: Final = 3


def head_reads(key: str, size: int) -> Generator[int, bytes, BatchHead | BatchFence]:
    """The reads that parse the head of the ``size``-byte batch object ``key``, without
    I/O: each step yields how many of the object's first bytes to read next (never 0)
    and is sent exactly those bytes; it returns what :func:`read_batch_head` returns at
    the end. Each reader drives it over its own I/O (async backends, fsspec in Spark
    tasks), so all read a head alike: :data:`HEAD_PROBE` bytes first (the whole object if
    smaller), then the header's length if the index is longer.

    Raises:
        CorruptBatchError: naming ``key``: a read shorter than asked (the object is shorter
            than listed), a header that keeps growing; and as :func:`read_batch_head`.
        UnsupportedFormatError: as :func:`read_batch_head`.
    """
    want = min(HEAD_PROBE, size)
    for _ in range(_MAX_HEAD_READS):
        data = (yield want) if want else b""  # an empty object: nothing to read
        if len(data) < want:
            raise CorruptBatchError(
                f"read {len(data)} bytes of an object listed as {size}", where=key
            )
        found = read_batch_head(data, key=key, object_size=size)
        if not isinstance(found, int):
            return found
        want = found
    raise CorruptBatchError("the batch header kept growing while it was read", where=key)


def read_batch_head(
    prefix_bytes: bytes, *, key: str, object_size: int
) -> BatchHead | BatchFence | int:
    """Parse the head of the ``object_size``-byte object stored at batch key ``key``.

    ``prefix_bytes`` are the object's first bytes: a reader passes the first
    :data:`HEAD_PROBE` bytes, or the whole object if it is smaller. Returns the
    :class:`BatchHead` (or the :class:`BatchFence` standing at ``key``) when they hold the
    whole header; otherwise the header's total length, an ``int`` larger than
    ``len(prefix_bytes)``: read exactly that many bytes and call again.

    Raises:
        UnsupportedFormatError: a batch or fence of a newer format than this reads.
        CorruptBatchError: naming ``key``: not a batch key; more bytes than the object;
            a wrong magic; an object shorter than its header; an index that does not
            validate; ``16 + index length + stored data size != object_size`` (the
            stored size: ``data_size`` plain, ``stored_data_size`` compressed); a batch or fence
            that describes another key.
    """
    if parse_batch_key(key, key.rpartition("/")[0] + "/") is None:
        raise CorruptBatchError("not a batch key", where=key)
    if len(prefix_bytes) > object_size:
        raise CorruptBatchError(
            f"given {len(prefix_bytes)} bytes of an object of {object_size}", where=key
        )
    if prefix_bytes[:1] == b"{":
        return _read_fence(prefix_bytes, key=key, object_size=object_size)
    if prefix_bytes[: len(BATCH_MAGIC)] != BATCH_MAGIC[: len(prefix_bytes)]:
        raise CorruptBatchError(
            f"object begins with {bytes(prefix_bytes[:8])!r}, not the batch magic "
            f"{BATCH_MAGIC!r} (nor a fence's '{{')",
            where=key,
        )
    if object_size < HEADER_FIXED_SIZE:
        raise CorruptBatchError(
            f"object is {object_size} bytes, shorter than the {HEADER_FIXED_SIZE}-byte header",
            where=key,
        )
    if len(prefix_bytes) < HEADER_FIXED_SIZE:
        return HEADER_FIXED_SIZE
    index_length = int.from_bytes(prefix_bytes[len(BATCH_MAGIC) : HEADER_FIXED_SIZE], "big")
    header_length = HEADER_FIXED_SIZE + index_length
    if header_length > object_size:
        raise CorruptBatchError(
            f"index length {index_length} overruns the object ({object_size} bytes)", where=key
        )
    if len(prefix_bytes) < header_length:
        return header_length
    index = BatchIndex.from_json(bytes(prefix_bytes[HEADER_FIXED_SIZE:header_length]), where=key)
    if index.key != key:
        raise CorruptBatchError(
            f"batch index describes {index.key}, not the key it is stored at", where=key
        )
    _check_size(index, header_length, object_size)
    return BatchHead(index=index, data_offset=header_length, object_size=object_size)


def _check_size(index: BatchIndex, header_length: int, object_size: int) -> None:
    """CorruptBatchError unless the header and the stored data section are the object."""
    if header_length + index.stored_size != object_size:
        what = "stored_data_size" if index.compressed else "data_size"
        raise CorruptBatchError(
            f"header {header_length} + {what} {index.stored_size} bytes != object size "
            f"{object_size}",
            where=index.key,
        )


def _read_fence(prefix_bytes: bytes, *, key: str, object_size: int) -> BatchFence | int:
    if object_size > HEAD_PROBE:
        raise CorruptBatchError(
            f"object begins with '{{' but is {object_size} bytes: a batch fence is at most "
            f"{HEAD_PROBE}",
            where=key,
        )
    if len(prefix_bytes) < object_size:
        return object_size
    fence = _fence_from_json(bytes(prefix_bytes), where=key)
    if fence.key != key:
        raise CorruptBatchError(
            f"batch fence describes {fence.key}, not the key it is stored at", where=key
        )
    return fence


def commit_log_span(head: BatchHead, slice: BatchSlice) -> tuple[int, int]:
    """Absolute ``[start, end)`` bytes of ``slice``'s commit-log data in the object."""
    start = head.data_offset + slice.commit_log_at
    return start, start + slice.commit_log_size


def consume_queue_span(head: BatchHead, slice: BatchSlice) -> tuple[int, int]:
    """Absolute ``[start, end)`` bytes of ``slice``'s consume-queue data in the object."""
    start = head.data_offset + slice.consume_queue_at
    return start, start + slice.consume_queue_size


def data_section(head: BatchHead, obj: bytes) -> bytes:
    """The uncompressed data section of the whole batch object ``obj`` whose head is
    ``head``. A compressed one's stored bytes are checked against ``stored_data_digest``
    first, then decoded (frame checksums), so a flipped stored byte is found even where
    it decodes to the same data.

    Raises:
        CorruptFrameError: (a :class:`~tieredstore.errors.DigestMismatchError`) ``obj``
            is not ``head.object_size`` bytes, the stored digest differs, or the frames
            do not decode.
    """
    key = head.index.key
    if len(obj) != head.object_size:
        raise CorruptFrameError(f"{len(obj)} bytes, its head says {head.object_size}", where=key)
    if head.framed is None:
        return bytes(memoryview(obj)[head.data_offset :])
    return decode_stored(obj, head.framed, where=key)[head.data_offset :]


def decoded_batch(obj: bytes, *, key: str) -> bytes:
    """The whole batch object ``obj`` stored at ``key`` in uncompressed coordinates: its
    header, then its data section (:func:`data_section`: a compressed one checked against
    its stored digest and decoded); slices' spans are byte ranges of it.

    Raises:
        CorruptBatchError: its head does not parse, or it is a fence.
        UnsupportedFormatError: a newer batch format.
        CorruptFrameError: as :func:`data_section`.
    """
    head = read_batch_head(obj[:HEAD_PROBE], key=key, object_size=len(obj))
    if isinstance(head, int):
        head = read_batch_head(obj[:head], key=key, object_size=len(obj))
    if not isinstance(head, BatchHead):
        raise CorruptBatchError("a fence or an unreadable head, not a batch", where=key)
    return obj[: head.data_offset] + data_section(head, obj)
