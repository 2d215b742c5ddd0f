"""Committing one round's small segments as ONE batch object under the lease.

With ``tiering.batching`` on, the segments of a round that were cut by age (their queue's
segment is not full when ``segment_max_age`` passes) are not uploaded as three objects
each: their COMMIT_LOG and CONSUME_QUEUE bytes go, queue by queue, into one batch object
for the broker (:mod:`tieredstore.cold.batch`), committed by **one** create at the next
batch sequence. The batch is the commit point of every slice in it: it exists whole or
not at all. The catalogue then records every slice in one transaction
(:meth:`~tieredstore.metadata.slice_table.SliceTable.commit_batch`).

Sequences and fencing. :meth:`BatchWriter.start` (after the lease is taken, before the
catalogue is reconciled) lists ``_batches/`` and creates a :class:`BatchFence` of this
writer's epoch at the next free sequence, again one higher each time that key is taken
first. A writer of an older epoch, paused with its next sequence in hand, can only ever
create a sequence at or below the fence, and every such key is taken: its create fails,
it reads a fence or a batch of a newer epoch, and stops (:class:`LeaseLostError`). Every
batch it did create is listed before the fence, so the reconcile that follows adopts it.

The manifest gate. A slice takes no manifest key, and the reading rule prefers a segment
to a slice over the same offsets; so a writer of an older epoch frozen inside its
manifest create at offset S could land a segment over the slices a successor committed
from S. Before a queue's first slice in this process, the writer takes the manifest key
of the slice's start for its own epoch (a fence marker:
:func:`~tieredstore.dispatcher.tiering.cold_writer.gate_start`): the frozen create then finds the
key taken, reads a newer epoch and stops as fenced. Only the first slice needs it: the
older writer's create can only be at the queue's frontier as it was committed when this
writer took over, and its later creates need that one to land; and a writer of lease
epoch 1 needs none (no older writer exists). So the gate costs one
create per queue per start of the sidecar, never per round. If a manifest landed there
first, it is adopted (as a segment's manifest create that finds another is) and the
queue is planned again from past it.

A create that finds its key taken reads it (:meth:`BatchWriter._taken`): the very same
bytes are ours (a retry after a lost reply: committed); a fence or batch of a newer epoch
fences this writer; anything else (a sequence this writer wrongly believed free) makes it
list again and take the next sequence, a few times at most.

What goes in is checked first, as for a segment: continuity with cold (else the queue
turns DIVERGED) and the built segment end to end
(:func:`~tieredstore.dispatcher.tiering.committer.check_built`; else the queue stops). A batch holds
at most :data:`BATCH_MAX_BYTES` of data, each queue's part at most
:data:`BATCH_ITEM_MAX_BYTES`; what does not fit, a larger segment, and every segment cut
by size or count, is committed as a per-queue segment as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from tieredstore.cold.batch import (
    BatchHead,
    SlicePart,
    build_batch,
)
from tieredstore.cold.history import Committed, slices_of
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.dispatcher.shared_state import SharedState
from tieredstore.dispatcher.tiering.batch.damage import handle_damage
from tieredstore.dispatcher.tiering.batch.sequence import MAX_RESEQUENCE, BatchKeys
from tieredstore.dispatcher.tiering.cold_writer import gate_start
from tieredstore.dispatcher.tiering.commitlog_pass import Spooled
from tieredstore.dispatcher.tiering.committer import CommitKind, SegmentCommitter, check_built
from tieredstore.dispatcher.tiering.planner import CutReason, Limits, SegmentPlan
from tieredstore.errors import (
    CatalogueError,
    ConditionFailedError,
    CorruptDataError,
    DamagedObjectError,
    StoreError,
    TieredStoreError,
)
from tieredstore.formats.consumequeue import encode_units, make_units
from tieredstore.hot.store import QueueKey
from tieredstore.mapped import mapped_view
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueRow
from tieredstore.settings.loader import TieringSettings

__all__ = [
    "BATCH_EVERY",
    "BATCH_ITEM_MAX_BYTES",
    "BATCH_MAX_BYTES",
    "BatchItem",
    "BatchOutcome",
    "BatchWriter",
    "Gathered",
    "batchable",
    "round_limits",
    "split_round",
]

log = logging.getLogger(__name__)

#: Data bytes one batch object holds at most (it is built in memory).
BATCH_MAX_BYTES: Final = 16 << 20
#: A segment larger than this is written per queue even when cut by age: its three
#: objects cost little beside its data, and batches stay small in memory (a catch-up of
#: 128 queues of 16 MiB through batches took twice as long, at twice the peak RSS).
BATCH_ITEM_MAX_BYTES: Final = 1 << 20
_BY_AGE: Final = frozenset({CutReason.AGE, CutReason.FLUSH})


#: One item's outcome (:meth:`BatchWriter.commit`).
BatchOutcome = QueueRow | CommitKind | TieredStoreError


def batchable(plan: SegmentPlan) -> bool:
    """Whether ``plan`` may go in a batch: cut by age (or a flush), not by size or count,
    and small enough to share an object."""
    return plan.reason in _BY_AGE and plan.nbytes <= BATCH_ITEM_MAX_BYTES


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One queue's gathered segment for the batch: its row, plan and spool file."""

    row: QueueRow
    plan: SegmentPlan
    spooled: Spooled


#: Batching on: segments are cut by age (into one batch object) every this many ticks.
BATCH_EVERY: Final = 2
#: A planned segment as the pass left it: its row, plan, and spool file or error.
Gathered = tuple[QueueRow, SegmentPlan, Spooled | TieredStoreError]


def round_limits(tiering: TieringSettings, ticks: int) -> Limits:
    """The group-commit limits of tick number ``ticks``. Batching on
    (``tiering.batching``), segments are cut by age only every
    :data:`BATCH_EVERY` ticks, each time with what falls due before the next such tick
    (the age limit less ``BATCH_EVERY - 1`` ticks): one batch object per
    ``BATCH_EVERY`` ticks, and no message waits longer than ``segment_max_age``."""
    limits = Limits.of(tiering)
    if not tiering.batching:
        return limits
    if ticks % BATCH_EVERY:
        return replace(limits, age_cuts=False)
    lead_ms = int(tiering.tick_interval * 1000) * (BATCH_EVERY - 1)
    return replace(limits, max_age_ms=max(limits.max_age_ms - lead_ms, 0))


def split_round(
    planned: Sequence[tuple[QueueRow, SegmentPlan]],
    gathered: Sequence[Spooled | TieredStoreError],
    *,
    batching: bool,
) -> tuple[list[list[BatchItem]], list[Gathered]]:
    """A round's batch objects (``batching``: the segments cut by age, small and gathered
    whole, :data:`BATCH_MAX_BYTES` of data in each; a round of trickling queues makes
    one) and the segments committed per queue, in order."""
    batches: list[list[BatchItem]] = []
    single: list[Gathered] = []
    room = 0
    for (row, plan), spooled in zip(planned, gathered, strict=True):
        if not (batching and isinstance(spooled, Spooled) and batchable(plan)):
            single.append((row, plan, spooled))
            continue
        if not batches or plan.nbytes > room:
            batches.append([])
            room = BATCH_MAX_BYTES
        room -= plan.nbytes
        batches[-1].append(BatchItem(row, plan, spooled))
    return batches, single


class BatchWriter:
    """Writes batch objects for one broker (module docstring); one at a time."""

    def __init__(
        self,
        *,
        keys: BatchKeys,
        catalogue: Catalogue,
        committer: SegmentCommitter,
        states: SharedState,
        metrics: Metrics,
    ) -> None:
        self.keys = keys  # the broker's batch keys, under the lease; shared (assembly)
        self.catalogue = catalogue
        self.committer = committer
        self.states = states
        self.metrics = metrics
        self.continuity = committer.writer.continuity
        self._next: int | None = None  # the next sequence to create; None before start
        self._gated: set[QueueKey] = set()  # queues whose frontier this process gated
        self._lock = asyncio.Lock()
        self.batches = 0  # batch objects this writer committed

    # -- start: the fence ------------------------------------------------------------
    async def start(self) -> int:
        """Fence every older writer's batches (module docstring); return the fence's
        sequence. Raises LeaseLostError if a newer writer fenced this one first."""
        fence = await self.keys.fence()
        self._next = fence.sequence + 1
        self._gated.clear()
        return fence.sequence

    # -- commit ----------------------------------------------------------------------
    async def commit(self, items: Sequence[BatchItem]) -> list[BatchOutcome]:
        """Commit ``items`` in one batch object; per item, in order: the queue's row after
        it; :attr:`CommitKind.DIVERGED` or :attr:`CommitKind.STOPPED` if it failed its
        checks (nothing of it is in the batch); or the error that kept it out (the
        catalogue refused it; it is planned again; a
        :class:`~tieredstore.errors.DamagedObjectError`: its continuity check found a
        damaged batch object, for the caller to handle).

        Raises:
            LeaseLostError: the lease is lost, or a newer writer fenced this sequence.
            TieredStoreError: the batch could not be written (nothing of it counts).
        """
        async with self._lock:
            if self._next is None:  # batching turned on by a reload: fence now
                await self.start()
            out: list[BatchOutcome] = [await self._admit(item) for item in items]
            kept = [i for i, outcome in enumerate(out) if outcome is CommitKind.COMMITTED]
            if not kept:
                return out
            parts = await asyncio.to_thread(_parts, [items[i] for i in kept])
            head = await self._publish(parts)
            links = slices_of(head)
            rows = await self._record(links)
            by_queue = {(c.topic, c.queue_id): row for c, row in zip(links, rows, strict=True)}
            for i, part in zip(kept, parts, strict=True):
                out[i] = outcome = by_queue[(part.topic, part.queue_id)]
                if isinstance(outcome, QueueRow):  # its last record, for the next check
                    last = int(items[i].plan.units["size"][-1])
                    self.continuity.remember(
                        QueueKey(part.topic, part.queue_id),
                        part.end_offset - 1,
                        memoryview(part.commit_log)[-last:],
                    )
            return out

    async def damaged(self, found: Sequence[DamagedObjectError]) -> set[QueueKey]:
        """The damaged batch objects a round ``found``, made loud and healed for every
        queue each held (:func:`~tieredstore.dispatcher.tiering.batch.damage.handle_damage`);
        returns those queues, whose rows are stale now."""
        writer = self.committer.writer
        return await handle_damage(
            found, writer=writer, keys=self.keys, states=self.states, metrics=self.metrics
        )

    async def _admit(self, item: BatchItem) -> CommitKind | DamagedObjectError:
        """The checks a segment passes before upload: COMMITTED if it passes them, else
        DIVERGED or STOPPED (the queue is turned so), or the damage the continuity check
        found in a batch object (the caller's to handle: it is many queues')."""
        row = item.row
        try:
            continues = await self.continuity.ok(row)
        except DamagedObjectError as exc:
            return exc
        if not continues:
            why = "hot record before the next segment differs from cold"
            await self.committer.diverge(row, why)
            return CommitKind.DIVERGED
        try:
            await asyncio.to_thread(check_built, item.plan, item.spooled, row.cold_cl_end)
        except CorruptDataError as exc:
            self.committer.stop_inconsistent(row, exc)
            return CommitKind.STOPPED
        return await self._gate(row, item.plan.start)

    async def _gate(self, row: QueueRow, start: int) -> CommitKind:
        """The manifest gate of a queue's first slice in this process (module
        docstring): COMMITTED once the key of ``start`` is this epoch's; ADOPTED when a
        stale writer's manifest landed there first (adopted, or quarantined if hot
        disagrees; the queue is planned again from its new row)."""
        queue = QueueKey(row.topic, row.queue_id)
        lease = self.keys.lease
        if queue in self._gated or lease.epoch <= 1:  # epoch 1: no older writer exists
            return CommitKind.COMMITTED
        writer = self.committer.writer
        landed = await gate_start(
            writer, writer.queue_path(row.topic, row.queue_id), start,
            lease_epoch=lease.epoch, check=lease.check,
        )  # fmt: skip
        if landed is not None:
            await self.committer.adopt_ahead(row, landed)
            return CommitKind.ADOPTED
        self._gated.add(queue)
        return CommitKind.COMMITTED

    async def _publish(self, parts: list[SlicePart]) -> BatchHead:
        """Create the batch at the next free sequence; return its head."""
        assert self._next is not None
        keys, lease = self.keys, self.keys.lease
        for _ in range(MAX_RESEQUENCE):
            sequence = self._next
            index, data = await asyncio.to_thread(
                build_batch,
                cluster=keys.cluster, broker=keys.broker, sequence=sequence,
                writer_id=lease.owner, lease_epoch=lease.epoch,
                created_at_ms=keys.clock.now_ms(), parts=parts,
                frames=self.committer.writer.frames,
            )  # fmt: skip
            try:
                await self.keys.create(index.key, data)
            except ConditionFailedError:
                if not await self.keys.taken(index.key, data):
                    self._next = await self.keys.listed_next()
                    continue
            self._next = sequence + 1
            self.batches += 1
            self.metrics.batches_committed.inc()
            # The data section ends the object (encode_batch): its head, without parsing.
            at = len(data) - index.stored_size
            return BatchHead(index, data_offset=at, object_size=len(data))
        raise StoreError(
            f"batch keys kept being taken ({MAX_RESEQUENCE} tries); nothing committed",
            where=self.keys.prefix,
        )

    async def _record(self, links: list[Committed]) -> list[QueueRow | TieredStoreError]:
        """The catalogue's commit of every slice, in one transaction (under the lock)."""
        async with self.states.lock:
            outcomes = await asyncio.to_thread(self.catalogue.slices.commit_batch, links)
        out: list[QueueRow | TieredStoreError] = []
        for outcome in outcomes:
            if isinstance(outcome, CatalogueError):
                log.error("batch slice not recorded: %s", outcome)
                out.append(outcome)
            else:
                out.append(outcome[1])
        return out


def _parts(items: Sequence[BatchItem]) -> list[SlicePart]:
    """Each item's slice: its spooled COMMIT_LOG bytes and the CONSUME_QUEUE units over
    them (blocking: maps the spool files). Each part's bytes are a read-only map of its
    spool file, so the batch is built by one copy of them, straight from the page cache."""
    return [_part(item, _spool_view(item.spooled)) for item in items]


def _spool_view(spooled: Spooled) -> memoryview:
    """The spool file's bytes, mapped; StoreError if it holds more or fewer than
    gathered. The map lasts as long as a view of it does."""
    try:
        view = mapped_view(spooled.path)
    except OSError as exc:
        raise StoreError(f"cannot map the spool file: {exc}", where=str(spooled.path)) from exc
    if len(view) != spooled.size:
        raise StoreError(
            f"spool file holds {len(view)} bytes, {spooled.size} were gathered",
            where=str(spooled.path),
        )
    return view


def _part(item: BatchItem, commit_log: memoryview) -> SlicePart:
    plan, row = item.plan, item.row
    sizes = plan.units["size"].astype(np.int64)
    cold = row.cold_cl_end + np.cumsum(sizes) - sizes
    consume_queue = encode_units(make_units(cold, sizes, plan.units["tags_code"]))
    return SlicePart(
        topic=row.topic, queue_id=row.queue_id, start_offset=plan.start, end_offset=plan.end,
        cl_base=row.cold_cl_end, commit_log=commit_log, consume_queue=consume_queue,
        min_store_timestamp=item.spooled.min_store_timestamp,
        max_store_timestamp=item.spooled.max_store_timestamp,
    )  # fmt: skip
