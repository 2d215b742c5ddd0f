"""Cold-store naming: the one pure, reversible map between queues/segments and object keys.

Layout (compatible with RocketMQ's own tiered store, ROCKETMQ_FORMAT.md §4)::

    <md5(cluster)[:8]>_<cluster>/                      cluster_dir(cluster)
      <broker>/                                         broker_prefix(cluster, broker)
        _lease.json                                     lease_key(cluster, broker)
        _quarantine/<topic>/<queueId>/<stamp>/<KIND>/<name>   quarantine_key(...)
        <topic>/<queueId>/                              queue_root(...)
          COMMIT_LOG/<name(cl_base)>                    cold commitlog object
          CONSUME_QUEUE/<name(start * 20)>              cold consume-queue object
          MANIFEST/<name(start)>.json                   commit point of the pair

    name(base) = md5(str(base))[:8] + f"{base:020d}"

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

Directory helpers (``cluster_dir``, ``broker_prefix``, ``queue_root``, ``kind_prefix``,
``quarantine_prefix``) return no trailing ``/``; append one to list a directory, so that
listing broker ``b`` does not also match broker ``b2``.

**Names are refused, never mangled.** A cluster, broker or topic name must be usable as
one path component and one object-key segment as it is: not empty, not ``.``, no ``..``,
no ``/``, ``\\``, NUL or other control character, valid UTF-8, at most 255 bytes (246 for
a cluster, which gains the 9-byte hash prefix). ``%`` and ``|`` are legal (``%RETRY%g``,
``%DLQ%g``) and pass through unchanged.

**Reserved names.** Our own per-broker files (``_lease.json``, ``_quarantine/``) sit at
the same level as topic directories. So that no topic can ever collide with them — now or
with a reserved name added later — a *topic* may not begin with ``_``: every entry
beginning with ``_`` under a broker prefix belongs to tieredstore. RocketMQ accepts such
topic names, but none of its own topics uses one; a broker that has one gets a clear
:class:`~tieredstore.errors.InvalidNameError` for that topic instead of silent renaming.
Clusters and brokers may begin with ``_`` (nothing of ours sits beside them).
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import Final

from tieredstore.errors import InvalidNameError

__all__ = [
    "MANIFEST_SUFFIX",
    "MAX_COMPONENT_BYTES",
    "MAX_OFFSET",
    "MAX_QUEUE_ID",
    "ObjectKey",
    "QueuePath",
    "SegmentKind",
    "broker_prefix",
    "cluster_dir",
    "kind_prefix",
    "lease_key",
    "object_key",
    "object_name",
    "parse_object_key",
    "quarantine_key",
    "quarantine_prefix",
    "queue_root",
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

_HASH_LEN: Final = 8
_DIGITS: Final = 20
_NAME_LEN: Final = _HASH_LEN + _DIGITS
_RESERVED_PREFIX: Final = "_"
_LEASE_NAME: Final = "_lease.json"
_QUARANTINE_DIR: Final = "_quarantine"
_HEX: Final = frozenset("0123456789abcdef")


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


def object_name(base_offset: int) -> str:
    """Return ``md5(str(base))[:8] + f"{base:020d}"`` (without a manifest's ``.json``)."""
    base = _validate_offset(base_offset)
    return f"{_md5_prefix(str(base))}{base:0{_DIGITS}d}"


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

    @property
    def root(self) -> str:
        """``<cluster_dir>/<broker>/<topic>/<queueId>`` (no trailing slash)."""
        return f"{cluster_dir(self.cluster)}/{self.broker}/{self.topic}/{self.queue_id}"

    def __str__(self) -> str:
        return f"{self.topic}/{self.queue_id}"


def queue_root(cluster: str, broker: str, topic: str, queue_id: int) -> str:
    """Return ``<cluster_dir>/<broker>/<topic>/<queueId>`` after validating every part."""
    return QueuePath(cluster, broker, topic, queue_id).root


def kind_prefix(queue: QueuePath, kind: SegmentKind) -> str:
    """Return ``<queue root>/<KIND>``, the directory of every object of one kind."""
    return f"{queue.root}/{kind.value}"


def object_key(queue: QueuePath, kind: SegmentKind, base_offset: int) -> str:
    """Return the key of the ``kind`` object with base ``base_offset`` of ``queue``.

    ``base_offset`` is in the kind's own address space (see the module docstring).
    """
    suffix = MANIFEST_SUFFIX if kind is SegmentKind.MANIFEST else ""
    return f"{kind_prefix(queue, kind)}/{object_name(base_offset)}{suffix}"


@dataclass(frozen=True, slots=True, order=True)
class ObjectKey:
    """A parsed object key; ``ObjectKey(...).key`` and :func:`parse_object_key` invert."""

    cluster: str
    broker: str
    topic: str
    queue_id: int
    kind: SegmentKind
    base_offset: int

    def __post_init__(self) -> None:
        QueuePath(self.cluster, self.broker, self.topic, self.queue_id)
        if not isinstance(self.kind, SegmentKind):
            raise InvalidNameError(f"object kind must be a SegmentKind, not {self.kind!r}")
        _validate_offset(self.base_offset)

    @property
    def queue(self) -> QueuePath:
        return QueuePath(self.cluster, self.broker, self.topic, self.queue_id)

    @property
    def key(self) -> str:
        return object_key(self.queue, self.kind, self.base_offset)

    def __str__(self) -> str:
        return self.key


def _parse_name(name: str, kind: SegmentKind, key: str) -> int:
    if kind is SegmentKind.MANIFEST:
        if not name.endswith(MANIFEST_SUFFIX):
            raise InvalidNameError(f"manifest name {name!r} lacks {MANIFEST_SUFFIX!r}", where=key)
        name = name[: -len(MANIFEST_SUFFIX)]
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
    return base


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


def parse_object_key(key: str) -> ObjectKey:
    """Parse ``<cluster_dir>/<broker>/<topic>/<queueId>/<KIND>/<name>`` into its parts.

    Exactly the keys :func:`object_key` produces parse; for those,
    ``parse_object_key(k).key == k``. The lease, quarantined objects, temp files and any
    other key are refused.

    Raises:
        InvalidNameError: naming the key and the first part that does not fit.
    """
    parts = key.split("/")
    if len(parts) != 6:
        raise InvalidNameError(
            f"object key has {len(parts)} '/'-separated parts, expected 6", where=key
        )
    cdir, broker, topic, qid, kind_name, name = parts
    try:
        cluster = _parse_cluster_dir(cdir, key)
        validate_name(broker, what="broker")
        validate_topic(topic)
    except InvalidNameError as exc:
        raise InvalidNameError(exc.message, where=key) from exc
    queue_id = _parse_queue_id(qid, key)
    try:
        kind = SegmentKind(kind_name)
    except ValueError as exc:
        raise InvalidNameError(f"unknown object kind {kind_name!r}", where=key) from exc
    base = _parse_name(name, kind, key)
    return ObjectKey(cluster, broker, topic, queue_id, kind, base)


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
