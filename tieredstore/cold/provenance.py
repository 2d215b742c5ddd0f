"""Provenance records: the cold store says itself what it must hold.

The verifier must trust neither the catalogue nor the sidecar's config, so what must be
in cold is written into cold (keys in :mod:`tieredstore.cold.layout`, all under ``_`` names
beside the topics, so that GC, reconcile and the verifier's segment checks never take
them for segment objects, and deleting a queue's data leaves them behind):

* the broker's **tiering record** (``_tiering.json``, :class:`TieringRecord`): the topic
  rules and the init policy (``tiering.init_policy``) the sidecar tiers by, as a history —
  each entry the rules, the policy and since when they applied. Written by the sidecar
  when it takes the lease, compare-and-swap (a new entry only when the rules or the
  policy changed). Format 2 added the policy; an entry of a format-1 record, and the
  first entry of a record created over a prefix something was tiered to before, has
  the policy ``None`` (unknown: a queue may have been initialised under any policy);
* a queue's **init record** (:class:`QueueInit`): its init offset and the policy that
  chose it, created once when the queue is initialised, before its first manifest. The
  init records of the queues one tick initialises are **one object**
  (``_queues/_inits/<stamp>-<digest>.json``, :class:`InitRecords`, format 1; the key
  names a digest of the content, so it is created once and a repeat is a no-op); 0.1.x
  wrote one object per queue (``_queues/<topic>/<queueId>/INIT.json``), still read.
  A queue with more than one init record (a fenced writer's race) has the earliest
  created (:func:`earliest_inits`);
* a **retention record** (``_queues/<topic>/<queueId>/RETENTION/<name(first)>.json``,
  :class:`RetentionMark`) each time retention removes the queue's head: the new first
  offset, created *before* the head's manifest is deleted, so a crash in between never
  leaves a missing head nothing explains;
* a **stop record** (``_queues/<topic>/<queueId>/STOPPED/<name(since)>.json``,
  :class:`StopMark`) when the topic rules stop tiering a topic the queue was tiered
  under: the offset tiering had committed up to when the rules that exclude it took
  effect (``excluded_since_ms``, the tiering record epoch's ``since_ms``), created
  once per exclusion.

Together with the loss records they define each queue's **required range**: from
``max(init offset, highest retention first offset)`` to the hot max, less the lag
allowance — or, for a queue whose topic is excluded now but was tiered before, to where
its stop record says tiering stopped. No other reason may explain a missing offset
(docs/verification.md).

Every record is canonical JSON parsed strictly (:class:`CorruptProvenanceError` naming
the object), written under the writer lease, which the caller holds.

:func:`find_tiered_prefix` is the one check "is anything tiered at this prefix?" that
``verify``, ``restore``, ``export`` and ``read`` make before they start: it refuses a
prefix with no tiering record (and, for the readers, no segment either) with one line
naming the prefix and the brokers that do exist.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final, Protocol

from tieredstore.canonical_json import canonical, parse_object
from tieredstore.cold.layout import (
    MAX_OFFSET,
    QueuePath,
    QueueRecord,
    QueueRecordKind,
    SegmentKind,
    broker_prefix,
    cluster_dir,
    init_key,
    inits_key,
    parse_inits_key,
    parse_object_key,
    parse_queue_record_key,
    retention_key,
    stop_key,
    tiering_key,
)
from tieredstore.errors import (
    ConditionFailedError,
    ConfigError,
    CorruptProvenanceError,
    InvalidNameError,
    ObjectNotFoundError,
)
from tieredstore.topic_rules import TopicDecision, TopicRules

__all__ = [
    "INIT_RECORDS_FORMAT_VERSION",
    "PROVENANCE_FORMAT_VERSION",
    "TIERING_FORMAT_VERSION",
    "InitRecords",
    "NotTieredError",
    "QueueInit",
    "QueueProvenance",
    "RecordSource",
    "RetentionMark",
    "RuleEpoch",
    "StopMark",
    "TieringRecord",
    "create_init_records",
    "earliest_inits",
    "find_tiered_prefix",
    "is_queue_record_key",
    "read_init_records",
    "read_queue_record",
    "read_queue_records",
    "read_tiering_record",
    "tiered_brokers",
]

PROVENANCE_FORMAT_VERSION: Final = 1
#: The format of an object of many queues' init records (:class:`InitRecords`).
INIT_RECORDS_FORMAT_VERSION: Final = 1
#: The tiering record's format: 2 added each entry's ``init_policy`` (1 still reads).
TIERING_FORMAT_VERSION: Final = 2


class _Listed(Protocol):
    @property
    def key(self) -> str: ...


class RecordSource(Protocol):
    """What :func:`find_tiered_prefix` needs of a store: a :class:`Backend` has it, and
    the verifier's driver adapts its sync fsspec filesystem to it."""

    async def read(self, key: str) -> bytes: ...

    async def list(self, prefix: str = "") -> Sequence[_Listed]: ...


class NotTieredError(ConfigError):
    """Nothing was tiered at the prefix asked for (exit 3: wrong input)."""


def _check(ok: bool, problem: str, where: str) -> None:
    if not ok:
        raise CorruptProvenanceError(problem, where=where)


def _parse(
    data: bytes,
    where: str,
    what: str,
    fields: dict[str, type],
    versions: tuple[int, ...] = (PROVENANCE_FORMAT_VERSION,),
) -> dict[str, Any]:
    """Exactly ``fields``, each of its type, in a JSON object of one of ``versions``."""
    doc = parse_object(data, error=CorruptProvenanceError, what=what, where=where)
    values: dict[str, Any] = {name: doc.scalar(name, typ) for name, typ in fields.items()}
    doc.no_extra()
    _check(values["format_version"] in versions,
           f"unsupported format_version {values['format_version']}", where)  # fmt: skip
    return values


# -- the broker's tiering record ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RuleEpoch:
    """Topic rules and init policy, and since when (epoch ms) the writer ``writer_id``
    applied them. ``init_policy`` is the setting's text (``earliest``, ``latest``,
    ``timestamp:<ms>``) or None: not on record (a format-1 entry, or the queues tiered
    before the record existed)."""

    since_ms: int
    rules: TopicRules
    writer_id: str
    lease_epoch: int
    init_policy: str | None = None

    def to_doc(self) -> dict[str, Any]:
        return {
            "since_ms": self.since_ms,
            "rules": self.rules.to_doc(),
            "writer_id": self.writer_id,
            "lease_epoch": self.lease_epoch,
            "init_policy": self.init_policy,
        }


@dataclass(frozen=True, slots=True)
class TieringRecord:
    """The broker's topic rules over time, oldest first (never empty)."""

    cluster: str
    broker: str
    history: tuple[RuleEpoch, ...]

    @property
    def key(self) -> str:
        return tiering_key(self.cluster, self.broker)

    @property
    def current(self) -> RuleEpoch:
        return self.history[-1]

    def decide(self, topic: str) -> TopicDecision:
        """What the current rules say of ``topic``, the rule named with its since-when."""
        d = self.current.rules.decide(topic)
        return TopicDecision(d.tiered, f"{d.rule} (tiering record, since {self.current.since_ms})")

    def tiered_since(self, topic: str) -> int | None:
        """When rules first tiered ``topic`` (epoch ms; None: no entry ever did)."""
        return next((e.since_ms for e in self.history if e.rules.decide(topic).tiered), None)

    def excluded_since(self, topic: str) -> int | None:
        """Since when the current rules' unbroken run of entries excludes ``topic``, if
        an earlier entry tiered it (None: tiered now, or never tiered): the time its
        tiering stopped, which a :class:`StopMark` of each of its queues names."""
        since: int | None = None
        for e in reversed(self.history):
            if e.rules.decide(topic).tiered:
                return since
            since = e.since_ms
        return None

    @property
    def always_earliest(self) -> bool:
        """Whether every queue of the broker was initialised at its hot min: every entry
        of the history, from the first, says ``earliest`` (none unknown). A queue is
        initialised once, under the entry in force when the sidecar first saw it, so a
        single other or unknown entry anywhere in the history takes this back for good:
        the record never claims more than was true."""
        return all(e.init_policy == "earliest" for e in self.history)

    def with_rules(
        self,
        rules: TopicRules,
        *,
        now_ms: int,
        writer_id: str,
        lease_epoch: int,
        init_policy: str | None = None,
    ) -> TieringRecord:
        """This record with ``rules`` and ``init_policy`` current from ``now_ms`` (itself
        when both are unchanged)."""
        if self.current.rules == rules and self.current.init_policy == init_policy:
            return self
        epoch = RuleEpoch(now_ms, rules, writer_id, lease_epoch, init_policy)
        return TieringRecord(self.cluster, self.broker, (*self.history, epoch))

    def to_json(self) -> bytes:
        return canonical(
            {
                "format_version": TIERING_FORMAT_VERSION,
                "cluster": self.cluster,
                "broker": self.broker,
                "history": [e.to_doc() for e in self.history],
            }
        )


_ENTRY_FIELDS: Final = {
    1: {"since_ms", "rules", "writer_id", "lease_epoch"},
    2: {"since_ms", "rules", "writer_id", "lease_epoch", "init_policy"},
}


def _init_policy(value: object, where: str) -> str | None:
    """A history entry's ``init_policy``: null, or a policy the setting accepts."""
    if value is None:
        return None
    ok = isinstance(value, str) and (
        value in ("earliest", "latest") or re.fullmatch(r"timestamp:\d+", value) is not None
    )
    _check(ok, f"history entry init_policy {value!r} is not a policy", where)
    assert isinstance(value, str)
    return value


def _rule_epoch(item: object, where: str, version: int) -> RuleEpoch:
    _check(isinstance(item, dict), "a history entry is not an object", where)
    assert isinstance(item, dict)
    _check(set(item) == _ENTRY_FIELDS[version],
           f"history entry has fields {sorted(item)}", where)  # fmt: skip
    since, writer, epoch, rules = (
        item[k] for k in ("since_ms", "writer_id", "lease_epoch", "rules")
    )
    ok = isinstance(since, int) and isinstance(epoch, int) and isinstance(writer, str)
    _check(ok and not isinstance(since, bool) and since >= 0 and epoch >= 1 and bool(writer),
           "history entry: since_ms, writer_id or lease_epoch out of range", where)  # fmt: skip
    _check(isinstance(rules, dict), "history entry rules are not an object", where)
    try:
        parsed = TopicRules.from_doc(rules)
    except ValueError as exc:
        raise CorruptProvenanceError(f"topic rules: {exc}", where=where) from exc
    policy = _init_policy(item.get("init_policy"), where)
    return RuleEpoch(since, parsed, writer, epoch, policy)


def read_tiering_record(data: bytes, key: str) -> TieringRecord:
    """Parse the tiering record stored at ``key``, format 1 (its entries' init policy
    unknown: None) or 2 (CorruptProvenanceError if invalid, or if it names another
    broker than its key)."""
    fields = {"format_version": int, "cluster": str, "broker": str, "history": list}
    values = _parse(data, key, "tiering record", fields, tuple(_ENTRY_FIELDS))
    version = values["format_version"]
    history = tuple(_rule_epoch(item, key, version) for item in values["history"])
    _check(bool(history), "history is empty", key)
    since = [e.since_ms for e in history]
    _check(since == sorted(since), "history is not in since_ms order", key)
    try:
        record = TieringRecord(values["cluster"], values["broker"], history)
        _check(record.key == key, f"record describes {record.key}", key)
    except InvalidNameError as exc:
        raise CorruptProvenanceError(exc.message, where=key) from exc
    return record


async def publish_tiering_rules(
    backend: Any,
    cluster: str,
    broker: str,
    rules: TopicRules,
    *,
    now_ms: int,
    writer_id: str,
    lease_epoch: int,
    init_policy: str | None = None,
    tiered_before: bool = False,
) -> TieringRecord:
    """Make ``rules`` and ``init_policy`` the broker's current tiering rules and policy
    (from ``now_ms`` when they changed); return the stored record. Create-if-absent, else
    compare-and-swap on the version read (``backend`` is a
    :class:`~tieredstore.backends.base.Backend`); a lost race raises ConditionFailedError
    (the caller holds the lease, so it means another writer). A stored record that does
    not parse is replaced only by a full new history and raises CorruptProvenanceError
    instead: the operator decides.

    ``tiered_before``: queues were initialised at this prefix before (the caller's
    catalogue holds tiered queues) although no record is there — an older sidecar's, or
    a record deleted: a new record then starts with an entry whose policy is unknown, so
    it never says those queues were initialised under ``init_policy``."""
    key = tiering_key(cluster, broker)
    current_epoch = RuleEpoch(now_ms, rules, writer_id, lease_epoch, init_policy)
    unknown = RuleEpoch(now_ms, rules, writer_id, lease_epoch, None)
    entries = (unknown, current_epoch) if tiered_before and init_policy else (current_epoch,)
    fresh = TieringRecord(cluster, broker, entries)
    try:
        current = await backend.read_versioned(key)
    except ObjectNotFoundError:
        await backend.create(key, fresh.to_json())
        return fresh
    stored = read_tiering_record(current.data, key)
    updated = stored.with_rules(rules, now_ms=now_ms, writer_id=writer_id,
                                lease_epoch=lease_epoch, init_policy=init_policy)  # fmt: skip
    if updated is not stored:
        await backend.replace(key, updated.to_json(), version=current.version)
    return updated


# -- per-queue records ----------------------------------------------------------------

_QUEUE_FIELDS: Final[dict[str, type]] = {
    "format_version": int,
    "cluster": str,
    "broker": str,
    "topic": str,
    "queue_id": int,
    "writer_id": str,
    "lease_epoch": int,
}


@dataclass(frozen=True, slots=True)
class _QueueRecord(QueueRecord):
    """What every per-queue provenance record holds: its format, its queue, its writer."""

    writer_id: str
    lease_epoch: int

    def to_json(self) -> bytes:
        return canonical(asdict(self))


@dataclass(frozen=True, slots=True)
class QueueInit(_QueueRecord):
    """Queue ``topic/queue_id`` is tiered from ``init_offset``, chosen by ``policy``
    (``earliest``, ``latest``, ``timestamp:<ms>``, or ``adopted``: written for a queue
    an older sidecar initialised, from its catalogue, while hot still held the offset).
    """

    init_offset: int
    policy: str
    created_at_ms: int

    def __post_init__(self) -> None:
        where = f"init record of {self.topic}/{self.queue_id}"
        _check_queue_fields(self, where)
        _check(0 <= self.init_offset <= MAX_OFFSET, f"init_offset {self.init_offset}", where)
        ok = self.policy in ("earliest", "latest", "adopted") or self.policy.startswith(
            "timestamp:"
        )
        _check(ok, f"unknown policy {self.policy!r}", where)

    @property
    def key(self) -> str:
        return init_key(self.queue)

    @classmethod
    def new(cls, queue: QueuePath, init_offset: int, policy: str, *, created_at_ms: int,
            writer_id: str, lease_epoch: int) -> QueueInit:  # fmt: skip
        return cls(
            PROVENANCE_FORMAT_VERSION, queue.cluster, queue.broker, queue.topic,
            queue.queue_id, writer_id, lease_epoch, init_offset, policy, created_at_ms,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class RetentionMark(_QueueRecord):
    """Retention removed the queue's head below ``first_offset`` (the expired segment's
    end): the segment ``expired_manifest`` with store times up to
    ``max_store_timestamp``, decided at ``deleted_at_ms``."""

    first_offset: int
    expired_manifest: str
    max_store_timestamp: int
    deleted_at_ms: int

    def __post_init__(self) -> None:
        where = f"retention record of {self.topic}/{self.queue_id}"
        _check_queue_fields(self, where)
        _check(0 < self.first_offset <= MAX_OFFSET, f"first_offset {self.first_offset}", where)
        _check(self.deleted_at_ms >= 0, "deleted_at_ms < 0", where)

    @property
    def key(self) -> str:
        return retention_key(self.queue, self.first_offset)


@dataclass(frozen=True, slots=True)
class StopMark(_QueueRecord):
    """Tiering of the queue stopped at ``stop_offset`` (its cold commit then: offsets
    below it were tiered, offsets from it on are not required) because the rules in
    force from ``excluded_since_ms`` exclude its topic; decided at ``stopped_at_ms``."""

    excluded_since_ms: int
    stop_offset: int
    stopped_at_ms: int

    def __post_init__(self) -> None:
        where = f"stop record of {self.topic}/{self.queue_id}"
        _check_queue_fields(self, where)
        _check(0 <= self.stop_offset <= MAX_OFFSET, f"stop_offset {self.stop_offset}", where)
        _check(0 <= self.excluded_since_ms <= self.stopped_at_ms,
               "excluded_since_ms < 0 or after stopped_at_ms", where)  # fmt: skip

    @property
    def key(self) -> str:
        return stop_key(self.queue, self.excluded_since_ms)

    @classmethod
    def new(cls, queue: QueuePath, *, excluded_since_ms: int, stop_offset: int,
            stopped_at_ms: int, writer_id: str, lease_epoch: int) -> StopMark:  # fmt: skip
        return cls(
            PROVENANCE_FORMAT_VERSION, queue.cluster, queue.broker, queue.topic,
            queue.queue_id, writer_id, lease_epoch, excluded_since_ms, stop_offset,
            stopped_at_ms,
        )  # fmt: skip


def _check_queue_fields(rec: _QueueRecord, where: str) -> None:
    _check(rec.format_version == PROVENANCE_FORMAT_VERSION,
           f"unsupported format_version {rec.format_version}", where)  # fmt: skip
    try:
        QueuePath(rec.cluster, rec.broker, rec.topic, rec.queue_id)
    except InvalidNameError as exc:
        raise CorruptProvenanceError(exc.message, where=where) from exc
    _check(bool(rec.writer_id) and rec.lease_epoch >= 1, "writer_id or lease_epoch", where)


_INIT_FIELDS: Final = _QUEUE_FIELDS | {"init_offset": int, "policy": str, "created_at_ms": int}
_RETENTION_FIELDS: Final = _QUEUE_FIELDS | {
    "first_offset": int,
    "expired_manifest": str,
    "max_store_timestamp": int,
    "deleted_at_ms": int,
}
_STOP_FIELDS: Final = _QUEUE_FIELDS | {
    "excluded_since_ms": int,
    "stop_offset": int,
    "stopped_at_ms": int,
}

#: A per-queue provenance record.
QueueProvenance = QueueInit | RetentionMark | StopMark


def read_queue_record(data: bytes, key: str, prefix: str) -> QueueProvenance:
    """Parse the per-queue record at ``key`` (listed under broker ``prefix``, ending in
    ``/``); CorruptProvenanceError if it does not validate or describes another key."""
    try:
        parsed = parse_queue_record_key(key, prefix)
    except InvalidNameError as exc:
        raise CorruptProvenanceError(exc.message, where=key) from exc
    _check(parsed is not None, "not a queue record key", key)
    assert parsed is not None
    rec: QueueProvenance
    try:
        if parsed.kind is QueueRecordKind.INIT:
            rec = QueueInit(**_parse(data, key, "init record", _INIT_FIELDS))
        elif parsed.kind is QueueRecordKind.STOPPED:
            rec = StopMark(**_parse(data, key, "stop record", _STOP_FIELDS))
        else:
            rec = RetentionMark(**_parse(data, key, "retention record", _RETENTION_FIELDS))
    except CorruptProvenanceError as exc:
        raise CorruptProvenanceError(exc.message, where=key) from exc
    _check(rec.key == key, f"record describes {rec.key}", key)
    return rec


# -- the init records of many queues in one object ------------------------------------

_INITS_FIELDS: Final[dict[str, type]] = {
    "format_version": int,
    "cluster": str,
    "broker": str,
    "writer_id": str,
    "lease_epoch": int,
    "created_at_ms": int,
    "inits": list,
}
_INIT_ENTRY_FIELDS: Final = {"topic", "queue_id", "init_offset", "policy"}


@dataclass(frozen=True, slots=True)
class InitRecords:
    """The init records of many queues of one broker in one object (format
    :data:`INIT_RECORDS_FORMAT_VERSION`): what one tick's discovery initialised, written
    with one create instead of one per queue. Every record shares the object's writer,
    lease epoch and creation time; ``inits`` holds each queue once, in
    ``(topic, queue_id)`` order (the constructor checks both). The key is named by a
    digest of the content (:func:`~tieredstore.cold.layout.inits_key`): a repeat after a
    crash creates nothing new, and a reader checks the content against its name."""

    inits: tuple[QueueInit, ...]

    def __post_init__(self) -> None:
        where = "init records"
        _check(bool(self.inits), "no init record", where)
        first = self.inits[0]
        shared = (first.cluster, first.broker, first.writer_id, first.lease_epoch,
                  first.created_at_ms)  # fmt: skip
        for rec in self.inits:
            same = (rec.cluster, rec.broker, rec.writer_id, rec.lease_epoch, rec.created_at_ms)
            _check(same == shared, f"{rec.topic}/{rec.queue_id} has another writer", where)
        queues = [(r.topic, r.queue_id) for r in self.inits]
        _check(queues == sorted(set(queues)), "queues not in order, or repeated", where)

    @classmethod
    def of(cls, inits: Iterable[QueueInit]) -> InitRecords:
        """``inits`` (of one writer and time; any order, each queue once) as one object."""
        return cls(tuple(sorted(inits, key=lambda r: (r.topic, r.queue_id))))

    def to_json(self) -> bytes:
        first = self.inits[0]
        return canonical(
            {
                "format_version": INIT_RECORDS_FORMAT_VERSION,
                "cluster": first.cluster,
                "broker": first.broker,
                "writer_id": first.writer_id,
                "lease_epoch": first.lease_epoch,
                "created_at_ms": first.created_at_ms,
                "inits": [
                    {
                        "topic": r.topic,
                        "queue_id": r.queue_id,
                        "init_offset": r.init_offset,
                        "policy": r.policy,
                    }
                    for r in self.inits
                ],
            }
        )

    @property
    def key(self) -> str:
        first = self.inits[0]
        digest = hashlib.sha256(self.to_json()).hexdigest()[:16]
        return inits_key(first.cluster, first.broker, first.created_at_ms, digest)


def _init_entry(item: object, head: dict[str, Any], where: str) -> QueueInit:
    _check(isinstance(item, dict) and set(item) == _INIT_ENTRY_FIELDS,
           f"an init entry is not an object with fields {sorted(_INIT_ENTRY_FIELDS)}",
           where)  # fmt: skip
    assert isinstance(item, dict)
    topic, queue_id, offset, policy = (
        item[k] for k in ("topic", "queue_id", "init_offset", "policy")
    )
    ok = isinstance(topic, str) and isinstance(policy, str)
    ok = ok and all(isinstance(v, int) and not isinstance(v, bool) for v in (queue_id, offset))
    _check(ok, "an init entry's field has the wrong type", where)
    return QueueInit(PROVENANCE_FORMAT_VERSION, head["cluster"], head["broker"], topic,
                     queue_id, head["writer_id"], head["lease_epoch"], offset, policy,
                     head["created_at_ms"])  # fmt: skip


def read_init_records(data: bytes, key: str) -> InitRecords:
    """Parse the object of init records stored at ``key``: CorruptProvenanceError if it
    does not validate, or if its content is not what its key names (another broker,
    time or digest: a changed or misplaced object)."""
    values = _parse(data, key, "init records", _INITS_FIELDS, (INIT_RECORDS_FORMAT_VERSION,))
    try:
        records = InitRecords(tuple(_init_entry(i, values, key) for i in values["inits"]))
        _check(records.key == key, f"records describe {records.key}", key)
    except CorruptProvenanceError as exc:
        raise CorruptProvenanceError(exc.message, where=key) from exc
    except InvalidNameError as exc:
        raise CorruptProvenanceError(exc.message, where=key) from exc
    return records


def is_queue_record_key(key: str, prefix: str) -> bool:
    """Whether ``key`` (listed under the broker ``prefix``, ending with ``/``) is under
    ``_queues/``: a per-queue record, or an object of many queues' init records.

    Raises:
        InvalidNameError: under ``_queues/`` but not a key either is stored at.
    """
    return (
        parse_inits_key(key, prefix) is not None or parse_queue_record_key(key, prefix) is not None
    )


def read_queue_records(data: bytes, key: str, prefix: str) -> tuple[QueueProvenance, ...]:
    """The records stored at ``key`` (listed under the broker ``prefix``): the init
    records of an :class:`InitRecords` object, else the one per-queue record
    (:func:`read_queue_record`); CorruptProvenanceError as those say."""
    try:
        many = parse_inits_key(key, prefix) is not None
    except InvalidNameError as exc:
        raise CorruptProvenanceError(exc.message, where=key) from exc
    if many:
        return read_init_records(data, key).inits
    return (read_queue_record(data, key, prefix),)


def earliest_inits(inits: Iterable[QueueInit]) -> list[QueueInit]:
    """One init record per queue, the earliest created (then the lowest lease epoch,
    then the lowest offset): a queue has two only when a fenced writer raced the
    lease's holder, and the first to be written is the one that was in force. In
    ``(topic, queue_id)`` order."""
    first: dict[tuple[str, int], QueueInit] = {}
    for rec in inits:
        q = (rec.topic, rec.queue_id)
        rank = (rec.created_at_ms, rec.lease_epoch, rec.init_offset)
        held = first.get(q)
        if held is None or rank < (held.created_at_ms, held.lease_epoch, held.init_offset):
            first[q] = rec
    return [first[q] for q in sorted(first)]


async def create_init_records(backend: Any, records: InitRecords) -> None:
    """Store ``records`` unless already stored (a repeat after a crash: its key names its
    content, so an object there holds the same records). The caller holds the lease."""
    try:
        await backend.create(records.key, records.to_json())
    except ConditionFailedError:
        return


async def create_record(backend: Any, record: QueueProvenance) -> None:
    """Store ``record`` unless one is already at its key (create-if-absent: the first
    stays, so a repeated call after a crash is a no-op). The caller holds the lease."""
    try:
        await backend.create(record.key, record.to_json())
    except ConditionFailedError:
        return


# -- is anything tiered here? ---------------------------------------------------------


async def tiered_brokers(store: RecordSource, cluster: str) -> list[str]:
    """The brokers of ``cluster`` with a tiering record or a manifest (sorted).

    Lists the whole cluster: meant for the error path of :func:`find_tiered_prefix`.
    """
    cdir = cluster_dir(cluster)
    found: set[str] = set()
    for info in await store.list(cdir + "/"):
        parts = info.key.split("/")
        if len(parts) < 3 or parts[1] in found:
            continue
        if parts[2] == tiering_key(cluster, "b").rsplit("/", 1)[1] or _is_manifest(info.key):
            found.add(parts[1])
    return sorted(found)


def _is_manifest(key: str) -> bool:
    if f"/{SegmentKind.MANIFEST.value}/" not in key:
        return False
    try:
        return parse_object_key(key).kind is SegmentKind.MANIFEST
    except InvalidNameError:
        return False


async def find_tiered_prefix(
    store: RecordSource, cluster: str, broker: str, *, where: str, require_record: bool
) -> TieringRecord | None:
    """The broker's tiering record; None when it has none but holds segments and
    ``require_record`` is False (a store an older sidecar wrote: readable, not provable).

    Raises:
        NotTieredError: no tiering record (and, unless required, no manifest either) at
            the broker prefix: one line naming the prefix and the brokers that exist.
        CorruptProvenanceError: a tiering record that does not parse.
    """
    key = tiering_key(cluster, broker)
    try:
        return read_tiering_record(await store.read(key), key)
    except ObjectNotFoundError:
        pass
    prefix = broker_prefix(cluster, broker)
    has_segments = any(_is_manifest(i.key) for i in await store.list(prefix + "/"))
    if has_segments and not require_record:
        return None
    if has_segments:
        raise NotTieredError(
            f"broker {broker!r} of cluster {cluster!r} has segments at {prefix}/ but no "
            "tiering record (written by a sidecar of this version when it takes the lease; "
            "start it once)",
            where=where,
        )
    brokers = await tiered_brokers(store, cluster)
    raise NotTieredError(
        f"nothing tiered for broker {broker!r} of cluster {cluster!r}: looked for {key} "
        f"(brokers tiered in that cluster there: {', '.join(brokers) or 'none'})",
        where=where,
    )
