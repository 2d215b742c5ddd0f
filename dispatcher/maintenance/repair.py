"""Repair of a DIVERGED queue: quarantine what the hot store disowns, truncate, resume.

A queue goes DIVERGED when the broker no longer agrees with cold data already committed
(it lost unflushed data and re-wrote offsets, or its max fell below the cold commit).
``tieredstore repair`` then:

1. **Compares** the catalogue's links (segments and batch slices), oldest first, with the
   hot store, record by record outside bytes [28, 36) (and each CQ unit's size and
   tagsCode). A link is kept only if every record it shares with the hot store agrees;
   offsets the broker already deleted cannot be compared and are kept (nothing
   contradicts them). The first link that differs, reaches past the hot max, or cannot
   be read sets the **cut**: the first queue offset to re-tier from hot.
2. **Withdraws** the queue's batch slices at or after the cut, when the broker has batch
   objects at all: the catalogue's slices there are copied to the quarantine first (their
   two byte ranges, named as a segment's COMMIT_LOG and CONSUME_QUEUE objects), then one
   batch fence names the queue and the cut (:class:`~tieredstore.cold.batch.Withdrawn`,
   :mod:`tieredstore.dispatcher.tiering.batch.sequence`). A batch is shared and never rewritten; the
   fence makes every reader skip those slices, and the batch collector may then delete
   their batches.
3. **Quarantines** (moves, never deletes) every segment at or after the cut — the
   catalogue's, and any committed manifest there the catalogue never adopted — to
   ``_quarantine/<topic>/<queue>/<stamp>/<KIND>/<name>``
   (:func:`~tieredstore.cold.layout.quarantine_key`). Loss records (``LOSS/``: offsets
   accepted as lost by ``resume``) at or after the cut describe a history the cut
   removes; they are quarantined the same way.
4. **Truncates** the catalogue to the cut and sets the queue ACTIVE; the next tick
   re-tiers from there.

Segments are moved newest first, so the committed set in the bucket stays a contiguous
prefix at every instant, each by the crash-safe move of
:mod:`tieredstore.dispatcher.tiering.quarantine`
(a crash leaves a segment either still committed or with a complete quarantined copy).
The catalogue is changed only after every move, and the queue stays DIVERGED until then,
so nothing tiers or adopts meanwhile (reconcile reports the catalogue rows whose
manifest a move already took). Running repair again finishes the job: a segment whose
manifest is gone is unreadable, so it is moved again. An interrupted copy leaves partial
evidence under the old stamp; quarantine is never cleaned automatically.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from tieredstore.backends.base import Backend
from tieredstore.clock import Clock
from tieredstore.cold.batch import Withdrawn
from tieredstore.cold.history import Committed, as_link, span_bytes
from tieredstore.cold.layout import (
    ObjectKey,
    QueuePath,
    SegmentKind,
    batch_prefix,
    kind_prefix,
    loss_prefix,
    parse_batch_key,
    parse_loss_key,
    parse_object_key,
    quarantine_key,
    quarantine_loss_key,
)
from tieredstore.cold.manifest import FenceMarker, Manifest, read_stored
from tieredstore.dispatcher.lease.guard import hold_lease
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.dispatcher.tiering.batch.sequence import BatchKeys
from tieredstore.dispatcher.tiering.quarantine import Move, SegmentCheck, check_segment, quarantine
from tieredstore.errors import (
    CatalogueError,
    ColdDataError,
    ConfigError,
    DivergedError,
    InvalidNameError,
    ObjectNotFoundError,
)
from tieredstore.hot.store import HotRange, HotStore
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueRow, QueueState, SegmentStatus

log = logging.getLogger(__name__)

__all__ = ["RepairPlan", "RepairReport", "execute_repair", "plan_repair"]


@dataclass(frozen=True, slots=True)
class RepairPlan:
    """What repair will do to one queue; computing it changes nothing."""

    row: QueueRow
    hot: HotRange
    checks: tuple[SegmentCheck, ...]
    cut: int
    moves: tuple[Move, ...]
    #: Keys of loss records at or after the cut (quarantined after the segments).
    losses: tuple[str, ...] = ()
    #: Whether batch slices at or after the cut are withdrawn (the broker has batches).
    withdraws: bool = False
    #: The catalogue's slices at or after the cut (copied to the quarantine first).
    withdrawn: tuple[Committed, ...] = ()

    def describe(self) -> list[str]:
        q = f"{self.row.topic}/{self.row.queue_id}"
        cold = f"[{self.row.cold_min}, {self.row.cold_commit})"
        lines = [f"queue {q}: hot [{self.hot.min}, {self.hot.max}), cold {cold}"]
        lines += [f"  {c.describe()}" for c in self.checks]
        if self.withdraws:
            lines.append(
                f"  withdraw the batch slices at or after offset {self.cut} (a batch fence)"
            )
        lines += [f"  quarantine segment at offset {m.start_offset} ({m.why})" for m in self.moves]
        lines += [f"  quarantine loss record {k} (at or after the cut)" for k in self.losses]
        lines.append(f"  truncate the catalogue to offset {self.cut} and resume tiering there")
        return lines


@dataclass(frozen=True, slots=True)
class RepairReport:
    """What repair did: the plan, the quarantine stamp, (original, copy) keys moved,
    and the queue's row afterwards (ACTIVE, ``cold_commit == plan.cut``)."""

    plan: RepairPlan
    stamp_ms: int
    moved: tuple[tuple[str, str], ...]
    row: QueueRow


# -- planning --------------------------------------------------------------------------
async def plan_repair(
    *,
    hot: HotStore,
    backend: Backend,
    catalogue: Catalogue,
    topic: str,
    queue_id: int,
) -> RepairPlan:
    """Compare one DIVERGED queue with the hot store and decide the cut (read-only).

    Raises:
        ConfigError: unknown queue, or a queue that is not DIVERGED.
        CatalogueError: a segment is still being deleted (start the sidecar or run
            ``tieredstore expire`` first: they finish interrupted expiries).
        DivergedError: the hot store ends below the cold data that would remain, so
            truncation cannot help (the broker lost data cold already expired).
    """
    row = await asyncio.to_thread(catalogue.queues.get, topic, queue_id)
    if row is None:
        raise ConfigError(f"the catalogue has no queue {topic}/{queue_id}")
    if row.state is not QueueState.DIVERGED:
        raise ConfigError(f"queue {row} is {row.state.value}, not DIVERGED: nothing to repair")
    segments = await asyncio.to_thread(catalogue.segments.of, topic, queue_id)
    if any(s.status is SegmentStatus.DELETING for s in segments):
        raise CatalogueError(
            "a segment of the queue is still being deleted; finish the expiry first "
            "(start the sidecar, or run tieredstore expire)",
            where=f"{catalogue.path} queue {row}",
        )
    rng = await asyncio.to_thread(hot.queue_range, topic, queue_id)
    slices = await asyncio.to_thread(catalogue.slices.of, topic, queue_id)
    links = sorted([as_link(s.manifest) for s in segments] + slices, key=lambda c: c.start_offset)
    checks: list[SegmentCheck] = []
    cut = row.cold_commit
    for link in links:
        check = await check_segment(link, hot, backend, rng)
        checks.append(check)
        if not check.agreement.kept:
            cut = link.start_offset
            break
    if rng.max < cut:
        raise DivergedError(
            f"the hot store ends at offset {rng.max}, below the cold data that agrees with "
            f"it (up to {cut}): the broker lost data cold no longer holds; truncation "
            "cannot repair this queue",
            where=f"queue {row}",
        )
    moves = [_catalogue_move(s.manifest) for s in segments if s.start_offset >= cut]
    known = {s.start_offset for s in segments}
    moves += await _stray_moves(backend, catalogue, row, cut, known, hot=hot, rng=rng)
    moves.sort(key=lambda m: m.start_offset, reverse=True)  # newest first
    losses = await _losses_after(backend, QueuePath(catalogue.cluster, catalogue.broker,
                                                    topic, queue_id), cut)  # fmt: skip
    withdrawn = tuple(s for s in slices if s.end_offset > cut)
    withdraws = bool(withdrawn) or await _has_batches(backend, catalogue)
    return RepairPlan(row, rng, tuple(checks), cut, tuple(moves), losses, withdraws, withdrawn)


async def _has_batches(backend: Backend, catalogue: Catalogue) -> bool:
    """Whether the broker has batch objects (slices the catalogue lacks may be past a
    cut)."""
    prefix = batch_prefix(catalogue.cluster, catalogue.broker) + "/"
    return any(parse_batch_key(i.key, prefix) is not None for i in await backend.list(prefix))


async def _losses_after(backend: Backend, queue: QueuePath, cut: int) -> tuple[str, ...]:
    """Keys of the queue's loss records starting at or after ``cut`` (a malformed name
    in ``LOSS/`` is left alone: reconcile reports it)."""
    keys = []
    for info in await backend.list(loss_prefix(queue) + "/"):
        try:
            if parse_loss_key(info.key).start_offset >= cut:
                keys.append(info.key)
        except InvalidNameError:
            continue
    return tuple(sorted(keys, reverse=True))


def _catalogue_move(m: Manifest) -> Move:
    """Quarantine a catalogue segment, if its key still holds this very manifest."""
    return Move(m.start_offset, _segment_keys(m), "catalogue segment at or after the cut",
                m.to_json())  # fmt: skip


def _segment_keys(m: Manifest) -> tuple[str, ...]:
    return (m.commit_log_key, m.consume_queue_key, m.key)


async def _stray_moves(
    backend: Backend,
    catalogue: Catalogue,
    row: QueueRow,
    cut: int,
    known: set[int],
    *,
    hot: HotStore,
    rng: HotRange,
) -> list[Move]:
    """Committed manifests at or after the cut that the catalogue never adopted and
    that the hot store disowns.

    Each is compared with the hot store like the catalogue's own segments: one that
    agrees is kept (another writer tiered it from this very hot store — e.g. the
    catalogue is a stale copy — and reconcile adopts it), one that differs is moved. A
    manifest that does not parse is moved alone (the names of its data objects cannot
    be known; GC collects them). Fence markers are left: they are no segment.
    """
    queue = QueuePath(catalogue.cluster, catalogue.broker, row.topic, row.queue_id)
    out: list[Move] = []
    for info in await backend.list(kind_prefix(queue, SegmentKind.MANIFEST) + "/"):
        try:
            start = parse_object_key(info.key).base_offset
        except InvalidNameError:
            continue  # not a manifest of ours; reconcile reports it
        if start < cut or start in known:
            continue
        try:
            data = await backend.read(info.key)
            m = read_stored(data, info.key)
        except ObjectNotFoundError:
            continue
        except ColdDataError:
            out.append(Move(start, (info.key,), "unparseable manifest after the cut"))
            continue
        if isinstance(m, FenceMarker):
            continue  # no segment here: GC's fence stays (it fences stale writers)
        if (await check_segment(m, hot, backend, rng)).agreement.kept:
            continue
        out.append(
            Move(start, _segment_keys(m), "manifest after the cut the catalogue lacks", data)
        )
    return out


# -- execution -------------------------------------------------------------------------
async def execute_repair(
    plan: RepairPlan,
    *,
    backend: Backend,
    catalogue: Catalogue,
    keys: BatchKeys,
    clock: Clock,
) -> RepairReport:
    """Withdraw the slices past the cut (if ``plan.withdraws``), quarantine
    ``plan.moves``, truncate the catalogue to ``plan.cut``, set ACTIVE.

    ``keys`` are the running sidecar's batch keys (the assembly's, which the batch writer
    and the heal of a lost tail fence with too); their lease is the one held. Holds the
    lease before each move and before the catalogue changes (LeaseLostError stops it;
    running repair again finishes the job, see the module docstring).
    """
    lease = keys.lease
    stamp = clock.now_ms()
    topic, queue_id = plan.row.topic, plan.row.queue_id
    moved: list[tuple[str, str]] = []
    if plan.withdraws:
        for link in plan.withdrawn:
            moved += await _quarantine_slice(link, backend=backend, lease=lease, stamp=stamp)
        await hold_lease(lease)
        await keys.fence([Withdrawn(topic, queue_id, plan.cut)])
    for move in plan.moves:
        moved += await quarantine(move, backend=backend, lease=lease, stamp=stamp)
    for key in plan.losses:
        moved += await _quarantine_loss(key, backend=backend, lease=lease, stamp=stamp)
    await hold_lease(lease)
    await asyncio.to_thread(catalogue.segments.truncate, topic, queue_id, plan.cut)
    row = await asyncio.to_thread(catalogue.queues.set_state, topic, queue_id, QueueState.ACTIVE)
    return RepairReport(plan, stamp, tuple(moved), row)


async def _quarantine_slice(
    link: Committed, *, backend: Backend, lease: Lease, stamp: int
) -> Sequence[tuple[str, str]]:
    """Copy one batch slice's two byte ranges to the quarantine, named as the segment's
    data objects would be (nothing is deleted: the batch is shared)."""
    out = []
    for kind, span, base in (
        (SegmentKind.COMMIT_LOG, link.commit_log, link.cl_base),
        (SegmentKind.CONSUME_QUEUE, link.consume_queue, link.cq_base),
    ):
        await hold_lease(lease)
        try:
            data = await span_bytes(backend, span)
        except ObjectNotFoundError:
            continue  # collected since the plan: nothing left to keep
        q = link.queue
        target = quarantine_key(
            ObjectKey(q.cluster, q.broker, q.topic, q.queue_id, kind, base), stamp_ms=stamp
        )
        await backend.write(target, data)
        out.append((f"{link.history_key}:{kind.value}", target))
    return out


async def _quarantine_loss(
    key: str, *, backend: Backend, lease: Lease, stamp: int
) -> Sequence[tuple[str, str]]:
    """Copy one loss record to the quarantine, then delete it."""
    await hold_lease(lease)
    try:
        data = await backend.read(key)
    except ObjectNotFoundError:
        return ()  # moved by an interrupted earlier repair
    target = quarantine_loss_key(parse_loss_key(key), stamp_ms=stamp)
    await backend.write(target, data)
    await hold_lease(lease)
    await backend.delete(key)
    return ((key, target),)
