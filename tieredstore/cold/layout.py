"""Cold-store naming: the one pure, reversible map between queues/segments and object keys.

Layout (compatible with RocketMQ's own tiered store; docs/format.md, "Cold layout: keys")::

    <md5(cluster)[:8]>_<cluster>/                      cluster_dir(cluster)
      <broker>/                                         broker_prefix(cluster, broker)
        _lease.json                                     lease_key(cluster, broker)
        _replicas/<replica>.json                        replica_key(cluster, broker,
                                                        replica): what one replica of a
                                                        broker group holds, durably
                                                        (:mod:`tieredstore.cold.replicas`)
        _tiering.json                                   tiering_key(cluster, broker): the
                                                        topic rules, with since-when
        _queues/<topic>/<queueId>/INIT.json             init_key(queue): init offset + policy
                                                        (written by 0.1.x; still read)
        _queues/_inits/<stamp_ms:013d>-<digest>.json    inits_key(cluster, broker, stamp,
                                                        digest): the init records of many
                                                        queues, one object per discovery
        _queues/<topic>/<queueId>/RETENTION/<name(first)>.json
                                                        retention_key(queue, first): the
                                                        first offset after a head deletion
        _queues/<topic>/<queueId>/STOPPED/<name(since)>.json
                                                        stop_key(queue, since): where tiering
                                                        stopped when the rules excluded the
                                                        topic from ``since`` (epoch ms)
        _quarantine/<topic>/<queueId>/<stamp>/<KIND>/<name>   quarantine_key(...)
        _config/<file>/<stamp>-<digest>                 config_copy_key(...)
        _fingerprints/s<seq:010d>-<stamp_ms:013d>.json  fingerprint_key(cluster, broker,
                                                        stamp, sequence): a hot
                                                        fingerprint, written by
                                                        ``tieredstore fingerprint``; the
                                                        sequence orders them (older
                                                        ``<stamp_ms:013d>.json``: below
                                                        every sequenced one)
        _batches/<name(sequence)>.batch                 batch_key(cluster, broker,
                                                        sequence): one tick's data of
                                                        many small queues in one object
                                                        (:mod:`tieredstore.cold.batch`)
        <topic>/<queueId>/                              queue_root(...)
          COMMIT_LOG/<name(cl_base)>.<attempt>          cold commitlog object
          CONSUME_QUEUE/<name(start * 20)>.<attempt>    cold consume-queue object
          MANIFEST/<name(start)>.json                   commit point of the pair
          LOSS/<name(start)>.json                       loss record: offsets the broker
                                                        deleted before they were tiered,
                                                        accepted by ``resume --accept-loss``

    name(base) = md5(str(base))[:8] + f"{base:020d}"
    attempt    = 16 lowercase hex digits, fresh for every upload attempt

**Data objects are never overwritten.** Every upload attempt writes its COMMIT_LOG and
CONSUME_QUEUE objects under names no other attempt uses (the ``attempt`` suffix, as
Kafka's RemoteLogSegmentId does), and the manifest records those names. The manifest's
own key is deterministic and is only ever *created* (create-if-absent), so two writers
racing for the same segment cannot both commit, and a late upload of a fenced writer
lands beside the committed objects, never over them. Stores written by 0.1.0 (manifest
``format_version`` 1) have data objects without the suffix; they stay readable.

Worked examples:

=================================  ================================
input                              output
=================================  ================================
``object_name(0)``                 ``cfcd208400000000000000000000``
``object_name(20)``                ``98f1370800000000000000000020``
``object_name(1073741824)``        ``952eb02900000000001073741824``
``cluster_dir("DefaultCluster")``  ``212d6b50_DefaultCluster``
=================================  ================================

The base of each kind is in its own address space: a COMMIT_LOG object is named by its
cold commitlog offset (``cl_base``), a CONSUME_QUEUE object by its CQ byte offset
(``start * 20``), a MANIFEST by its first queue offset (``start``).

A LOSS record is not a segment object: it sits beside the manifests, is named by the
first queue offset it covers (:func:`loss_key`, parsed by :func:`parse_loss_key`), and
every consumer of a listing tells it apart with :func:`is_loss_key` before it asks
:func:`parse_object_key` (which refuses it). It is never garbage.

Directory helpers (``cluster_dir``, ``broker_prefix``, ``queue_root``, ``kind_prefix``,
``quarantine_prefix``) return no trailing ``/``; append one to list a directory, so that
listing broker ``b`` does not also match broker ``b2``.

**Names are refused, never mangled.** A cluster, broker or topic name must be usable as
one path component and one object-key segment as it is: not empty, not ``.``, no ``..``,
no ``/``, ``\\``, NUL or other control character, valid UTF-8, at most 255 bytes (246 for
a cluster, which gains the 9-byte hash prefix). ``%`` and ``|`` are legal (``%RETRY%g``,
``%DLQ%g``) and pass through unchanged.

**Config copies.** ``_config/`` holds versioned byte-for-byte copies of the broker's
``config/`` files (:data:`CONFIG_FILES`): one directory per file, one object per version,
named ``<stamp_ms:013d>-<sha256[:16]>`` so a listing sorts oldest first
(:func:`config_copy_key` / :func:`parse_config_copy_key` invert each other).

**Batch objects.** ``_batches/`` holds the broker's batch objects
(:mod:`tieredstore.cold.batch`), one per sequence number, named
``<name(sequence)>.batch`` (:func:`batch_key` / :func:`parse_batch_key` invert each
other). The md5 prefix of ``name`` means a listing does *not* sort by sequence: order
batch keys by the sequence :func:`parse_batch_key` returns.

**Reserved names.** Our own per-broker files (``_lease.json``, ``_quarantine/``,
``_config/``, ``_batches/``) sit at the same level as topic directories. So that no
topic can ever collide with them — now or with a reserved name added later — a *topic*
may not begin with ``_``: every entry
beginning with ``_`` under a broker prefix belongs to tieredstore. RocketMQ accepts such
topic names, but none of its own topics uses one; a broker that has one gets a clear
:class:`~tieredstore.errors.InvalidNameError` for that topic instead of silent renaming.
Clusters and brokers may begin with ``_`` (nothing of ours sits beside them).
"""

from __future__ import annotations

import enum
import hashlib
import re
import uuid
from dataclasses import dataclass
from typing import Final

from tieredstore.errors import InvalidNameError

__all__ = [
    "BATCH_SUFFIX",
    "CONFIG_FILES",
    "MANIFEST_SUFFIX",
    "MAX_COMPONENT_BYTES",
    "MAX_OFFSET",
    "MAX_QUEUE_ID",
    "ConfigCopyKey",
    "FingerprintName",
    "Listed",
    "LossKey",
    "ObjectKey",
    "OwnEntry",
    "QueuePath",
    "QueueRecord",
    "QueueRecordKey",
    "QueueRecordKind",
    "SegmentKind",
    "Unrecognised",
    "batch_key",
    "batch_prefix",
    "broker_prefix",
    "classify_listed",
    "cluster_dir",
    "config_copy_key",
    "config_prefix",
    "fingerprint_key",
    "fingerprint_prefix",
    "init_key",
    "inits_key",
    "is_loss_key",
    "kind_prefix",
    "lease_key",
    "loss_key",
    "loss_prefix",
    "new_attempt",
    "object_key",
    "object_name",
    "parse_batch_key",
    "parse_config_copy_key",
    "parse_fingerprint_name",
    "parse_fingerprint_stamp",
    "parse_inits_key",
    "parse_loss_key",
    "parse_object_key",
    "parse_queue_record_key",
    "quarantine_key",
    "quarantine_loss_key",
    "quarantine_prefix",
    "queue_record_prefix",
    "queue_records_prefix",
    "queue_root",
    "replica_key",
    "replica_prefix",
    "retention_key",
    "retiered_key",
    "stop_key",
    "tiering_key",
    "validate_name",
    "validate_topic",
]

#: Longest path component POSIX filesystems (and so our POSIX backend) accept.
MAX_COMPONENT_BYTES: Final = 255
#: Object names hold 20 decimal digits; offsets are Java longs, so int64 is the bound.
MAX_OFFSET: Final = 2**63 - 1
#: Queue ids are Java ints.
MAX_QUEUE_ID: Final = 2**31 - 1
MANIFEST_SUFFIX: Final = ".json"
#: What a batch object's name ends with (:func:`batch_key`).
BATCH_SUFFIX: Final = ".batch"

_HASH_LEN: Final = 8
_DIGITS: Final = 20
_NAME_LEN: Final = _HASH_LEN + _DIGITS
_RESERVED_PREFIX: Final = "_"
_LEASE_NAME: Final = "_lease.json"
_QUARANTINE_DIR: Final = "_quarantine"
_CONFIG_DIR: Final = "_config"
_FINGERPRINT_DIR: Final = "_fingerprints"
_BATCH_DIR: Final = "_batches"
_REPLICAS_DIR: Final = "_replicas"
_RETIERED_DIR: Final = "_retiered"
_TIERING_NAME: Final = "_tiering.json"
_QUEUES_DIR: Final = "_queues"
_INIT_NAME: Final = "INIT.json"
#: Under ``_queues``: the init-record objects of many queues (a topic never starts with ``_``).
_INITS_DIR: Final = "_inits"
_INITS_NAME: Final = re.compile(r"(\d{13,})-([0-9a-f]{16})\.json")
_RETENTION_DIR: Final = "RETENTION"
_STOPPED_DIR: Final = "STOPPED"
_DIGEST_PREFIX_LEN: Final = 16
#: The broker's ``config/`` files the sidecar keeps copies of (and ``restore`` puts back).
CONFIG_FILES: Final = (
    "topics.json",
    "subscriptionGroup.json",
    "consumerOffset.json",
    "delayOffset.json",
)
_LOSS_DIR: Final = "LOSS"
_HEX: Final = frozenset("0123456789abcdef")
_ATTEMPT_LEN: Final = 16
_ATTEMPT_SEP: Final = "."


class SegmentKind(enum.Enum):
    """The three object kinds of a segment; the value is the directory name."""

    COMMIT_LOG = "COMMIT_LOG"
    CONSUME_QUEUE = "CONSUME_QUEUE"
    MANIFEST = "MANIFEST"


def _md5_prefix(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()[:_HASH_LEN]


def validate_name(name: str, *, what: str, max_bytes: int = MAX_COMPONENT_BYTES) -> str:
    """Return ``name`` unchanged if it is safe as one path component, else raise.

    ``what`` ("topic", "broker", ...) names the field in the error message.

    Raises:
        InvalidNameError: empty, ``.``, containing ``..``, ``/``, ``\\``, NUL or a
            control character, not valid UTF-8, or longer than ``max_bytes`` bytes.
    """
    if not isinstance(name, str):
        raise InvalidNameError(f"{what} name must be a string, not {type(name).__name__}")
    shown = repr(name[:80])
    if not name:
        raise InvalidNameError(f"{what} name is empty")
    if name == "." or ".." in name:
        raise InvalidNameError(f"{what} name {shown} contains a path traversal ('.' or '..')")
    for ch in ("/", "\\"):
        if ch in name:
            raise InvalidNameError(f"{what} name {shown} contains {ch!r}")
    bad = next((c for c in name if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if bad is not None:
        raise InvalidNameError(f"{what} name {shown} contains control character {bad!r}")
    try:
        size = len(name.encode())
    except UnicodeEncodeError as exc:
        raise InvalidNameError(f"{what} name {shown} is not valid UTF-8") from exc
    if size > max_bytes:
        raise InvalidNameError(f"{what} name {shown} is {size} bytes, longer than {max_bytes}")
    return name


def validate_topic(topic: str) -> str:
    """Return ``topic`` if it can name a queue directory (see the module docstring)."""
    validate_name(topic, what="topic")
    if topic.startswith(_RESERVED_PREFIX):
        raise InvalidNameError(
            f"topic name {topic[:80]!r} starts with '_', reserved for tieredstore's own "
            "objects (_lease.json, _quarantine/) beside the topic directories"
        )
    return topic


def _validate_queue_id(queue_id: int) -> int:
    if isinstance(queue_id, bool) or not isinstance(queue_id, int):
        raise InvalidNameError(f"queue id must be an int, not {type(queue_id).__name__}")
    if not 0 <= queue_id <= MAX_QUEUE_ID:
        raise InvalidNameError(f"queue id {queue_id} is outside [0, {MAX_QUEUE_ID}]")
    return queue_id


def _validate_offset(value: int, what: str = "base offset") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidNameError(f"{what} must be an int, not {type(value).__name__}")
    if not 0 <= value <= MAX_OFFSET:
        raise InvalidNameError(f"{what} {value} is outside [0, {MAX_OFFSET}]")
    return value


def cluster_dir(cluster: str) -> str:
    """Return ``<md5(cluster)[:8]>_<cluster>``, e.g. ``212d6b50_DefaultCluster``."""
    validate_name(cluster, what="cluster", max_bytes=MAX_COMPONENT_BYTES - _HASH_LEN - 1)
    return f"{_md5_prefix(cluster)}_{cluster}"


def broker_prefix(cluster: str, broker: str) -> str:
    """Return ``<cluster_dir>/<broker>``: everything one broker owns lives under it."""
    return f"{cluster_dir(cluster)}/{validate_name(broker, what='broker')}"


def lease_key(cluster: str, broker: str) -> str:
    """Return ``<cluster_dir>/<broker>/_lease.json``, the single-writer lease object."""
    return f"{broker_prefix(cluster, broker)}/{_LEASE_NAME}"


def new_attempt() -> str:
    """A fresh upload-attempt id: 16 random lowercase hex digits."""
    return uuid.uuid4().hex[:_ATTEMPT_LEN]


def _validate_attempt(attempt: str) -> str:
    if attempt and (len(attempt) != _ATTEMPT_LEN or not set(attempt) <= _HEX):
        raise InvalidNameError(f"upload attempt {attempt!r} is not {_ATTEMPT_LEN} hex digits")
    return attempt


def object_name(base_offset: int, attempt: str = "") -> str:
    """Return ``md5(str(base))[:8] + f"{base:020d}"``, plus ``.<attempt>`` when given.

    A manifest's name has no attempt (and gains ``.json`` in its key); 0.1.0 data
    objects have none either.
    """
    base = _validate_offset(base_offset)
    name = f"{_md5_prefix(str(base))}{base:0{_DIGITS}d}"
    return f"{name}{_ATTEMPT_SEP}{_validate_attempt(attempt)}" if attempt else name


@dataclass(frozen=True, slots=True, order=True)
class QueuePath:
    """One queue's place in the cold store; construction validates every part."""

    cluster: str
    broker: str
    topic: str
    queue_id: int

    def __post_init__(self) -> None:
        cluster_dir(self.cluster)
        validate_name(self.broker, what="broker")
        validate_topic(self.topic)
        _validate_queue_id(self.queue_id)

    @classmethod
    def problem(cls, cluster: str, broker: str, topic: str, queue_id: int) -> str:
        """Why these parts make no queue path (the InvalidNameError's message), or ``""``."""
        try:
            cls(cluster, broker, topic, queue_id)
        except InvalidNameError as exc:
            return exc.message
        return ""

    @property
    def root(self) -> str:
        """``<cluster_dir>/<broker>/<topic>/<queueId>`` (no trailing slash)."""
        return f"{cluster_dir(self.cluster)}/{self.broker}/{self.topic}/{self.queue_id}"

    def __str__(self) -> str:
        return f"{self.topic}/{self.queue_id}"


@dataclass(frozen=True, slots=True)
class QueueRecord:
    """What every record about one queue starts with (a manifest, a loss record, a
    provenance record): its format version and its queue's names."""

    format_version: int
    cluster: str
    broker: str
    topic: str
    queue_id: int

    @property
    def queue(self) -> QueuePath:
        """The queue the record is about (validates the names)."""
        return QueuePath(self.cluster, self.broker, self.topic, self.queue_id)


def queue_root(cluster: str, broker: str, topic: str, queue_id: int) -> str:
    """Return ``<cluster_dir>/<broker>/<topic>/<queueId>`` after validating every part."""
    return QueuePath(cluster, broker, topic, queue_id).root


def kind_prefix(queue: QueuePath, kind: SegmentKind) -> str:
    """Return ``<queue root>/<KIND>``, the directory of every object of one kind."""
    return f"{queue.root}/{kind.value}"


def object_key(queue: QueuePath, kind: SegmentKind, base_offset: int, attempt: str = "") -> str:
    """Return the key of the ``kind`` object with base ``base_offset`` of ``queue``.

    ``base_offset`` is in the kind's own address space (see the module docstring);
    ``attempt`` names a data object's upload attempt (a manifest has none).
    """
    if kind is SegmentKind.MANIFEST:
        if attempt:
            raise InvalidNameError("a manifest key has no upload attempt")
        return f"{kind_prefix(queue, kind)}/{object_name(base_offset)}{MANIFEST_SUFFIX}"
    return f"{kind_prefix(queue, kind)}/{object_name(base_offset, attempt)}"


@dataclass(frozen=True, slots=True, order=True)
class ObjectKey:
    """A parsed object key; ``ObjectKey(...).key`` and :func:`parse_object_key` invert."""

    cluster: str
    broker: str
    topic: str
    queue_id: int
    kind: SegmentKind
    base_offset: int
    attempt: str = ""

    def __post_init__(self) -> None:
        QueuePath(self.cluster, self.broker, self.topic, self.queue_id)
        if not isinstance(self.kind, SegmentKind):
            raise InvalidNameError(f"object kind must be a SegmentKind, not {self.kind!r}")
        _validate_offset(self.base_offset)
        _validate_attempt(self.attempt)

    @property
    def queue(self) -> QueuePath:
        return QueuePath(self.cluster, self.broker, self.topic, self.queue_id)

    @property
    def key(self) -> str:
        return object_key(self.queue, self.kind, self.base_offset, self.attempt)

    def __str__(self) -> str:
        return self.key


def _parse_name(name: str, kind: SegmentKind, key: str) -> tuple[int, str]:
    """Return ``(base, attempt)`` of an object name (attempt ``""`` when it has none)."""
    attempt = ""
    if kind is SegmentKind.MANIFEST:
        if not name.endswith(MANIFEST_SUFFIX):
            raise InvalidNameError(f"manifest name {name!r} lacks {MANIFEST_SUFFIX!r}", where=key)
        name = name[: -len(MANIFEST_SUFFIX)]
    elif len(name) > _NAME_LEN:
        name, sep, attempt = name.partition(_ATTEMPT_SEP)
        if not sep or len(attempt) != _ATTEMPT_LEN or not set(attempt) <= _HEX:
            raise InvalidNameError(
                f"object name {name!r} has no valid .<{_ATTEMPT_LEN} hex> attempt suffix",
                where=key,
            )
    digits = name[_HASH_LEN:]
    if len(name) != _NAME_LEN or not (digits.isascii() and digits.isdigit()):
        raise InvalidNameError(f"object name {name!r} is not <8 hex><{_DIGITS} digits>", where=key)
    base = int(digits)
    if base > MAX_OFFSET:
        raise InvalidNameError(f"base offset {base} exceeds {MAX_OFFSET}", where=key)
    if name[:_HASH_LEN] != _md5_prefix(str(base)):
        raise InvalidNameError(
            f"object name {name!r}: hash prefix should be {_md5_prefix(str(base))!r}", where=key
        )
    return base, attempt


def _parse_cluster_dir(part: str, key: str) -> str:
    prefix, sep, cluster = part.partition("_")
    if not sep or len(prefix) != _HASH_LEN or not set(prefix) <= _HEX:
        raise InvalidNameError(f"cluster directory {part!r} is not <8 hex>_<cluster>", where=key)
    cluster_dir(cluster)  # validates the name
    if prefix != _md5_prefix(cluster):
        raise InvalidNameError(
            f"cluster directory {part!r}: hash prefix should be {_md5_prefix(cluster)!r}",
            where=key,
        )
    return cluster


def _parse_queue_id(part: str, key: str) -> int:
    # Canonical decimal only, so the key round-trips ("007" and "+7" are not 7's key).
    if not (part.isascii() and part.isdigit()) or (len(part) > 1 and part[0] == "0"):
        raise InvalidNameError(f"queue id {part!r} is not a canonical decimal", where=key)
    try:
        return _validate_queue_id(int(part))
    except InvalidNameError as exc:
        raise InvalidNameError(exc.message, where=key) from exc


def _parse_queue_parts(parts: list[str], key: str) -> QueuePath:
    """Parse ``<cluster_dir>/<broker>/<topic>/<queueId>`` (the first four parts)."""
    cdir, broker, topic, qid = parts[:4]
    try:
        cluster = _parse_cluster_dir(cdir, key)
        validate_name(broker, what="broker")
        validate_topic(topic)
    except InvalidNameError as exc:
        raise InvalidNameError(exc.message, where=key) from exc
    return QueuePath(cluster, broker, topic, _parse_queue_id(qid, key))


def _split6(key: str) -> list[str]:
    parts = key.split("/")
    if len(parts) != 6:
        raise InvalidNameError(
            f"object key has {len(parts)} '/'-separated parts, expected 6", where=key
        )
    return parts


def parse_object_key(key: str) -> ObjectKey:
    """Parse ``<cluster_dir>/<broker>/<topic>/<queueId>/<KIND>/<name>`` into its parts.

    Exactly the keys :func:`object_key` produces parse; for those,
    ``parse_object_key(k).key == k``. The lease, quarantined objects, loss records, temp
    files and any other key are refused.

    Raises:
        InvalidNameError: naming the key and the first part that does not fit.
    """
    parts = _split6(key)
    queue = _parse_queue_parts(parts, key)
    kind_name, name = parts[4], parts[5]
    try:
        kind = SegmentKind(kind_name)
    except ValueError as exc:
        raise InvalidNameError(f"unknown object kind {kind_name!r}", where=key) from exc
    base, attempt = _parse_name(name, kind, key)
    return ObjectKey(queue.cluster, queue.broker, queue.topic, queue.queue_id, kind, base, attempt)


# -- loss records -------------------------------------------------------------------------


def loss_prefix(queue: QueuePath) -> str:
    """Return ``<queue root>/LOSS``, the directory of the queue's loss records."""
    return f"{queue.root}/{_LOSS_DIR}"


def loss_key(queue: QueuePath, start_offset: int) -> str:
    """Return ``<queue root>/LOSS/<name(start)>.json``: the record of a loss that begins
    at queue offset ``start_offset``."""
    return f"{loss_prefix(queue)}/{object_name(start_offset)}{MANIFEST_SUFFIX}"


@dataclass(frozen=True, slots=True, order=True)
class LossKey:
    """A parsed loss-record key; ``LossKey(...).key`` and :func:`parse_loss_key` invert."""

    queue: QueuePath
    start_offset: int

    def __post_init__(self) -> None:
        _validate_offset(self.start_offset, "loss start offset")

    @property
    def key(self) -> str:
        return loss_key(self.queue, self.start_offset)

    def __str__(self) -> str:
        return self.key


def is_loss_key(key: str) -> bool:
    """Whether ``key`` lies in a queue's ``LOSS/`` directory (valid or not: a malformed
    name there is still no segment object). Cheap: no validation of the other parts."""
    parts = key.split("/")
    return len(parts) == 6 and parts[4] == _LOSS_DIR


def parse_loss_key(key: str) -> LossKey:
    """Parse ``<cluster_dir>/<broker>/<topic>/<queueId>/LOSS/<name(start)>.json``.

    Raises:
        InvalidNameError: naming the key and the first part that does not fit.
    """
    parts = _split6(key)
    queue = _parse_queue_parts(parts, key)
    if parts[4] != _LOSS_DIR:
        raise InvalidNameError(f"not a loss record (directory {parts[4]!r})", where=key)
    # Loss records are named exactly like manifests: <name(start)>.json.
    return LossKey(queue, _parse_name(parts[5], SegmentKind.MANIFEST, key)[0])


# -- classifying a listing ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OwnEntry:
    """An entry of tieredstore's own beside the topics (``_lease.json``, ``_quarantine/``,
    ``_config/`` and the like: every name beginning with ``_`` under a broker prefix)."""

    key: str


@dataclass(frozen=True, slots=True)
class Unrecognised:
    """A key under a broker prefix that is none of ours: reported, never touched."""

    key: str
    problem: str


#: What one listed key under a broker prefix is (:func:`classify_listed`).
Listed = OwnEntry | LossKey | ObjectKey | Unrecognised


def classify_listed(key: str, prefix: str) -> Listed:
    """Classify a key listed under the broker prefix ``prefix`` (which ends with ``/``).

    The one classification GC, reconcile and the verifier share: tieredstore's own
    entries (:class:`OwnEntry`), loss records (:class:`LossKey`), segment objects —
    COMMIT_LOG, CONSUME_QUEUE, MANIFEST — (:class:`ObjectKey`), and everything else,
    malformed names in our own directories included (:class:`Unrecognised`).
    """
    if key[len(prefix) :].startswith(_RESERVED_PREFIX):
        return OwnEntry(key)
    try:
        return parse_loss_key(key) if is_loss_key(key) else parse_object_key(key)
    except InvalidNameError as exc:
        return Unrecognised(key, exc.message)


def quarantine_prefix(queue: QueuePath) -> str:
    """Return ``<cluster_dir>/<broker>/_quarantine/<topic>/<queueId>``."""
    return (
        f"{broker_prefix(queue.cluster, queue.broker)}/{_QUARANTINE_DIR}/"
        f"{queue.topic}/{queue.queue_id}"
    )


def quarantine_key(obj: ObjectKey, *, stamp_ms: int) -> str:
    """Return where ``repair`` moves a divergent object: under the queue's quarantine prefix,
    in a directory named by the repair's time (``stamp_ms``, epoch ms, 13+ digits) so a
    queue that diverges twice at the same offset never overwrites its earlier evidence:
    ``<quarantine_prefix>/<stamp_ms:013d>/<KIND>/<name>``.
    """
    stamp = _validate_offset(stamp_ms, "quarantine stamp")
    name = obj.key.rsplit("/", 1)[1]
    return f"{quarantine_prefix(obj.queue)}/{stamp:013d}/{obj.kind.value}/{name}"


def retiered_key(queue: QueuePath, start_offset: int, *, stamp_ms: int) -> str:
    """Return where the sidecar records that it tiered a lost committed range again
    (``tieredstore.dispatcher.tiering.cold_writer.heal_lost_tail``):
    ``<cluster_dir>/<broker>/_retiered/<topic>/<queueId>/<name(start)>-<stamp_ms:013d>.json``.
    Under a ``_`` name, so GC and reconcile take it for one of tieredstore's own
    entries, never a segment; one per event."""
    start = object_name(_validate_offset(start_offset, "re-tiered start offset"))
    stamp = _validate_offset(stamp_ms, "re-tiered stamp")
    return (
        f"{broker_prefix(queue.cluster, queue.broker)}/{_RETIERED_DIR}/{queue.topic}/"
        f"{queue.queue_id}/{start}-{stamp:013d}{MANIFEST_SUFFIX}"
    )


def config_prefix(cluster: str, broker: str) -> str:
    """Return ``<cluster_dir>/<broker>/_config``, where the config copies live."""
    return f"{broker_prefix(cluster, broker)}/{_CONFIG_DIR}"


def _validate_config_file(name: str) -> str:
    if name not in CONFIG_FILES:
        raise InvalidNameError(
            f"{name!r} is not a config file tieredstore copies ({', '.join(CONFIG_FILES)})"
        )
    return name


@dataclass(frozen=True, slots=True, order=True)
class ConfigCopyKey:
    """One stored version of a broker config file; ordered oldest first.

    ``digest`` is the first 16 hex digits of the SHA-256 of the copied bytes.
    """

    cluster: str
    broker: str
    file: str
    stamp_ms: int
    digest: str

    def __post_init__(self) -> None:
        broker_prefix(self.cluster, self.broker)
        _validate_config_file(self.file)
        _validate_offset(self.stamp_ms, "config copy stamp")
        if len(self.digest) != _DIGEST_PREFIX_LEN or not set(self.digest) <= _HEX:
            raise InvalidNameError(
                f"config copy digest {self.digest!r} is not {_DIGEST_PREFIX_LEN} lowercase hex"
            )

    @property
    def key(self) -> str:
        return config_copy_key(self.cluster, self.broker, self.file, self.stamp_ms, self.digest)


def config_copy_key(cluster: str, broker: str, file: str, stamp_ms: int, digest: str) -> str:
    """Return ``<config_prefix>/<file>/<stamp_ms:013d>-<digest>``.

    ``digest`` may be a whole SHA-256 hex digest; its first 16 digits name the copy.
    """
    _validate_config_file(file)
    stamp = _validate_offset(stamp_ms, "config copy stamp")
    short = digest[:_DIGEST_PREFIX_LEN]
    if len(short) != _DIGEST_PREFIX_LEN or not set(short) <= _HEX:
        raise InvalidNameError(f"config copy digest {digest!r} is not lowercase hex")
    return f"{config_prefix(cluster, broker)}/{file}/{stamp:013d}-{short}"


def parse_config_copy_key(key: str) -> ConfigCopyKey:
    """Parse a key :func:`config_copy_key` made; InvalidNameError for any other key."""
    parts = key.split("/")
    if len(parts) != 5 or parts[2] != _CONFIG_DIR:
        raise InvalidNameError("not a config copy key", where=key)
    cdir, broker, _, file, name = parts
    stamp, sep, digest = name.partition("-")
    if not sep or len(stamp) < 13 or not (stamp.isascii() and stamp.isdigit()):
        raise InvalidNameError(f"config copy name {name!r} is not <stamp>-<digest>", where=key)
    try:
        parsed = ConfigCopyKey(_parse_cluster_dir(cdir, key), broker, file, int(stamp), digest)
    except InvalidNameError as exc:
        raise InvalidNameError(exc.message, where=key) from exc
    if parsed.key != key:
        raise InvalidNameError("config copy key is not in canonical form", where=key)
    return parsed


def quarantine_loss_key(loss: LossKey, *, stamp_ms: int) -> str:
    """Return where ``repair`` moves a loss record it cuts away: like
    :func:`quarantine_key`, ``<quarantine_prefix>/<stamp_ms:013d>/LOSS/<name>``."""
    stamp = _validate_offset(stamp_ms, "quarantine stamp")
    name = loss.key.rsplit("/", 1)[1]
    return f"{quarantine_prefix(loss.queue)}/{stamp:013d}/{_LOSS_DIR}/{name}"


# -- provenance records: what must be in cold (tieredstore.cold.provenance) --------------------


def replica_prefix(cluster: str, broker: str) -> str:
    """Return ``<cluster_dir>/<broker>/_replicas``, where a group's replicas report."""
    return f"{broker_prefix(cluster, broker)}/{_REPLICAS_DIR}"


def replica_key(cluster: str, broker: str, replica: str) -> str:
    """Return ``<replica_prefix>/<replica>.json``: one replica's progress report."""
    name = validate_name(replica, what="replica")
    return f"{replica_prefix(cluster, broker)}/{name}{MANIFEST_SUFFIX}"


def fingerprint_prefix(cluster: str, broker: str) -> str:
    """Return ``<cluster_dir>/<broker>/_fingerprints``, where hot fingerprints live."""
    return f"{broker_prefix(cluster, broker)}/{_FINGERPRINT_DIR}"


@dataclass(frozen=True, slots=True, order=True)
class FingerprintName:
    """A fingerprint object's name, ordered newest last: by its per-broker ``sequence``
    (what a host clock cannot forge), a format-2 name without one (``sequence`` -1)
    below every sequenced one, ties by ``stamp_ms`` (the host clock when it was taken)."""

    sequence: int
    stamp_ms: int

    @property
    def name(self) -> str:
        """The object name: ``s<sequence:010d>-<stamp_ms:013d>.json`` (``<stamp_ms>.json``
        for a name without a sequence)."""
        if self.sequence < 0:
            return f"{self.stamp_ms:013d}{MANIFEST_SUFFIX}"
        return f"s{self.sequence:010d}-{self.stamp_ms:013d}{MANIFEST_SUFFIX}"


def fingerprint_key(cluster: str, broker: str, *, stamp_ms: int, sequence: int) -> str:
    """Return ``<fingerprint_prefix>/s<sequence:010d>-<stamp_ms:013d>.json``: one hot
    fingerprint, the broker's ``sequence``-th (``tieredstore fingerprint`` creates it at
    one past the highest listed, create-if-absent), taken at ``stamp_ms``."""
    stamp = _validate_offset(stamp_ms, "fingerprint stamp")
    seq = _validate_offset(sequence, "fingerprint sequence")
    return f"{fingerprint_prefix(cluster, broker)}/{FingerprintName(seq, stamp).name}"


def parse_fingerprint_name(name: str) -> FingerprintName | None:
    """A fingerprint object's name (``s0000000003-1700000000000.json``, or a format-2
    ``1700000000000.json``: sequence -1), None if the name is not one."""
    digits = name.removesuffix(MANIFEST_SUFFIX)
    if digits == name or not digits.isascii():
        return None
    seq, dash, stamp = digits.removeprefix("s").partition("-")
    if digits.startswith("s") and dash and len(seq) == 10 and seq.isdigit():
        return FingerprintName(int(seq), int(stamp)) if _stamp(stamp) else None
    return FingerprintName(-1, int(digits)) if _stamp(digits) else None


def _stamp(digits: str) -> bool:
    return digits.isdigit() and len(digits) >= 13


def parse_fingerprint_stamp(name: str) -> int | None:
    """The stamp of a fingerprint object's name (either form), None if the name is not
    one."""
    parsed = parse_fingerprint_name(name)
    return None if parsed is None else parsed.stamp_ms


def tiering_key(cluster: str, broker: str) -> str:
    """Return ``<cluster_dir>/<broker>/_tiering.json``: the broker's tiering record (which
    topics the sidecar tiers, and since when)."""
    return f"{broker_prefix(cluster, broker)}/{_TIERING_NAME}"


def queue_records_prefix(cluster: str, broker: str) -> str:
    """Return ``<cluster_dir>/<broker>/_queues``: where the records of every queue of the
    broker live (list it with a trailing ``/``; :func:`parse_queue_record_key` reads what
    is listed)."""
    return f"{broker_prefix(cluster, broker)}/{_QUEUES_DIR}"


def queue_record_prefix(queue: QueuePath) -> str:
    """Return ``<cluster_dir>/<broker>/_queues/<topic>/<queueId>``: the queue's records.

    Beside the topic directories (not inside the queue root), so that deleting a queue's
    data leaves the record of what it had to hold.
    """
    return f"{queue_records_prefix(queue.cluster, queue.broker)}/{queue.topic}/{queue.queue_id}"


def init_key(queue: QueuePath) -> str:
    """Return ``<queue_record_prefix>/INIT.json``: the queue's init record."""
    return f"{queue_record_prefix(queue)}/{_INIT_NAME}"


def retention_key(queue: QueuePath, first_offset: int) -> str:
    """Return ``<queue_record_prefix>/RETENTION/<name(first)>.json``: the record that
    retention removed the queue's head up to (not including) ``first_offset``."""
    name = object_name(_validate_offset(first_offset, "retention first offset"))
    return f"{queue_record_prefix(queue)}/{_RETENTION_DIR}/{name}{MANIFEST_SUFFIX}"


def stop_key(queue: QueuePath, excluded_since_ms: int) -> str:
    """Return ``<queue_record_prefix>/STOPPED/<name(since)>.json``: the record of where the
    queue's tiering stopped when the topic rules in force from ``excluded_since_ms`` (the
    tiering record's epoch) excluded its topic. Keyed by that time, so a topic excluded,
    included and excluded again gets one record per exclusion."""
    name = object_name(_validate_offset(excluded_since_ms, "tiering stop time"))
    return f"{queue_record_prefix(queue)}/{_STOPPED_DIR}/{name}{MANIFEST_SUFFIX}"


def inits_key(cluster: str, broker: str, stamp_ms: int, digest: str) -> str:
    """Return ``<queue_records_prefix>/_inits/<stamp_ms:013d>-<digest>.json``: one object
    holding the init records of many queues (:class:`~tieredstore.cold.provenance.InitRecords`).
    ``digest`` (16 lowercase hex digits) is taken of the object's content, so the same
    records always get the same key and different ones never share it.

    Raises:
        InvalidNameError: ``stamp_ms`` negative or ``digest`` not 16 lowercase hex digits.
    """
    name = f"{_validate_offset(stamp_ms, 'init records stamp'):013d}-{digest}.json"
    if _INITS_NAME.fullmatch(name) is None:
        raise InvalidNameError(f"init records digest {digest!r} is not 16 hex digits")
    return f"{queue_records_prefix(cluster, broker)}/{_INITS_DIR}/{name}"


def parse_inits_key(key: str, prefix: str) -> tuple[int, str] | None:
    """``(stamp_ms, digest)`` of an init-records key listed under the broker ``prefix``
    (ending with ``/``); None when ``key`` is not under ``_queues/_inits/``.

    Raises:
        InvalidNameError: under ``_queues/_inits/`` but not a name :func:`inits_key` makes.
    """
    rest = key[len(prefix) :]
    head = f"{_QUEUES_DIR}/{_INITS_DIR}/"
    if not key.startswith(prefix) or not rest.startswith(head):
        return None
    match = _INITS_NAME.fullmatch(rest[len(head) :])
    if match is None:
        raise InvalidNameError("not an init records key", where=key)
    return int(match.group(1)), match.group(2)


class QueueRecordKind(enum.Enum):
    """The kinds of per-queue provenance record."""

    INIT = "INIT"
    RETENTION = "RETENTION"
    STOPPED = "STOPPED"


@dataclass(frozen=True, slots=True)
class QueueRecordKey:
    """A parsed per-queue record key (``offset`` is a retention record's first offset, a
    stop record's exclusion time, 0 for an init record); ``.key`` and
    :func:`parse_queue_record_key` invert."""

    queue: QueuePath
    kind: QueueRecordKind
    offset: int = 0

    @property
    def key(self) -> str:
        if self.kind is QueueRecordKind.INIT:
            return init_key(self.queue)
        if self.kind is QueueRecordKind.STOPPED:
            return stop_key(self.queue, self.offset)
        return retention_key(self.queue, self.offset)


def parse_queue_record_key(key: str, prefix: str) -> QueueRecordKey | None:
    """Parse a key listed under the broker prefix ``prefix`` (ending with ``/``) as a
    per-queue record; None when it is not under ``_queues/`` at all, or is an object of
    many queues' init records there (:func:`parse_inits_key` reads that).

    Raises:
        InvalidNameError: under ``_queues/`` but not a key :func:`init_key`,
            :func:`retention_key` or :func:`stop_key` makes.
    """
    rest = key[len(prefix) :]
    if not rest.startswith(_QUEUES_DIR + "/") or rest.startswith(f"{_QUEUES_DIR}/{_INITS_DIR}/"):
        return None
    parts = rest.split("/")
    head = prefix.rstrip("/").split("/")
    if len(head) != 2 or len(parts) not in (4, 5):
        raise InvalidNameError("not a queue record key", where=key)
    queue = _parse_queue_parts([*head, parts[1], parts[2]], key)
    if len(parts) == 4 and parts[3] == _INIT_NAME:
        return QueueRecordKey(queue, QueueRecordKind.INIT)
    if len(parts) == 5 and parts[3] in (_RETENTION_DIR, _STOPPED_DIR):
        offset = _parse_name(parts[4], SegmentKind.MANIFEST, key)[0]
        return QueueRecordKey(queue, QueueRecordKind(parts[3]), offset)
    raise InvalidNameError("not a queue record key", where=key)


# -- batch objects: many small queues' data in one object (tieredstore.cold.batch) -------------


def batch_prefix(cluster: str, broker: str) -> str:
    """Return ``<cluster_dir>/<broker>/_batches``, where the broker's batch objects live."""
    return f"{broker_prefix(cluster, broker)}/{_BATCH_DIR}"


def batch_key(cluster: str, broker: str, sequence: int) -> str:
    """Return ``<batch_prefix>/<name(sequence)>.batch``: the batch object ``sequence``.

    The name is :func:`object_name` (an md5 prefix, then 20 digits), so keys do not sort
    by sequence: order a listing by what :func:`parse_batch_key` returns.
    """
    name = object_name(_validate_offset(sequence, "batch sequence"))
    return f"{batch_prefix(cluster, broker)}/{name}{BATCH_SUFFIX}"


def parse_batch_key(key: str, prefix: str) -> int | None:
    """The sequence of the batch key ``key`` listed under ``prefix`` (a
    :func:`batch_prefix` plus ``/``), or None for anything else.

    Exactly the keys :func:`batch_key` makes for that prefix parse (so
    ``batch_key(c, b, parse_batch_key(k, p)) == k``); another directory, a nested key, a
    missing or other suffix, a malformed name or a wrong hash prefix give None. Never
    raises.
    """
    if not prefix.endswith(f"/{_BATCH_DIR}/") or not key.startswith(prefix):
        return None
    name = key[len(prefix) :]
    if "/" in name or not name.endswith(BATCH_SUFFIX):
        return None
    try:
        sequence, attempt = _parse_name(
            name.removesuffix(BATCH_SUFFIX), SegmentKind.COMMIT_LOG, key
        )
    except InvalidNameError:
        return None
    return None if attempt else sequence
