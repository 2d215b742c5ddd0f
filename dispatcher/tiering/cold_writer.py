"""The dispatcher's cold-side writes: segment objects, manifests, continuity checks.

Segment uploads are retried as a whole on RetryableError (a streamed upload cannot be
replayed chunk by chunk, so the backend's own retry wrapper does not retry it), with the
injected :class:`RetryPolicy` and clock. Every attempt writes under fresh names (a new
upload attempt, :func:`~tieredstore.cold.layout.new_attempt`), so no write ever lands on an
object another attempt — or another writer — wrote; objects no manifest names are
garbage that GC collects.

The manifest is the commit point and is only ever *created* (:meth:`Backend.create`),
or put in the place of a GC fence marker of an epoch no newer than ours
(:meth:`Backend.replace` on the marker's version). Losing that race is an ordinary
outcome, reported as a :class:`ManifestOutcome`: what is already there is our own
manifest (a retry after a lost reply), another writer's manifest, which the caller
checks and adopts, a manifest of a format this version cannot read (the queue stops) —
or a manifest or marker of a newer lease epoch: this writer has been fenced and stops.
Before a queue's first batch slice in a process, the batch writer takes the manifest key
of the slice's start with a marker of its own (:func:`gate_start`), so a
stale writer's create there is fenced too (docs/reliability.md).

On start, :meth:`ColdWriter.recover` reconciles the catalogue with cold; what it finds
damaged in a committed history is made loud (:func:`report_damage`) and a lost tail the
broker still holds is tiered again (:func:`heal_lost_tail`): see their sections below.
A damaged batch object is made loud for every queue it held (:func:`report_batch_damage`),
at start or on the tick whose read finds it
(:func:`tieredstore.dispatcher.tiering.batch.damage.handle_damage`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from tieredstore.backends.base import Backend
from tieredstore.backends.retry import RetryPolicy, retry_call
from tieredstore.canonical_json import canonical
from tieredstore.clock import Clock
from tieredstore.cold.batch import Withdrawn
from tieredstore.cold.compressed.frames import FrameSettings
from tieredstore.cold.history import Committed
from tieredstore.cold.layout import (
    QueuePath,
    SegmentKind,
    is_loss_key,
    new_attempt,
    object_key,
    object_name,
    parse_loss_key,
    parse_object_key,
    retiered_key,
)
from tieredstore.cold.manifest import (
    COMPRESSED_VERSION,
    DIGEST_ALGORITHM,
    FORMAT_VERSION,
    FenceMarker,
    Manifest,
    ObjectRef,
    read_stored,
)
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.dispatcher.shared_state import Damaged
from tieredstore.dispatcher.tiering.batch.sequence import BatchKeys
from tieredstore.dispatcher.tiering.commitlog_pass import Spooled
from tieredstore.dispatcher.tiering.continuity import Continuity
from tieredstore.dispatcher.tiering.planner import SegmentPlan
from tieredstore.dispatcher.tiering.uploader import Encodings, UploadedObjects, upload_objects
from tieredstore.errors import (
    CatalogueError,
    ConditionFailedError,
    InvalidNameError,
    LeaseLostError,
    RetryableError,
    TieredStoreError,
    UnsupportedFormatError,
)
from tieredstore.findings import Finding, FindingKind
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.reconcile import ReconcileReport, reconcile
from tieredstore.metadata.rows import QueueRow, SegmentRow, SegmentStatus

__all__ = [
    "RETIERED_FORMAT",
    "ColdWriter",
    "FoundDamage",
    "HealOutcome",
    "ManifestOutcome",
    "gate_start",
    "heal_damaged",
    "heal_lost_tail",
    "report_batch_damage",
    "report_damage",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


class ManifestOutcome(enum.Enum):
    """What creating a segment's manifest came to."""

    CREATED = "created"  # ours is the commit point (also: ours, after a lost reply)
    EXISTS = "exists"  # another writer's manifest is there: check it, adopt or quarantine
    UNREADABLE = "unreadable"  # a manifest of a newer format is there: stop the queue


#: How many times a manifest may find a fence marker changed under it before giving up
#: (each loss means another writer replaced it: the next read sees a manifest).
_MAX_SWAPS = 3


class ColdWriter:
    """Writes one broker's segments under its cold prefix."""

    def __init__(
        self,
        backend: Backend,
        hot: HotStore,
        catalogue: Catalogue,
        *,
        cluster: str,
        broker: str,
        writer_id: str,
        clock: Clock,
        batch_bytes: int,
        retry: RetryPolicy,
        on_retry: Callable[[str], None] | None = None,
        frames: FrameSettings | None = None,
        encode_threads: int = 1,
    ) -> None:
        self.backend = backend
        self.hot = hot
        self.catalogue = catalogue
        self.cluster = cluster
        self.broker = broker
        self.writer_id = writer_id
        self.clock = clock
        self.batch_bytes = batch_bytes
        self.retry = retry
        self.on_retry = on_retry
        #: How new COMMIT_LOG objects are compressed (None: written plain).
        self.frames = frames
        #: Where segments are encoded, ahead of their uploads when a round starts them
        #: (in at most ``encode_threads`` threads); None when they are written plain.
        self.encodings = None if frames is None else Encodings(frames, threads=encode_threads)
        self.continuity = Continuity(hot, catalogue, backend)

    def queue_path(self, topic: str, queue_id: int) -> QueuePath:
        return QueuePath(self.cluster, self.broker, topic, queue_id)

    async def _retrying(self, op: str, call: Callable[[], Awaitable[T]]) -> T:
        return await retry_call(
            op, call, self.retry, sleep=self.clock.sleep, on_retry=self._retried
        )

    def _retried(self, op: str, attempt: int, exc: RetryableError) -> None:
        log.warning("%s failed (attempt %d), retrying: %s", op, attempt, exc)
        if self.on_retry:
            self.on_retry(op)

    async def write_segment(
        self,
        plan: SegmentPlan,
        spooled: Spooled,
        row: QueueRow,
        epoch: int,
        *,
        check: Callable[[], None],
    ) -> Manifest:
        """Upload the plan's COMMIT_LOG and CONSUME_QUEUE objects; return its manifest.

        ``spooled`` holds the plan's COMMIT_LOG bytes, gathered by the commitlog-order
        pass (:mod:`tieredstore.dispatcher.tiering.commitlog_pass`) for ``cl_base =
        row.cold_cl_end``.

        ``check`` (the lease's) runs before every chunk: a writer that lost its lease
        stops uploading at once. Each try uses a fresh upload attempt in the names. The
        manifest is *not* written: the caller checks its lease first.
        """
        queue = self.queue_path(row.topic, row.queue_id)
        cl_base = row.cold_cl_end

        async def write(cl_key: str, cq_key: str) -> UploadedObjects:
            return await upload_objects(
                plan, spooled, backend=self.backend, cl_key=cl_key, cq_key=cq_key,
                cl_base=cl_base, batch_bytes=self.batch_bytes, check=check,
                encodings=self.encodings,
            )  # fmt: skip

        attempt, uploaded = await self.upload_attempt(queue, plan.start, cl_base, write)
        return self.manifest_for(queue, plan.start, plan.end, cl_base, attempt, uploaded, epoch)

    async def upload_attempt(
        self,
        queue: QueuePath,
        start: int,
        cl_base: int,
        write: Callable[[str, str], Awaitable[UploadedObjects]],
        *,
        op: str = "segment upload",
    ) -> tuple[str, UploadedObjects]:
        """Write a segment's two objects (``write(cl_key, cq_key)``) under the names of a
        fresh upload attempt, retried as a whole on RetryableError (each try a new
        attempt); a failed try's objects are discarded. Returns the attempt and what
        ``write`` returned, for :meth:`manifest_for`. No manifest is written."""
        attempts: list[str] = []

        async def upload() -> UploadedObjects:
            attempts.append(new_attempt())
            keys = (
                object_key(queue, SegmentKind.COMMIT_LOG, cl_base, attempts[-1]),
                object_key(queue, SegmentKind.CONSUME_QUEUE, start * CQ_UNIT_SIZE, attempts[-1]),
            )
            try:
                return await write(*keys)
            except TieredStoreError:
                await self._discard(keys)  # no manifest can name this attempt
                raise

        uploaded = await self._retrying(op, upload)
        return attempts[-1], uploaded

    def manifest_for(
        self,
        queue: QueuePath,
        start: int,
        end: int,
        cl_base: int,
        attempt: str,
        up: UploadedObjects,
        epoch: int,
    ) -> Manifest:
        """The manifest of queue offsets ``[start, end)`` from cold commitlog ``cl_base``,
        naming the objects :meth:`upload_attempt` wrote for ``attempt``."""
        cq_base = start * CQ_UNIT_SIZE
        return Manifest(
            format_version=FORMAT_VERSION if up.cl_framed is None else COMPRESSED_VERSION,
            cluster=self.cluster,
            broker=self.broker,
            topic=queue.topic,
            queue_id=queue.queue_id,
            start_offset=start,
            end_offset=end,
            cl_base=cl_base,
            cl_end=cl_base + up.cl_size,
            commit_log=ObjectRef(
                object_name(cl_base, attempt), up.cl_size, up.cl_digest, up.cl_framed
            ),
            consume_queue=ObjectRef(object_name(cq_base, attempt), up.cq_size, up.cq_digest),
            digest_algorithm=DIGEST_ALGORITHM,
            min_store_timestamp=up.min_store_timestamp,
            max_store_timestamp=up.max_store_timestamp,
            message_count=end - start,
            writer_id=self.writer_id,
            lease_epoch=epoch,
            created_at_ms=self.clock.now_ms(),
        )

    async def create_manifest(
        self, manifest: Manifest, *, check: Callable[[], None]
    ) -> ManifestOutcome:
        """Create the commit point of a segment whose objects are already written.

        ``check`` (the lease's) runs before every try of the create and before a marker
        is replaced, so a retried create never lands after the lease was lost locally.
        Never replaces a manifest. If the key is taken: the very same bytes are ours (a
        retry after a lost reply: CREATED); a fence marker of our epoch or an older one
        is replaced by compare-and-swap (CREATED); a manifest of an older or the same
        epoch is another writer's commit (EXISTS); a manifest of a newer format
        (UNREADABLE); a manifest or a marker of a newer epoch means a newer writer holds
        the lease and this one is fenced (LeaseLostError).
        """
        data = manifest.to_json()

        async def create() -> str:
            check()
            return await self.backend.create(manifest.key, data)

        try:
            await self._retrying("manifest create", create)
            return ManifestOutcome.CREATED
        except ConditionFailedError:
            pass
        for _ in range(_MAX_SWAPS):
            got = await self.backend.read_versioned(manifest.key)
            if got.data == data:
                return ManifestOutcome.CREATED
            try:
                theirs = read_stored(got.data, manifest.key)
            except UnsupportedFormatError:
                return ManifestOutcome.UNREADABLE
            if theirs.lease_epoch > manifest.lease_epoch:
                raise self._fenced(manifest, theirs.lease_epoch, theirs.writer_id)
            if not isinstance(theirs, FenceMarker):
                return ManifestOutcome.EXISTS
            check()
            try:
                await self.backend.replace(manifest.key, data, version=got.version)
                return ManifestOutcome.CREATED
            except ConditionFailedError:
                continue  # replaced under us: read what is there now
        raise ConditionFailedError(
            f"the fence marker changed {_MAX_SWAPS} times while replacing it", where=manifest.key
        )

    @staticmethod
    def _fenced(manifest: Manifest, epoch: int, writer_id: str) -> LeaseLostError:
        fenced = LeaseLostError(
            f"fenced: epoch {epoch} ({writer_id}) took queue offset {manifest.start_offset} "
            f"of {manifest.queue} first",
            where=manifest.key,
        )
        log.error("%s; this writer (epoch %d) stops", fenced, manifest.lease_epoch)
        return fenced

    async def discard(self, manifest: Manifest) -> None:
        """Best effort: delete the data objects of an attempt whose manifest lost the race
        (another manifest is the commit point at its start). Their names are this
        attempt's own, so nothing else can name them; what is left, GC collects."""
        await self._discard((manifest.commit_log_key, manifest.consume_queue_key))

    async def _discard(self, keys: tuple[str, ...]) -> None:
        for key in keys:
            try:
                await self.backend.delete(key)
            except TieredStoreError as exc:
                log.warning("could not delete abandoned upload %s (GC will): %s", key, exc)

    async def recover(self) -> ReconcileReport:
        """Adopt manifests committed to cold but not yet to the catalogue (a crash);
        return what reconcile found (the caller makes its damage loud)."""
        report = await reconcile(self.catalogue, self.backend)
        log.info("reconciled catalogue with cold store: %s", report)
        return report


# -- cold damage found by reconcile, made loud ---------------------------------
#
# Damage in a queue's committed history, made loud: what reconcile found, per queue.
#
# Reconcile (:mod:`tieredstore.metadata.reconcile`) runs when the sidecar starts and reports, never
# drops, what does not add up: a committed manifest missing, emptied, unparsable or of a
# newer format, an object missing or of the wrong size, a gap or an overlap. Those are
# damage to data cold had committed (findings of severity CORRUPT). Each is
#
# * one ERROR line naming the finding, the key and the queue;
# * the queue's ``status`` state DEGRADED, its note the first finding (saved beside the
#   catalogue with the stopped queues, :mod:`tieredstore.dispatcher.stopped_file`, for ``tieredstore
#   status``; served by ``/v1/queues``);
# * ``tieredstore_queue_cold_damaged{topic, queue, kind} = 1`` (the alert
#   ``TieredstoreColdDamaged``).
#
# Findings that need the operator but lose nothing (NOT_ADOPTED, UNRECOGNISED, …) stay in
# the reconcile summary. A finding whose key is a batch object (missing, of another size,
# a head that does not parse) is each queue's that the catalogue's slice rows say it
# held (:func:`report_batch_damage`): one ERROR line, the gauge and the note per queue,
# naming the batch key and the queue's offsets in it. A finding whose key names no queue
# (a batch no slice row names any more) is logged, not attributed.


@dataclass(frozen=True, slots=True)
class FoundDamage:
    """What :func:`report_damage` found: the damaged queues, each with its note, and the
    damaged batch objects' keys (whose slices are lost to every queue that held one)."""

    queues: Damaged = field(default_factory=dict)
    batches: frozenset[str] = frozenset()


async def gate_start(
    writer: ColdWriter,
    queue: QueuePath,
    start: int,
    *,
    lease_epoch: int,
    check: Callable[[], None],
) -> str | None:
    """Take the manifest key of ``start`` for this writer's epoch before batch slices
    from ``start`` are committed: a writer of an older epoch frozen inside its
    manifest create there then finds the key taken and stops as fenced, instead of
    landing a segment the reading rule would read over the slices.

    Puts a fence marker of ``lease_epoch`` there (create-if-absent; a marker of an
    older epoch is replaced by compare-and-swap; one of this epoch stays). Returns
    None once the key holds a marker of this epoch, or the key when a manifest is
    there (it landed since the catalogue was reconciled: the caller adopts it and
    commits no slice from ``start``). Raises LeaseLostError when a marker or
    manifest of a newer epoch is there. A later manifest of this or a newer epoch
    at ``start`` (compaction's) replaces the marker (:meth:`ColdWriter.create_manifest`).
    """
    key = object_key(queue, SegmentKind.MANIFEST, start)
    data = FenceMarker(
        queue.cluster, queue.broker, queue.topic, queue.queue_id, start,
        lease_epoch=lease_epoch, writer_id=writer.writer_id,
        created_at_ms=writer.clock.now_ms(),
    ).to_json()  # fmt: skip

    async def create() -> str:
        check()
        return await writer.backend.create(key, data)

    try:
        await writer._retrying("manifest gate", create)
        return None
    except ConditionFailedError:
        pass
    for _ in range(_MAX_SWAPS):
        got = await writer.backend.read_versioned(key)
        try:
            theirs = read_stored(got.data, key)
        except UnsupportedFormatError:
            return key  # a manifest of a newer format: the adoption stops the queue
        if theirs.lease_epoch > lease_epoch:
            raise _fenced_at(key, start, queue, theirs.lease_epoch, theirs.writer_id,
                                  lease_epoch)  # fmt: skip
        if not isinstance(theirs, FenceMarker):
            return key
        if theirs.lease_epoch == lease_epoch:
            return None
        check()
        try:
            await writer.backend.replace(key, data, version=got.version)
            return None
        except ConditionFailedError:
            continue  # replaced under us: read what is there now
    raise ConditionFailedError(
        f"the manifest key changed {_MAX_SWAPS} times while gating it", where=key
    )


def _fenced_at(
    key: str, start: int, queue: QueuePath, epoch: int, writer_id: str, ours: int
) -> LeaseLostError:
    fenced = LeaseLostError(
        f"fenced: epoch {epoch} ({writer_id}) took queue offset {start} of {queue} first",
        where=key,
    )
    log.error("%s; this writer (epoch %d) stops", fenced, ours)
    return fenced


def _queue_of(key: str) -> QueueKey | None:
    try:
        if is_loss_key(key):
            q = parse_loss_key(key).queue
            return QueueKey(q.topic, q.queue_id)
        parsed = parse_object_key(key)
    except InvalidNameError:
        return None
    return QueueKey(parsed.topic, parsed.queue_id)


def report_damage(issues: Iterable[Finding], metrics: Metrics, catalogue: Catalogue) -> FoundDamage:
    """Log every damaging issue as an ERROR, set its gauge; return the damaged queues
    (each with its first finding as the reason) and batch objects (the queues each held,
    from ``catalogue``'s slice rows, are among the damaged queues)."""
    damaged: Damaged = {}
    batches: dict[str, list[Finding]] = {}
    for issue in issues:
        if not issue.kind.damage:
            continue
        queue = _queue_of(issue.key)
        if queue is None and issue.key not in batches:
            held = catalogue.slices.in_batch(issue.key)
            if held:
                batches[issue.key] = []
        if issue.key in batches:
            batches[issue.key].append(issue)
            continue
        where = f"queue {queue}" if queue is not None else "no queue"
        log.error(
            "cold damage (%s): %s; %s is DEGRADED until the damage is repaired",
            where, issue, queue if queue is not None else "nothing",
        )  # fmt: skip
        if queue is None:
            continue
        metrics.queue_damaged.labels(queue.topic, str(queue.queue_id), issue.kind.value).set(1)
        damaged.setdefault(queue, f"cold damage: {issue}")
    for key, found in batches.items():  # one line per queue, however many findings
        for link in catalogue.slices.in_batch(key):
            said = [i for i in found if link.describe() in i.detail] or found
            report_batch_damage(key, said[0].kind, said[0].detail, [link], metrics, damaged)
    return FoundDamage(damaged, frozenset(batches))


def report_batch_damage(
    key: str,
    kind: FindingKind,
    detail: str,
    held: Sequence[Committed],
    metrics: Metrics,
    damaged: Damaged,
) -> None:
    """Make the damage ``kind`` (said by ``detail``) of the batch object at ``key`` loud
    for every queue whose slices ``held`` (the catalogue's rows of it): one ERROR line
    naming the key and the queue's offsets in it, ``tieredstore_queue_cold_damaged``,
    and the queue's note in ``damaged`` (a queue already there keeps its first note)."""
    offsets: dict[QueueKey, list[str]] = {}
    for link in held:
        queue = QueueKey(link.topic, link.queue_id)
        offsets.setdefault(queue, []).append(f"[{link.start_offset}, {link.end_offset})")
    for queue, ranges in sorted(offsets.items()):
        what = (
            f"{kind.value}: batch object {key}, which holds its offsets {', '.join(ranges)}: "
            f"{detail}"
        )
        log.error(
            "cold damage (queue %s): %s; %s is DEGRADED until the damage is repaired",
            queue, what, queue,
        )  # fmt: skip
        metrics.queue_damaged.labels(queue.topic, str(queue.queue_id), kind.value).set(1)
        damaged.setdefault(queue, f"cold damage: {what}")


# -- healing a lost committed tail from hot ------------------------------------
#
# Healing a lost committed tail from hot, without ever hiding the loss.
#
# When reconcile finds that the manifests of a queue's newest committed segments are
# gone from cold (deleted by hand, a bucket lifecycle rule, a bad restore of the bucket)
# while the broker still holds their offsets, those messages are tiered again. The rules:
#
# * only a **tail**: every catalogue segment from the first lost one to the queue's end
#   has its manifest key absent. A lost segment with intact ones after it is left
#   DEGRADED (tiering it again would overlap them). Batch slices after it are intact but
#   follow a gap: they are withdrawn (one batch fence, :class:`Withdrawn`) and tiered
#   again with the rest. A slice in a damaged batch object (missing, cut short, a head
#   or a slice that does not check) is lost as a segment whose manifest is gone: the
#   tail starts at the queue's first lost segment or slice, and the damaged batch's key
#   is never written (the slices are withdrawn by a fence at a new key);
# * only when the broker still holds **every** offset from the first lost one to the end
#   of the last segment or slice (hot min at or below it): a partial heal would hide the
#   part it cannot restore;
# * never over a committed key: a manifest key that still holds something (an emptied,
#   unparsable or newer-format manifest) is never replaced, and such a queue is not
#   healed. The new segments are uploaded under new attempt names (as every upload is)
#   and their manifests *created* where the lost ones were;
# * the event is **recorded in cold** before anything changes (a ``_retiered`` record,
#   :func:`~tieredstore.cold.layout.retiered_key`: the lost range, the lost manifests' and
#   batch objects' keys, when, by whom) and **counted**
#   (``tieredstore_cold_ranges_retiered_total``). The queue stays DEGRADED in ``status``
#   for the rest of the process.
#
# Then the catalogue forgets the lost segments and the withdrawn slices
# (:meth:`SegmentTable.truncate`) and the next tick tiers the offsets again from hot.
RETIERED_FORMAT = "tieredstore-retiered/1"


class HealOutcome(enum.Enum):
    HEALED = "the lost tail is tiered again from hot"
    NOT_A_TAIL = "a committed segment after the lost one is intact"
    KEY_TAKEN = "its damaged segment's manifest key still holds something (never replaced)"
    HOT_LOST = "the broker no longer holds every lost offset"


async def heal_lost_tail(
    queue: QueueKey,
    *,
    catalogue: Catalogue,
    hot: HotStore,
    queue_path: QueuePath,
    metrics: Metrics,
    keys: BatchKeys,
    lost_batches: Collection[str] = frozenset(),
) -> HealOutcome:
    """Heal ``queue``'s lost committed tail if the rules allow (module doc); the
    caller holds the lock of catalogue writes, and calls this only for a queue found
    damaged (``keys`` hold the writer's lease: it is checked before each write). The
    queue's slices in the batch objects ``lost_batches`` (found damaged) are lost like
    segments whose manifest is gone. The queue's batch slices past the loss are
    withdrawn with it (one batch fence), so the broker must still hold them too.
    Returns what was done (anything but HEALED is one ERROR line); backend errors
    propagate."""
    backend, lease = keys.backend, keys.lease
    segments = [
        s
        for s in await asyncio.to_thread(catalogue.segments.of, queue.topic, queue.queue_id)
        if s.status is SegmentStatus.COMMITTED
    ]
    present = [await backend.exists(s.manifest.key) for s in segments]
    slices = await asyncio.to_thread(catalogue.slices.of, queue.topic, queue.queue_id)
    lost_slices = [c for c in slices if c.key in lost_batches]
    starts = [s.start_offset for s, p in zip(segments, present, strict=True) if not p]
    starts += [c.start_offset for c in lost_slices]
    if not starts:  # damaged, not gone: an object missing, a manifest emptied
        return _said(queue, HealOutcome.KEY_TAKEN)
    start = min(starts)
    lost = [s for s in segments if s.start_offset >= start]
    if any(p for s, p in zip(segments, present, strict=True) if s.start_offset >= start):
        return _said(queue, HealOutcome.NOT_A_TAIL)
    past = [c for c in slices if c.end_offset > start]
    end = max([*(s.end_offset for s in lost), *(c.end_offset for c in past)])
    try:
        rng = await asyncio.to_thread(hot.queue_range, queue.topic, queue.queue_id)
    except TieredStoreError:
        return _said(queue, HealOutcome.HOT_LOST)
    if rng.min > start or rng.max < end:
        return _said(queue, HealOutcome.HOT_LOST)
    now = keys.clock.now_ms()
    lease.check()
    key = retiered_key(queue_path, start, stamp_ms=now)
    with contextlib.suppress(ConditionFailedError):  # recorded by a try this millisecond
        await backend.create(key, _retiered(queue, lost, lost_slices, now, lease))
    if past:
        await keys.fence([Withdrawn(queue.topic, queue.queue_id, start)])
    await asyncio.to_thread(catalogue.segments.truncate, queue.topic, queue.queue_id, start)
    metrics.cold_ranges_retiered.labels(queue.topic, str(queue.queue_id)).inc()
    log.error(
        "queue %s: committed offsets [%d, %d) were lost from cold (%d manifests gone, "
        "%d slices in damaged batch objects %s); the broker still holds them, so they "
        "are tiered again from hot under new names; the loss is recorded in cold",
        queue, start, end, len(lost), len(lost_slices),
        sorted({c.key for c in lost_slices}) or "(none)",
    )  # fmt: skip
    return HealOutcome.HEALED


def _retiered(
    queue: QueueKey, lost: list[SegmentRow], sliced: list[Committed], now: int, lease: Lease
) -> bytes:
    """The ``_retiered`` record of the lost segments ``lost`` and the lost batch slices
    ``sliced`` (module doc); ``lost_batches`` only when slices were lost."""
    ranges = [(s.start_offset, s.end_offset) for s in lost]
    ranges += [(c.start_offset, c.end_offset) for c in sliced]
    body: dict[str, object] = {
        "format": RETIERED_FORMAT,
        "topic": queue.topic,
        "queue_id": queue.queue_id,
        "lost_start_offset": min(r[0] for r in ranges),
        "lost_end_offset": max(r[1] for r in ranges),
        "lost_manifests": [s.manifest.key for s in lost],
        "recorded_at_ms": now,
        "writer_id": lease.owner,
        "lease_epoch": lease.epoch,
    }
    if sliced:
        body["lost_batches"] = sorted({c.key for c in sliced})
    return canonical(body)


def _said(queue: QueueKey, outcome: HealOutcome) -> HealOutcome:
    log.error("queue %s: its cold damage is not healed: %s", queue, outcome.value)
    return outcome


async def heal_damaged(
    damaged: Damaged,
    *,
    writer: ColdWriter,
    hot: HotStore,
    metrics: Metrics,
    keys: BatchKeys,
    lost_batches: Collection[str] = frozenset(),
) -> set[QueueKey]:
    """:func:`heal_lost_tail` of every damaged queue (``lost_batches``: the damaged batch
    objects' keys); each note (``damaged[queue]``) then says what was done. A catalogue
    that refuses the truncation (e.g. an accepted loss inside the lost tail) leaves the
    queue as it is, said in its note.

    Returns the queues whose lost tail stays in their committed history, neither healed
    nor behind an intact segment (the broker no longer holds it, or the catalogue refused
    the truncation): the next tick that tiers one reads that tail again."""
    kept: set[QueueKey] = set()
    for queue, reason in sorted(damaged.items()):
        try:
            outcome = await heal_lost_tail(
                queue,
                catalogue=writer.catalogue,
                hot=hot,
                queue_path=writer.queue_path(queue.topic, queue.queue_id),
                metrics=metrics,
                keys=keys,
                lost_batches=lost_batches,
            )
        except CatalogueError as exc:
            log.error("queue %s: its cold damage is not healed: %s", queue, exc)
            damaged[queue] = f"{reason}; not healed: {exc}"
            kept.add(queue)
            continue
        damaged[queue] = f"{reason}; {outcome.value}"
        if outcome is HealOutcome.HOT_LOST:
            kept.add(queue)
    return kept
