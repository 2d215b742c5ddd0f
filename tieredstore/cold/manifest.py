"""Manifests: the commit point of one cold segment, as canonical JSON.

A manifest names and checks the two data objects of a segment (COMMIT_LOG and
CONSUME_QUEUE: name, size, digest by the algorithm it names, see
:mod:`tieredstore.cold.digests`) and says what they cover: queue offsets ``[start, end)``,
cold commitlog ``[cl_base, cl_end)``, min/max store timestamps, the message count, and
who wrote it (writer id, lease epoch, creation time). It is written after both objects,
so a segment exists exactly when its manifest does; the catalogue can
always be rebuilt from manifests.

Format versions: 3 is 2 with a compressed COMMIT_LOG object (seekable zstd frames,
:mod:`tieredstore.cold.compressed.frames`): its ref adds ``compression`` (``"zstd"``),
``stored_size`` and ``stored_digest`` (the CRC-32C of the stored bytes, whatever
``digest_algorithm`` says; all three required), while ``size`` and ``digest`` stay those
of the uncompressed bytes; a manifest of plain objects is still written as 2, so a reader
without compression refuses exactly the segments it cannot read
(:class:`~tieredstore.errors.UnsupportedFormatError`).
2 (written since 0.2) names each data object with its upload attempt
(``<name(base)>.<attempt>``, the same attempt for both objects; see
:mod:`tieredstore.cold.layout`); 1 (0.1.0) names them by base offset alone. All are read;
object keys always come from the names recorded here, never from the offsets.

A **fence marker** (:class:`FenceMarker`) may stand at a manifest key instead of a
manifest: GC creates one, stamped with its lease epoch, before it deletes the
uncommitted objects of a segment start that has no manifest, so a paused writer of an
older epoch can never create that manifest afterwards (its create finds the key taken).
A marker means "no segment here": every reader takes manifests through
:func:`read_stored` and skips markers; only a writer of the marker's epoch or newer
replaces one (compare-and-swap) with its manifest. docs/format.md has both formats.

Parsing is strict (:meth:`Manifest.from_json`): unknown, missing or duplicate fields,
wrong JSON types and every violated invariant raise
:class:`~tieredstore.errors.CorruptManifestError` naming the object. The encoding is
canonical (sorted keys, no whitespace), so ``to_json(from_json(b)) == b`` for every
manifest we write and equal manifests are equal bytes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Final, Protocol

from tieredstore.canonical_json import Fields, canonical, parse_object
from tieredstore.cold.compressed.framed import STORED_DIGEST, Framed
from tieredstore.cold.digests import WRITTEN, DigestAlgorithm
from tieredstore.cold.layout import (
    MAX_OFFSET,
    QueuePath,
    QueueRecord,
    SegmentKind,
    object_key,
    object_name,
    parse_object_key,
)
from tieredstore.errors import CorruptManifestError, InvalidNameError, UnsupportedFormatError
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE

__all__ = [
    "COMPRESSED_VERSION",
    "DIGEST_ALGORITHM",
    "FENCE_VERSION",
    "FORMAT_VERSION",
    "READABLE_VERSIONS",
    "SEGMENT_RANGE_FIELDS",
    "FenceMarker",
    "Manifest",
    "ObjectRef",
    "SegmentRange",
    "range_problem",
    "read_manifest",
    "read_stored",
]

FORMAT_VERSION: Final = 2
#: The format of a manifest whose COMMIT_LOG object is compressed.
COMPRESSED_VERSION: Final = 3
#: Every manifest format this tieredstore reads (1: 0.1.0 layout without attempts).
READABLE_VERSIONS: Final = frozenset({1, 2, 3})
#: The one compression a format-3 object names (seekable zstd frames).
_ZSTD: Final = "zstd"
#: The fence-marker format this tieredstore writes and reads.
FENCE_VERSION: Final = 1
#: The digest algorithm new manifests record (older ones may name another; both read).
DIGEST_ALGORITHM: Final = WRITTEN

_HEXDIGITS: Final = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """One object of a segment as its manifest records it: name (not key), size, digest.

    ``size`` and ``digest`` are always those of the uncompressed bytes; ``framed`` is set
    when the object is stored compressed (format 3; the COMMIT_LOG object only)."""

    name: str
    size: int
    digest: str
    framed: Framed | None = None

    @property
    def stored_size(self) -> int:
        """The object's size as stored (what a listing says): ``size`` when plain."""
        return self.size if self.framed is None else self.framed.stored_size

    def fields(self) -> dict[str, object]:
        """The ref as the manifest's JSON spells it (a plain object: no compression keys)."""
        out: dict[str, object] = {"name": self.name, "size": self.size, "digest": self.digest}
        if self.framed is not None:
            out |= {
                "compression": _ZSTD,
                "stored_size": self.framed.stored_size,
                "stored_digest": self.framed.stored_digest,
            }
        return out


@dataclass(frozen=True, slots=True)
class Manifest(QueueRecord):
    """The commit point of one segment: what it covers and how to check its objects.

    Invariants (checked on construction; :class:`CorruptManifestError` otherwise):
    ``0 <= start < end``, ``message_count == end - start``, ``0 <= cl_base < cl_end``,
    ``commit_log.size == cl_end - cl_base``, ``consume_queue.size == 20 * message_count``,
    object names match ``cl_base`` and ``start * 20`` (format 2: both carry the same
    upload attempt; format 1: neither does), only format 3 has a compressed
    ``commit_log`` and its ``stored_digest`` is 8 lowercase hex digits (CRC-32C),
    ``digest_algorithm`` is one we know
    (:class:`~tieredstore.cold.digests.DigestAlgorithm`) and both digests have its length,
    ``0 <= min_store_timestamp <= max_store_timestamp`` (real times: there is no empty
    segment and no sentinel), ``lease_epoch >= 1`` (epochs start at 1), a non-empty
    ``writer_id``, ``created_at_ms >= 0``.
    """

    start_offset: int
    end_offset: int
    cl_base: int
    cl_end: int
    commit_log: ObjectRef
    consume_queue: ObjectRef
    digest_algorithm: str
    min_store_timestamp: int
    max_store_timestamp: int
    message_count: int
    writer_id: str
    lease_epoch: int
    created_at_ms: int

    def __post_init__(self) -> None:
        problem = self._problem()
        if problem:
            where = f"manifest of {self.topic}/{self.queue_id} at offset {self.start_offset}"
            raise CorruptManifestError(problem, where=where)

    def _problem(self) -> str:
        """Return the first violated invariant, or ``""``."""
        if self.format_version not in READABLE_VERSIONS:
            return (
                f"unsupported format_version {self.format_version} "
                f"(this tieredstore reads {sorted(READABLE_VERSIONS)})"
            )
        return (
            QueuePath.problem(self.cluster, self.broker, self.topic, self.queue_id)
            or self._range_problem()
            or self._object_problem()
            or self._provenance_problem()
        )

    def _range_problem(self) -> str:
        count = self.end_offset - self.start_offset
        problem = range_problem(self)
        if not problem and self.message_count != count:
            return f"message_count {self.message_count} != end - start = {count}"
        return problem

    def _object_problem(self) -> str:
        if self.digest_algorithm not in _ALGORITHMS:
            return f"digest_algorithm {self.digest_algorithm!r} is not one of {sorted(_ALGORITHMS)}"
        expected = (
            ("commit_log", self.commit_log, self.cl_base, self.cl_end - self.cl_base),
            ("consume_queue", self.consume_queue, self.cq_base,
             CQ_UNIT_SIZE * self.message_count),
        )  # fmt: skip
        framed = self.commit_log.framed
        if (framed is not None) != (self.format_version == COMPRESSED_VERSION):
            return f"format_version {self.format_version} with commit_log.framed {framed}"
        if self.consume_queue.framed is not None:
            return "consume_queue is compressed (only commit_log may be)"
        if framed is not None and framed.stored_size < 0:
            return f"commit_log.stored_size {framed.stored_size} < 0"
        if framed is not None and not _is_hex(framed.stored_digest, STORED_DIGEST.hex_length):
            return (
                f"commit_log.stored_digest {framed.stored_digest!r} is not "
                f"{STORED_DIGEST.hex_length} lowercase hex digits ({STORED_DIGEST})"
            )
        attempt = _attempt_of(self.commit_log.name)
        if self.format_version >= 2 and not attempt:
            return f"commit_log.name {self.commit_log.name!r} lacks its upload attempt"
        if self.format_version == 1:
            attempt = ""
        for field, ref, base, size in expected:
            if ref.name != _safe_name(base, attempt):
                of = f" of attempt {attempt}" if attempt else ""
                return f"{field}.name {ref.name!r} does not name base offset {base}{of}"
            if ref.size != size:
                return f"{field}.size {ref.size} does not match the ranges ({size})"
            length = self.algorithm.hex_length
            if not _is_hex(ref.digest, length):
                return (
                    f"{field}.digest {ref.digest!r} is not {length} lowercase hex digits "
                    f"({self.digest_algorithm})"
                )
        return ""

    def _provenance_problem(self) -> str:
        if self.lease_epoch < 1:
            return f"lease_epoch {self.lease_epoch} < 1 (epochs start at 1)"
        if not self.writer_id:
            return "writer_id is empty"
        if self.created_at_ms < 0:
            return f"created_at_ms {self.created_at_ms} < 0"
        return ""

    # -- derived views ---------------------------------------------------------------
    @property
    def algorithm(self) -> DigestAlgorithm:
        """The digest algorithm of both data objects (one a manifest may name: a
        manifest that validated names a known one)."""
        return DigestAlgorithm(self.digest_algorithm)

    @property
    def cq_base(self) -> int:
        """Base offset of the CONSUME_QUEUE object: ``start * 20``."""
        return self.start_offset * CQ_UNIT_SIZE

    @property
    def attempt(self) -> str:
        """The upload attempt both data objects carry (``""`` for format 1)."""
        return _attempt_of(self.commit_log.name)

    @property
    def key(self) -> str:
        """This manifest's own object key."""
        return object_key(self.queue, SegmentKind.MANIFEST, self.start_offset)

    @property
    def commit_log_key(self) -> str:
        """The COMMIT_LOG object's key, from the name this manifest records."""
        return object_key(self.queue, SegmentKind.COMMIT_LOG, self.cl_base, self.attempt)

    @property
    def consume_queue_key(self) -> str:
        """The CONSUME_QUEUE object's key, from the name this manifest records."""
        return object_key(self.queue, SegmentKind.CONSUME_QUEUE, self.cq_base, self.attempt)

    # -- JSON ------------------------------------------------------------------------
    def to_json(self) -> bytes:
        """Canonical JSON: sorted keys, no whitespace, ASCII. ``from_json`` inverts it."""
        doc = asdict(self)
        doc["commit_log"] = self.commit_log.fields()
        doc["consume_queue"] = self.consume_queue.fields()
        return canonical(doc)

    @classmethod
    def from_json(cls, data: bytes, *, where: str) -> Manifest:
        """Parse and fully validate manifest JSON; ``where`` names the object.

        Unknown, missing or duplicate fields, wrong types (a bool is not an int) and
        every violated invariant raise :class:`CorruptManifestError` naming ``where``.
        """
        fields = parse_object(data, error=CorruptManifestError, what="manifest", where=where)
        return cls._from_fields(fields, where=where)

    @classmethod
    def _from_fields(cls, fields: Fields, *, where: str) -> Manifest:
        fields.version("format_version", READABLE_VERSIONS)
        values: dict[str, Any] = {
            name: _object_ref(fields, name) if name in _REF_FIELDS else fields.scalar(name, typ)
            for name, typ in _MANIFEST_FIELDS.items()
        }
        fields.no_extra()
        try:
            return cls(**values)
        except CorruptManifestError as exc:
            raise CorruptManifestError(exc.message, where=where) from exc


class SegmentRange(Protocol):
    """What a manifest and a batch slice both say of a segment's data: its offsets, its
    commit-log range and its store times."""

    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def cl_base(self) -> int: ...
    @property
    def cl_end(self) -> int: ...
    @property
    def min_store_timestamp(self) -> int: ...
    @property
    def max_store_timestamp(self) -> int: ...


def range_problem(data: SegmentRange) -> str:
    """The first violated range invariant of a segment's data, or ``""``: the one rule a
    manifest and a batch slice (:mod:`tieredstore.cold.batch`) share.

    ``0 <= start < end <= MAX_OFFSET // 20`` (non-empty, and every CQ byte offset valid),
    ``0 <= cl_base < cl_end <= MAX_OFFSET``, ``0 <= min_store_timestamp <=
    max_store_timestamp`` (real times: there is no empty segment and no sentinel).
    """
    start, end, cl_base, cl_end = data.start_offset, data.end_offset, data.cl_base, data.cl_end
    if not 0 <= start < end <= MAX_OFFSET // CQ_UNIT_SIZE:
        return f"queue offsets [{start}, {end}) are not a non-empty range of valid offsets"
    if not 0 <= cl_base < cl_end <= MAX_OFFSET:
        return (
            f"cold commitlog range [{cl_base}, {cl_end}) is not a non-empty range of valid offsets"
        )
    if not 0 <= data.min_store_timestamp <= data.max_store_timestamp:
        return (
            f"store timestamps min {data.min_store_timestamp} / max "
            f"{data.max_store_timestamp} are not 0 <= min <= max"
        )
    return ""


def _attempt_of(name: str) -> str:
    """The ``.<attempt>`` suffix of a data object's name, or ``""``."""
    _, _, attempt = name.partition(".")
    return attempt


def _is_hex(text: str | None, length: int) -> bool:
    """Whether ``text`` is ``length`` lowercase hex digits."""
    return text is not None and len(text) == length and set(text) <= _HEXDIGITS


def _safe_name(base: int, attempt: str) -> str:
    """``object_name(base, attempt)``, or ``""`` (matching no name) if it cannot be one."""
    try:
        return object_name(base, attempt)
    except InvalidNameError:
        return ""


_ALGORITHMS: Final = frozenset(a.value for a in DigestAlgorithm)


_REF_FIELDS: Final = frozenset({"commit_log", "consume_queue"})
#: The fields naming a segment's queue and ranges, as a manifest and a batch slice spell them.
SEGMENT_RANGE_FIELDS: Final[dict[str, type]] = {
    "topic": str,
    "queue_id": int,
    "start_offset": int,
    "end_offset": int,
    "cl_base": int,
    "cl_end": int,
}
_MANIFEST_FIELDS: Final[dict[str, type]] = {
    "format_version": int,
    "cluster": str,
    "broker": str,
    **SEGMENT_RANGE_FIELDS,
    "commit_log": ObjectRef,
    "consume_queue": ObjectRef,
    "digest_algorithm": str,
    "min_store_timestamp": int,
    "max_store_timestamp": int,
    "message_count": int,
    "writer_id": str,
    "lease_epoch": int,
    "created_at_ms": int,
}


def _object_ref(fields: Fields, name: str) -> ObjectRef:
    sub = fields.nested(name)
    framed: Framed | None = None
    if {"compression", "stored_size", "stored_digest"} & sub.doc.keys():
        compression = sub.scalar("compression", str)
        if compression != _ZSTD:
            raise UnsupportedFormatError(
                f"{name}.compression {compression!r} (this tieredstore reads {_ZSTD!r})",
                where=sub.where,
            )
        framed = Framed(sub.integer("stored_size"), str(sub.scalar("stored_digest", str)))
    ref = ObjectRef(
        name=str(sub.scalar("name", str)),
        size=sub.integer("size"),
        digest=str(sub.scalar("digest", str)),
        framed=framed,
    )
    sub.no_extra()
    return ref


def read_manifest(data: bytes, key: str) -> Manifest:
    """Parse the manifest stored at ``key`` and check it describes that very key.

    Raises:
        CorruptManifestError: invalid manifest, or one whose cluster, broker, topic,
            queue or start offset differs from what its key says (a copied or
            misplaced manifest), or a key that is not a manifest key.
    """
    stored = read_stored(data, key)
    if isinstance(stored, FenceMarker):
        raise CorruptManifestError(
            f"{stored.describe()}: no segment is committed at this key", where=key
        )
    return stored


def _parse_manifest_key(key: str) -> None:
    try:
        parsed = parse_object_key(key)
    except InvalidNameError as exc:
        raise CorruptManifestError(f"not a manifest key: {exc.message}", where=key) from exc
    if parsed.kind is not SegmentKind.MANIFEST:
        raise CorruptManifestError(f"a {parsed.kind.value} object is not a manifest", where=key)


@dataclass(frozen=True, slots=True)
class FenceMarker:
    """ "No segment starts here, and none of an epoch below ``lease_epoch`` ever will."

    Stored at ``MANIFEST/<name(start)>.json`` by GC (create-if-absent) before it deletes
    uncommitted objects of that segment start; replaced only by a manifest of a writer
    whose lease epoch is ``>= lease_epoch``. Never collected except with its queue.
    """

    cluster: str
    broker: str
    topic: str
    queue_id: int
    start_offset: int
    lease_epoch: int
    writer_id: str
    created_at_ms: int
    fence_version: int = FENCE_VERSION

    def __post_init__(self) -> None:
        problem = ""
        if self.lease_epoch < 1:
            problem = f"lease_epoch {self.lease_epoch} < 1 (epochs start at 1)"
        elif not self.writer_id:
            problem = "writer_id is empty"
        elif not 0 <= self.start_offset <= MAX_OFFSET // CQ_UNIT_SIZE:
            problem = f"start_offset {self.start_offset} is not a valid queue offset"
        if problem:
            raise CorruptManifestError(
                problem, where=f"fence marker of {self.topic}/{self.queue_id}"
            )

    @property
    def queue(self) -> QueuePath:
        return QueuePath(self.cluster, self.broker, self.topic, self.queue_id)

    @property
    def key(self) -> str:
        """The manifest key this marker occupies."""
        return object_key(self.queue, SegmentKind.MANIFEST, self.start_offset)

    def to_json(self) -> bytes:
        return canonical(asdict(self))

    def describe(self) -> str:
        return f"fence marker of epoch {self.lease_epoch} ({self.writer_id}) at {self.key}"


_FENCE_FIELDS: Final[dict[str, type]] = {
    "cluster": str,
    "broker": str,
    "topic": str,
    "queue_id": int,
    "start_offset": int,
    "lease_epoch": int,
    "writer_id": str,
    "created_at_ms": int,
}


def _fence_from_fields(fields: Fields, *, where: str) -> FenceMarker:
    fields.version("fence_version", {FENCE_VERSION})
    values: dict[str, Any] = {n: fields.scalar(n, t) for n, t in _FENCE_FIELDS.items()}
    fields.no_extra()
    try:
        return FenceMarker(**values)
    except (CorruptManifestError, InvalidNameError) as exc:
        raise CorruptManifestError(exc.message, where=where) from exc


def read_stored(data: bytes, key: str) -> Manifest | FenceMarker:
    """Parse what is stored at manifest key ``key``: a manifest, or a fence marker.

    The one rule every reader of the committed history follows: a :class:`Manifest`
    commits a segment; a :class:`FenceMarker` means there is no segment at its start.

    Raises:
        UnsupportedFormatError: a manifest or marker of a newer format than this reads.
        CorruptManifestError: anything else that does not validate, or describes
            another key than ``key`` (see :func:`read_manifest`).
    """
    _parse_manifest_key(key)
    fields = parse_object(data, error=CorruptManifestError, what="manifest", where=key)
    if "fence_version" in fields.doc:
        stored: Manifest | FenceMarker = _fence_from_fields(fields, where=key)
    else:
        stored = Manifest._from_fields(fields, where=key)
    if stored.key != key:
        raise CorruptManifestError(
            f"{'fence marker' if isinstance(stored, FenceMarker) else 'manifest'} describes "
            f"{stored.key}, not the key it is stored at",
            where=key,
        )
    return stored
