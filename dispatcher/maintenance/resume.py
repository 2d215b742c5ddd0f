"""Resuming a PAUSED queue: the loss goes on record in cold, then tiering goes on.

A queue is PAUSED when the broker deleted offsets ``[cold_commit, hot_min)`` before they
were tiered (:class:`~tieredstore.dispatcher.tiering.planner.HotDataLost`). Those messages are
gone; what is left to decide is whether tiering may continue after them. ``tieredstore resume
--topic T --queue Q --accept-loss`` decides so, explicitly:

1. **Plan** (read-only): the queue must be PAUSED; the lost range is ``[cold_commit,
   hot_min)`` as the hot store shows it now (empty when nothing was lost: the queue was
   paused for another reason and simply resumes).
2. **Record** the loss in the cold store itself, holding the lease: one
   :class:`~tieredstore.cold.loss.LossRecord` at ``<queue>/LOSS/<name(start)>.json``
   (create-if-absent) with the range, the time, the writer id and the lease epoch.
3. **Accept** it in the catalogue
   (:meth:`~tieredstore.metadata.queue_table.QueueTable.accept_loss`):
   ``cold_commit`` moves to the loss's end and the queue is ACTIVE again; the sidecar
   tiers from hot min on its next tick.

Without ``accept_loss`` a lossy resume is refused (ConfigError naming the range). A crash
between 2 and 3 leaves the record in cold and the queue PAUSED: running ``resume`` again
finds the record (same start) and accepts it; so does the sidecar's start-up
reconciliation. If the broker deleted more meanwhile, a second record continues the
first (``[end of the first, hot min)``).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from tieredstore.backends.base import Backend
from tieredstore.clock import Clock
from tieredstore.cold.layout import QueuePath, SegmentKind, kind_prefix, parse_object_key
from tieredstore.cold.loss import LossRecord, write_loss_record
from tieredstore.cold.manifest import FenceMarker, read_stored
from tieredstore.dispatcher.lease.guard import hold_lease
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.errors import CatalogueError, ConfigError, InvalidNameError, ObjectNotFoundError
from tieredstore.hot.store import HotRange, HotStore
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueRow, QueueState

__all__ = ["ResumePlan", "ResumeReport", "execute_resume", "plan_resume"]

log = logging.getLogger(__name__)

#: Records one resume may write when the broker keeps deleting while it runs.
_MAX_RECORDS = 8


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """What resuming one PAUSED queue means: the lost range (None when nothing is lost)."""

    row: QueueRow
    hot: HotRange
    loss: tuple[int, int] | None

    def describe(self) -> list[str]:
        q = f"{self.row.topic}/{self.row.queue_id}"
        lines = [
            f"queue {q} is {self.row.state.value}: hot [{self.hot.min}, {self.hot.max}), "
            f"cold commit {self.row.cold_commit}"
        ]
        if self.loss is None:
            lines.append("  nothing was lost: tiering resumes at the cold commit offset")
        else:
            start, end = self.loss
            lines.append(
                f"  offsets [{start}, {end}) ({end - start} messages) were deleted by the "
                "broker before they were tiered: record the loss and resume at hot min"
            )
        return lines


@dataclass(frozen=True, slots=True)
class ResumeReport:
    """What resume did: the records now in cold and the queue's row afterwards."""

    plan: ResumePlan
    records: tuple[LossRecord, ...]
    row: QueueRow


async def plan_resume(
    *, hot: HotStore, catalogue: Catalogue, topic: str, queue_id: int
) -> ResumePlan:
    """Find what resuming the queue would record (read-only).

    Raises ConfigError for an unknown queue or one that is not PAUSED (a DIVERGED queue
    needs ``tieredstore repair``).
    """
    row = await asyncio.to_thread(catalogue.queues.get, topic, queue_id)
    if row is None:
        raise ConfigError(f"the catalogue has no queue {topic}/{queue_id}")
    if row.state is QueueState.DIVERGED:
        raise ConfigError(f"queue {row} is DIVERGED, not PAUSED: use tieredstore repair")
    if row.state is not QueueState.PAUSED:
        raise ConfigError(f"queue {row} is {row.state.value}, not PAUSED: nothing to resume")
    rng = await asyncio.to_thread(hot.queue_range, topic, queue_id)
    loss = (row.cold_commit, rng.min) if rng.min > row.cold_commit else None
    return ResumePlan(row, rng, loss)


async def execute_resume(
    plan: ResumePlan,
    *,
    hot: HotStore,
    backend: Backend,
    catalogue: Catalogue,
    lease: Lease,
    clock: Clock,
    accept_loss: bool,
) -> ResumeReport:
    """Record the plan's loss (if any) in cold, accept it, set the queue ACTIVE.

    Raises:
        ConfigError: the plan loses messages and ``accept_loss`` is False.
        CatalogueError: a loss record already in cold reaches past hot min (the hot
            store went backwards since: nothing is changed beyond that record).
        LeaseLostError: another writer took the lease.
    """
    row = plan.row
    if plan.loss is None:
        await hold_lease(lease)
        row = await asyncio.to_thread(
            catalogue.queues.set_state, row.topic, row.queue_id, QueueState.ACTIVE
        )
        log.warning("queue %s resumed at offset %d (nothing was lost)", row, row.cold_commit)
        return ResumeReport(plan, (), row)
    if not accept_loss:
        start, end = plan.loss
        raise ConfigError(
            f"resuming {row} skips offsets [{start}, {end}) ({end - start} messages) the "
            "broker deleted before they were tiered; run again with --accept-loss to record "
            "that loss in the cold store and resume"
        )
    queue = QueuePath(catalogue.cluster, catalogue.broker, row.topic, row.queue_id)
    records: list[LossRecord] = []
    for _ in range(_MAX_RECORDS):
        rng = await asyncio.to_thread(hot.queue_range, row.topic, row.queue_id)
        if rng.min <= row.cold_commit:
            break
        record = await _record_one(queue, row, rng.min, backend=backend, lease=lease, clock=clock)
        await hold_lease(lease)
        row = await asyncio.to_thread(catalogue.queues.accept_loss, record)
        records.append(record)
        log.warning("queue %s resumed: %s", row, record.describe())
    else:
        raise CatalogueError(
            f"the broker kept deleting while resume ran ({_MAX_RECORDS} loss records "
            "written); run resume again",
            where=str(row),
        )
    if row.state is not QueueState.ACTIVE:  # hot min came back to cold commit: no loss left
        row = await asyncio.to_thread(
            catalogue.queues.set_state, row.topic, row.queue_id, QueueState.ACTIVE
        )
    return ResumeReport(plan, tuple(records), row)


async def _no_segment_inside(backend: Backend, queue: QueuePath, start: int, end: int) -> None:
    """Refuse to record ``[start, end)`` as lost while cold holds a committed segment
    starting inside it: the catalogue that planned the loss is stale (another writer
    tiered those offsets), and a loss record would hide committed data."""
    for info in await backend.list(kind_prefix(queue, SegmentKind.MANIFEST) + "/"):
        try:
            base = parse_object_key(info.key).base_offset
        except InvalidNameError:
            continue
        if not start <= base < end:
            continue
        try:
            stored = read_stored(await backend.read(info.key), info.key)
        except ObjectNotFoundError:
            continue
        if isinstance(stored, FenceMarker):
            continue
        raise CatalogueError(
            f"cold holds a committed segment at offset {base}, inside the range "
            f"[{start}, {end}) this catalogue would record as lost: the catalogue is "
            "stale (another writer tiered those offsets); start the sidecar with this "
            "state directory (it reconciles) or use the state directory that tiered them",
            where=info.key,
        )


async def _record_one(
    queue: QueuePath, row: QueueRow, hot_min: int, *, backend: Backend, lease: Lease, clock: Clock
) -> LossRecord:
    """Write the record of ``[cold_commit, hot_min)``, or adopt the one already there."""
    record = LossRecord.new(
        queue,
        row.cold_commit,
        hot_min,
        accepted_at_ms=clock.now_ms(),
        writer_id=lease.owner,
        lease_epoch=lease.epoch,
    )
    await _no_segment_inside(backend, queue, row.cold_commit, hot_min)
    await hold_lease(lease)
    stored = await write_loss_record(backend, record)
    if stored.end_offset > hot_min:
        raise CatalogueError(
            f"a loss record in cold already covers [{stored.start_offset}, "
            f"{stored.end_offset}), past the hot min offset {hot_min}: the hot store went "
            "backwards; check it before resuming",
            where=stored.key,
        )
    if stored != record:
        log.info("adopting the loss record an earlier resume wrote: %s", stored.describe())
    return stored
