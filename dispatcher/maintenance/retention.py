"""Retention: the fixed expiry rules, planned purely, executed in order.

The rules are also described, for operators, in docs/retention.md.

The rules, exactly:

1. Only COMMITTED segments expire. There is no empty segment and no timestamp sentinel:
   a segment's age is judged by its manifest's real ``max_store_timestamp``.
2. A segment expires when ``max_store_timestamp < now - retention`` (the topic's override
   or the default). Only a prefix of a queue's segments expires: planning stops at the
   first segment that has not expired, so there is never a hole in the middle.
3. The newest segment of a live queue never expires. A queue is *live* while the broker
   still has it (its consume-queue directory exists, or its topic is still in
   ``config/topics.json``) or while anything is pending for it (hot max > cold commit).
   A queue is destroyed (its row ends DELETED) only when it is not live and every one of
   its segments has expired — or by an explicit operator purge.
4. Deleting one segment: check the lease → mark DELETING in the catalogue (readers stop
   seeing it at once) → delete MANIFEST (the segment is uncommitted in the bucket before
   any data object goes) → delete CONSUME_QUEUE → delete COMMIT_LOG → drop the row.
   :func:`resume` finishes every DELETING segment after a restart; each step is
   idempotent, so a crash between any two steps is recovered by running the rest.
5. Time comes from the injected clock (or ``now_ms``, for ``expire --now``).

Planning is a pure function (:func:`plan_retention`, :func:`plan_purge`) from catalogue
snapshots, the broker's queues and the time to an ordered tuple of frozen decisions,
each with its reason. :class:`Retention` gathers the inputs, runs the plan and executes
it; the sidecar runs :meth:`Retention.run_pass` every ``retention.interval``.

Worked example (retention 72 h; "age" is now minus the segment's max store time):

=================  ===========================  ==================  ========================
queue              segments, oldest first       broker has it       decisions
=================  ===========================  ==================  ========================
``A/0``            80 h, 75 h, 73 h             yes                 expire 80 h, 75 h (73 h
                                                                    is the newest: kept)
``A/1``            80 h, 10 h, 75 h             yes                 expire 80 h only (prefix)
``B/0`` (gone)     80 h, 75 h                   no                  expire both, destroy
``B/1`` (gone)     80 h, 10 h                   no                  expire 80 h (kept: 10 h)
``C/0``            none (new, nothing tiered)   yes                 nothing
=================  ===========================  ==================  ========================
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from tieredstore.backends.base import Backend
from tieredstore.clock import Clock
from tieredstore.cold.history import BatchLinks, Committed, Withdrawal, choose
from tieredstore.cold.layout import QueuePath
from tieredstore.cold.manifest import FenceMarker, Manifest, read_stored
from tieredstore.dispatcher.lease.guard import hold_lease
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.dispatcher.tiering.provenance_writer import record_head_removal
from tieredstore.errors import (
    CatalogueError,
    ConfigError,
    CorruptManifestError,
    ObjectNotFoundError,
    StoreError,
    StoreNotFoundError,
)
from tieredstore.hot.store import HotRange, HotStore, QueueKey
from tieredstore.humanize import iso_time
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.reconcile import reconcile
from tieredstore.metadata.rows import QueueRow, QueueState, SegmentRow, SegmentStatus
from tieredstore.settings.declaration import RetentionSettings
from tieredstore.settings.in_force import SettingsInForce

__all__ = [
    "Decision",
    "DeletionStep",
    "DestroyQueue",
    "DestroyReason",
    "ExpireSegment",
    "ExpiryReason",
    "HotView",
    "PassReport",
    "QueueSnapshot",
    "Retention",
    "RetentionPolicy",
    "StepHook",
    "delete_segment",
    "destroy_queue",
    "execute",
    "format_age",
    "plan_purge",
    "plan_retention",
    "read_hot_view",
    "resume",
    "snapshot_catalogue",
]

log = logging.getLogger(__name__)


# -- inputs ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long cold data is kept: a default and per-topic overrides, in milliseconds."""

    default_ms: int
    per_topic_ms: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        bad = [t for t, ms in self.per_topic_ms.items() if ms <= 0]
        if self.default_ms <= 0 or bad:
            what = f"topic {bad[0]!r}" if bad else "the default"
            raise ConfigError(f"retention of {what} must be positive")

    def for_topic(self, topic: str) -> int:
        """Retention of ``topic`` in ms: its override, else the default."""
        return self.per_topic_ms.get(topic, self.default_ms)

    @classmethod
    def of(cls, retention: RetentionSettings) -> RetentionPolicy:
        """``retention.default`` and ``retention.topics`` (seconds) as a policy."""
        per_topic: Mapping[str, float] = retention.topics
        return cls(
            default_ms=round(retention.default * 1000),
            per_topic_ms={topic: round(s * 1000) for topic, s in per_topic.items()},
        )


@dataclass(frozen=True, slots=True)
class HotView:
    """What the broker has at one moment: its queues, their ranges, its topic names.

    ``queues`` are the queues whose consume-queue directory exists; ``ranges`` the hot
    ranges of those the caller asked about; ``topics`` the names in
    ``config/topics.json`` (a topic the broker created lazily may be missing there, one
    being deleted may linger there: either signal keeps a queue live).
    """

    queues: frozenset[QueueKey]
    ranges: Mapping[QueueKey, HotRange] = field(default_factory=dict)
    topics: frozenset[str] = frozenset()

    def has_queue(self, topic: str, queue_id: int) -> bool:
        """Whether the broker still has the queue (rule 3)."""
        return QueueKey(topic, queue_id) in self.queues or topic in self.topics

    def has_topic(self, topic: str) -> bool:
        return topic in self.topics or any(k.topic == topic for k in self.queues)

    def pending(self, row: QueueRow) -> int:
        """Hot messages not yet in cold (0 for a queue the broker no longer has)."""
        rng = self.ranges.get(QueueKey(row.topic, row.queue_id))
        return max(rng.max - row.cold_commit, 0) if rng is not None else 0


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """One queue's row and its segments (COMMITTED and DELETING), oldest first, and the
    start offsets of the batch slices that hold its offsets: the catalogue's (not
    compacted yet: compaction rewrites them as segments, and only segments expire) and
    any still in a batch object in cold. A compacted slice stays in its batch until the
    batch collector deletes it, and the one reading rule reads it again once the segment
    over it is gone; so that segment waits for the collector."""

    row: QueueRow
    segments: tuple[SegmentRow, ...]
    slice_starts: tuple[int, ...] = ()


# -- decisions -------------------------------------------------------------------------
class ExpiryReason(enum.Enum):
    EXPIRED = "older than retention"
    PURGED = "purged by the operator"


class DestroyReason(enum.Enum):
    TOPIC_GONE = "the broker no longer has the queue and every segment of it expired"
    PURGED = "purged by the operator"


@dataclass(frozen=True, slots=True)
class ExpireSegment:
    """Delete one segment. ``now_ms`` is the instant retention was evaluated at."""

    segment: SegmentRow
    reason: ExpiryReason
    retention_ms: int
    now_ms: int

    @property
    def max_store_timestamp(self) -> int:
        return self.segment.manifest.max_store_timestamp

    @property
    def age_ms(self) -> int:
        return self.now_ms - self.max_store_timestamp

    def describe(self) -> str:
        """One line for the operator: segment, queue, max timestamp, age and why."""
        seg = self.segment
        return (
            f"segment [{seg.start_offset}, {seg.end_offset}) of queue {seg.topic}/"
            f"{seg.queue_id}: max store timestamp {self.max_store_timestamp} "
            f"({iso_time(self.max_store_timestamp, timespec='milliseconds')}), "
            f"age {format_age(self.age_ms)}, "
            f"retention {format_age(self.retention_ms)}: {self.reason.value}"
        )


@dataclass(frozen=True, slots=True)
class DestroyQueue:
    """Mark a queue DELETED; planned only after every one of its segments is expired."""

    topic: str
    queue_id: int
    reason: DestroyReason

    def describe(self) -> str:
        return f"queue {self.topic}/{self.queue_id}: {self.reason.value}"


Decision = ExpireSegment | DestroyQueue


def format_age(ms: int) -> str:
    """A duration as ``72h00m05.000s`` (negative ages keep their sign)."""
    sign, ms = ("-", -ms) if ms < 0 else ("", ms)
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"{sign}{hours}h{minutes:02d}m{rest / 1000:06.3f}s"


# -- planning (pure) -------------------------------------------------------------------
def plan_retention(
    queues: Iterable[QueueSnapshot],
    hot: HotView,
    *,
    now_ms: int,
    policy: RetentionPolicy,
) -> tuple[Decision, ...]:
    """Apply rules 1–3 to every queue; return the decisions in execution order.

    Queues come out ordered by (topic, queue id); within a queue, expiries oldest first
    and a DestroyQueue last. DELETED queues are skipped. DELETING segments are left to
    :func:`resume` (run it first): a queue that still has one is not destroyed yet.
    """
    out: list[Decision] = []
    for snap in sorted(queues, key=lambda s: (s.row.topic, s.row.queue_id)):
        out.extend(_plan_queue(snap, hot, now_ms, policy))
    return tuple(out)


def _plan_queue(
    snap: QueueSnapshot, hot: HotView, now_ms: int, policy: RetentionPolicy
) -> list[Decision]:
    row = snap.row
    if row.state is QueueState.DELETED:
        return []
    retention = policy.for_topic(row.topic)
    cutoff = now_ms - retention
    committed = [s for s in snap.segments if s.status is SegmentStatus.COMMITTED]
    live = hot.has_queue(row.topic, row.queue_id) or hot.pending(row) > 0
    candidates = committed[:-1] if live else committed  # rule 3: keep a live queue's newest
    if snap.slice_starts:  # only a prefix expires: none past a slice not compacted yet
        first_slice = min(snap.slice_starts)
        candidates = [s for s in candidates if s.end_offset <= first_slice]
    expired = list(
        itertools.takewhile(lambda s: s.manifest.max_store_timestamp < cutoff, candidates)
    )  # rule 2: a prefix, stopping at the first segment that has not expired
    out: list[Decision] = [
        ExpireSegment(s, ExpiryReason.EXPIRED, retention, now_ms) for s in expired
    ]
    in_flight = len(committed) != len(snap.segments) or bool(snap.slice_starts)
    if not live and not in_flight and len(expired) == len(committed):
        out.append(DestroyQueue(row.topic, row.queue_id, DestroyReason.TOPIC_GONE))
    return out


def plan_purge(
    queues: Iterable[QueueSnapshot],
    hot: HotView,
    *,
    topic: str,
    now_ms: int,
    policy: RetentionPolicy,
) -> tuple[Decision, ...]:
    """Every segment of every queue of ``topic``, then the queues themselves.

    Refused (ConfigError) while the broker still has the topic — rule 3 never lets a
    live queue be destroyed, not even by the operator — or when the catalogue has no
    queue of it that is not DELETED already.
    """
    if hot.has_topic(topic):
        raise ConfigError(
            f"topic {topic!r} still exists in the broker; delete it there before purging "
            "its cold data"
        )
    snaps = sorted(
        (s for s in queues if s.row.topic == topic and s.row.state is not QueueState.DELETED),
        key=lambda s: s.row.queue_id,
    )
    if not snaps:
        raise ConfigError(f"the catalogue has no queue of topic {topic!r} to purge")
    sliced = [s.row for s in snaps if s.slice_starts]
    if sliced:
        raise ConfigError(
            f"queue {sliced[0]} still has offsets in batch objects; compaction rewrites "
            "them as segments (tiering.compact_after) and the batch collector then deletes "
            "the batches: purge again after that"
        )
    retention = policy.for_topic(topic)
    out: list[Decision] = []
    for snap in snaps:
        out.extend(
            ExpireSegment(s, ExpiryReason.PURGED, retention, now_ms)
            for s in snap.segments
            if s.status is SegmentStatus.COMMITTED
        )
        out.append(DestroyQueue(topic, snap.row.queue_id, DestroyReason.PURGED))
    return tuple(out)


# -- gathering the inputs --------------------------------------------------------------
def snapshot_catalogue(catalogue: Catalogue) -> tuple[QueueSnapshot, ...]:
    """Every queue and its segments (blocking: call it through ``asyncio.to_thread``)."""
    return tuple(
        QueueSnapshot(
            row,
            tuple(catalogue.segments.of(row.topic, row.queue_id)),
            tuple(link.start_offset for link in catalogue.slices.of(row.topic, row.queue_id)),
        )
        for row in catalogue.queues.all()
    )


def _with_batch_slices(
    snap: QueueSnapshot, links: Sequence[Committed | Withdrawal]
) -> QueueSnapshot:
    """``snap`` with the starts of its slices still in batch objects (none withdrawn)."""
    history = choose([], links)
    starts = {c.start_offset for c in (*history.links, *history.overlaps)}
    if not starts - set(snap.slice_starts):
        return snap
    return replace(snap, slice_starts=tuple(sorted(starts | set(snap.slice_starts))))


def read_hot_view(hot: HotStore, wanted: Iterable[QueueKey]) -> HotView:
    """The broker's queues and topics now (blocking; call it through a thread).

    Ranges are read for the ``wanted`` queues the broker has. A missing consume-queue
    directory raises StoreNotFoundError: a vanished store must not look like a broker
    that deleted every topic. An unreadable ``topics.json`` counts every wanted topic as
    present (the safe side: nothing is destroyed on a guess).
    """
    if not hot.consumequeue_dir.is_dir():
        raise StoreNotFoundError(
            "the broker store has no consumequeue directory; retention will not judge "
            "which queues are gone",
            where=str(hot.consumequeue_dir),
        )
    wanted = set(wanted)
    present = set(hot.queues())
    ranges = {k: hot.queue_range(k.topic, k.queue_id) for k in sorted(present & wanted)}
    try:
        topics = frozenset(hot.topics())
    except StoreError as exc:
        log.warning("cannot read the broker's topics, treating every topic as present: %s", exc)
        topics = frozenset(k.topic for k in wanted)
    return HotView(frozenset(present), ranges, topics)


# -- execution -------------------------------------------------------------------------
class DeletionStep(enum.Enum):
    """The steps of deleting one segment (rule 4), in order."""

    MARKED = "marked DELETING"
    MANIFEST = "manifest deleted"
    CONSUME_QUEUE = "consume-queue object deleted"
    COMMIT_LOG = "commit-log object deleted"
    DROPPED = "row dropped"


#: Called after each step completes (progress, logging; tests inject crashes here).
StepHook = Callable[[SegmentRow, DeletionStep], None]


def _no_hook(_seg: SegmentRow, _step: DeletionStep) -> None:
    return None


async def delete_segment(
    segment: SegmentRow,
    *,
    catalogue: Catalogue,
    backend: Backend,
    lease: Lease,
    on_step: StepHook = _no_hook,
) -> QueueRow:
    """Delete one segment in the fixed order (rule 4); return the queue's new row.

    The catalogue refuses to mark anything but the queue's oldest COMMITTED segment
    (CatalogueError), so even a wrong plan cannot punch a hole. Raises LeaseLostError
    before touching anything if the lease is gone; backend errors propagate after the
    mark, and :func:`resume` finishes the job.
    """
    await hold_lease(lease)
    if await _foreign(backend, segment.manifest):
        report = await reconcile(catalogue, backend)
        raise CatalogueError(
            f"segment {segment} is not what its manifest key holds now (another writer's "
            f"segment, or something unreadable): nothing deleted; the catalogue was "
            f"reconciled with the cold store ({report}); run the expiry again",
            where=segment.manifest.key,
        )
    marked = await asyncio.to_thread(
        catalogue.segments.mark_deleting, segment.topic, segment.queue_id, segment.start_offset
    )
    on_step(marked, DeletionStep.MARKED)
    return await _finish(marked, catalogue=catalogue, backend=backend, lease=lease, on_step=on_step)


async def _finish(
    segment: SegmentRow,
    *,
    catalogue: Catalogue,
    backend: Backend,
    lease: Lease,
    on_step: StepHook,
) -> QueueRow:
    """Steps 2–5 for a DELETING segment; each is idempotent (a missing object is fine).

    The lease is checked (locally, against its deadline) before every deletion. Right
    before the first, the manifest key is read: if it holds another writer's manifest
    (or something unreadable), the segment this row meant is no longer in cold and
    nothing is deleted; the row is dropped (whatever its objects were, GC decides).
    Otherwise the retention record (the queue's new first offset) is created before
    anything is deleted, so no crash leaves a missing head unexplained.
    """
    m = segment.manifest
    holds = await _key_holds(backend, m)
    if holds is _KeyHolds.FOREIGN:
        log.warning(
            "not deleting segment %s: its manifest key holds another writer's manifest "
            "now; the catalogue's row is dropped, the cold store left as it is",
            segment,
        )
        return await asyncio.to_thread(
            catalogue.segments.drop, segment.topic, segment.queue_id, segment.start_offset
        )
    await record_head_removal(backend, lease, segment)
    for step, key in (
        (DeletionStep.MANIFEST, m.key),
        (DeletionStep.CONSUME_QUEUE, m.consume_queue_key),
        (DeletionStep.COMMIT_LOG, m.commit_log_key),
    ):
        # A fence marker GC put there after an interrupted deletion stays: deleting it
        # would let a stale writer create a manifest at this start again.
        if not (step is DeletionStep.MANIFEST and holds is _KeyHolds.FENCED):
            lease.check()
            await backend.delete(key)
        on_step(segment, step)
    row = await asyncio.to_thread(
        catalogue.segments.drop, segment.topic, segment.queue_id, segment.start_offset
    )
    on_step(segment, DeletionStep.DROPPED)
    return row


class _KeyHolds(enum.Enum):
    """What a segment's manifest key holds right before retention acts on it."""

    OURS = "ours"  # the manifest the catalogue decided about
    GONE = "gone"  # nothing: an interrupted deletion already removed it
    FENCED = "fenced"  # a GC fence marker, put there after an interrupted deletion
    FOREIGN = "foreign"  # another writer's manifest, or bytes that do not parse


async def _key_holds(backend: Backend, manifest: Manifest) -> _KeyHolds:
    """What ``manifest``'s key holds now (see :class:`_KeyHolds`)."""
    try:
        stored = read_stored(await backend.read(manifest.key), manifest.key)
    except ObjectNotFoundError:
        return _KeyHolds.GONE
    except CorruptManifestError:
        return _KeyHolds.FOREIGN
    if isinstance(stored, FenceMarker):
        return _KeyHolds.FENCED
    return _KeyHolds.OURS if stored == manifest else _KeyHolds.FOREIGN


async def _foreign(backend: Backend, manifest: Manifest) -> bool:
    """Whether ``manifest``'s key holds another writer's manifest or unreadable bytes."""
    return await _key_holds(backend, manifest) is _KeyHolds.FOREIGN


async def destroy_queue(decision: DestroyQueue, *, catalogue: Catalogue, lease: Lease) -> QueueRow:
    """Mark a queue DELETED. Refuses (CatalogueError) while it still has any segment."""
    await hold_lease(lease)
    left = await asyncio.to_thread(catalogue.segments.of, decision.topic, decision.queue_id)
    if left:
        raise CatalogueError(
            f"queue still has {len(left)} segments (first {left[0]}); it is not destroyed",
            where=f"{catalogue.path} queue {decision.topic}/{decision.queue_id}",
        )
    return await asyncio.to_thread(
        catalogue.queues.set_state, decision.topic, decision.queue_id, QueueState.DELETED
    )


async def execute(
    decisions: Sequence[Decision],
    *,
    catalogue: Catalogue,
    backend: Backend,
    lease: Lease,
    metrics: Metrics | None = None,
    on_step: StepHook = _no_hook,
) -> None:
    """Carry out ``decisions`` in order; the first error stops the rest (they are
    planned again next pass, and a half-deleted segment is finished by :func:`resume`)."""
    for decision in decisions:
        if isinstance(decision, ExpireSegment):
            await delete_segment(
                decision.segment,
                catalogue=catalogue,
                backend=backend,
                lease=lease,
                on_step=on_step,
            )
            log.info("expired %s", decision.describe())
            if metrics is not None:
                metrics.expired_segments.inc()
        else:
            await destroy_queue(decision, catalogue=catalogue, lease=lease)
            log.warning("destroyed %s", decision.describe())
            if metrics is not None:
                metrics.set_queue_state(decision.topic, decision.queue_id, QueueState.DELETED)


async def resume(
    *,
    catalogue: Catalogue,
    backend: Backend,
    lease: Lease,
    on_step: StepHook = _no_hook,
) -> tuple[SegmentRow, ...]:
    """Finish every segment left DELETING (by a crash or a failed pass); return them.

    DELETING segments form a prefix of their queue, so they are finished oldest first.
    """
    finished: list[SegmentRow] = []
    for snap in await asyncio.to_thread(snapshot_catalogue, catalogue):
        for seg in snap.segments:
            if seg.status is not SegmentStatus.DELETING:
                break
            await hold_lease(lease)
            await _finish(seg, catalogue=catalogue, backend=backend, lease=lease, on_step=on_step)
            log.info("finished the interrupted deletion of segment %s", seg)
            finished.append(seg)
    return tuple(finished)


# -- the service -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PassReport:
    """What one retention pass did: deletions it resumed, then what it decided and did."""

    resumed: tuple[SegmentRow, ...]
    decisions: tuple[Decision, ...]

    @property
    def expired(self) -> tuple[ExpireSegment, ...]:
        return tuple(d for d in self.decisions if isinstance(d, ExpireSegment))

    @property
    def destroyed(self) -> tuple[DestroyQueue, ...]:
        return tuple(d for d in self.decisions if isinstance(d, DestroyQueue))


class Retention:
    """Retention for one broker: gathers the inputs, plans, executes, resumes.

    The sidecar runs :meth:`run_pass` every ``retention.interval`` (holding the
    dispatcher's catalogue lock) and :meth:`resume` at start; ``tieredstore expire``
    calls them once.
    """

    def __init__(
        self,
        *,
        in_force: SettingsInForce,
        catalogue: Catalogue,
        hot: HotStore,
        backend: Backend,
        lease: Lease,
        clock: Clock,
        metrics: Metrics | None = None,
        on_step: StepHook | None = None,
    ) -> None:
        self.hot = hot
        self.backend = backend
        self.catalogue = catalogue
        self.lease = lease
        self.clock = clock
        self.in_force = in_force
        self.metrics = metrics
        self.on_step: StepHook = on_step or _no_hook
        self._batches = BatchLinks(backend, catalogue.cluster, catalogue.broker)

    @property
    def policy(self) -> RetentionPolicy:
        """``retention.default`` and ``retention.topics`` in force now, as a policy (read
        from ``in_force`` at each plan, so a reload applies from the next pass)."""
        return RetentionPolicy.of(self.in_force.retention)

    def _queue(self, row: QueueRow) -> QueuePath:
        return QueuePath(self.catalogue.cluster, self.catalogue.broker, row.topic, row.queue_id)

    async def _inputs(self) -> tuple[tuple[QueueSnapshot, ...], HotView]:
        snaps = await asyncio.to_thread(snapshot_catalogue, self.catalogue)
        in_batches = await self._batches.by_queue()
        snaps = tuple(_with_batch_slices(s, in_batches.get(self._queue(s.row), [])) for s in snaps)
        wanted = [QueueKey(s.row.topic, s.row.queue_id) for s in snaps]
        view = await asyncio.to_thread(read_hot_view, self.hot, wanted)
        return snaps, view

    async def plan(
        self, *, now_ms: int | None = None, topic: str | None = None
    ) -> tuple[Decision, ...]:
        """What a pass would do at ``now_ms`` (default: the clock), optionally for one
        topic only. Changes nothing."""
        snaps, view = await self._inputs()
        if topic is not None:
            snaps = tuple(s for s in snaps if s.row.topic == topic)
        now = self.clock.now_ms() if now_ms is None else now_ms
        return plan_retention(snaps, view, now_ms=now, policy=self.policy)

    async def plan_purge(self, topic: str, *, now_ms: int | None = None) -> tuple[Decision, ...]:
        """What purging ``topic`` would do (see :func:`plan_purge`). Changes nothing."""
        snaps, view = await self._inputs()
        now = self.clock.now_ms() if now_ms is None else now_ms
        return plan_purge(snaps, view, topic=topic, now_ms=now, policy=self.policy)

    async def resume(self) -> tuple[SegmentRow, ...]:
        """Finish interrupted deletions (see :func:`resume`)."""
        return await resume(
            catalogue=self.catalogue, backend=self.backend, lease=self.lease, on_step=self.on_step
        )

    async def _execute(self, decisions: Sequence[Decision]) -> None:
        await execute(
            decisions,
            catalogue=self.catalogue,
            backend=self.backend,
            lease=self.lease,
            metrics=self.metrics,
            on_step=self.on_step,
        )

    async def run_pass(self, *, now_ms: int | None = None, topic: str | None = None) -> PassReport:
        """Resume interrupted deletions, then plan and execute one pass."""
        resumed = await self.resume()
        decisions = await self.plan(now_ms=now_ms, topic=topic)
        await self._execute(decisions)
        if decisions:
            log.info(
                "retention pass: %d segments expired, %d queues destroyed",
                sum(isinstance(d, ExpireSegment) for d in decisions),
                sum(isinstance(d, DestroyQueue) for d in decisions),
            )
        return PassReport(resumed, decisions)

    async def purge(self, topic: str, *, now_ms: int | None = None) -> PassReport:
        """Delete every cold segment of ``topic`` now and mark its queues DELETED."""
        resumed = await self.resume()
        decisions = await self.plan_purge(topic, now_ms=now_ms)
        await self._execute(decisions)
        return PassReport(resumed, decisions)
