"""Committing one gathered segment, and stopping a queue that cannot go on.

Per segment: plan → make its records durable (the ``sync`` guard,
:mod:`tieredstore.dispatcher.tiering.durability`) → gather (the pass,
:mod:`tieredstore.dispatcher.tiering.commitlog_pass`) → check
continuity → check the built segment end to end (:func:`check_built`) → upload
COMMIT_LOG from the spool → upload CONSUME_QUEUE (data objects under names unique to
the attempt; the lease is checked before every chunk) → check the
lease → *create* the MANIFEST (the commit point; never replaced) → advance the catalogue
(segments committing at about the same time share one transaction,
:mod:`tieredstore.dispatcher.tiering.group_commit`).
A crash anywhere is safe: uncommitted objects are never read (GC collects them), and on
start the catalogue adopts manifests it had not recorded yet. A manifest create that
finds one already there adopts it; one of a newer epoch fences this writer.

A queue whose hot store no longer matches cold turns DIVERGED; one whose untiered
records the broker deleted turns PAUSED. Both stop only that queue.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import mmap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tieredstore.cold.segment import RecordHeads
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.dispatcher.shared_state import SharedState
from tieredstore.dispatcher.tiering.adoption import adopt_or_quarantine
from tieredstore.dispatcher.tiering.cold_writer import ColdWriter, ManifestOutcome
from tieredstore.dispatcher.tiering.commitlog_pass import Spooled
from tieredstore.dispatcher.tiering.group_commit import GroupCommit
from tieredstore.dispatcher.tiering.planner import HotDataLost, SegmentPlan
from tieredstore.errors import (
    CorruptDataError,
    CorruptRecordError,
    CorruptUnitError,
    StoreError,
    TieredStoreError,
)
from tieredstore.formats.vector import store_timestamps
from tieredstore.hot.store import QueueKey
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueRow, QueueState

__all__ = ["CommitKind", "CommitResult", "SegmentCommitter", "check_built"]

log = logging.getLogger(__name__)

I64 = npt.NDArray[np.int64]


class CommitKind(enum.Enum):
    COMMITTED = "committed"  # uploaded and committed by this writer
    ADOPTED = "adopted"  # already committed in cold; the catalogue caught up instead
    DIVERGED = "diverged"  # the hot store no longer matches cold: nothing written
    STOPPED = "stopped"  # a newer-format manifest at the frontier, or an inconsistent
    # hot store (a record against its unit, a built segment): nothing committed


@dataclass(frozen=True, slots=True)
class CommitResult:
    kind: CommitKind
    row: QueueRow


class SegmentCommitter:
    """Commits gathered segments and stops queues (DIVERGED, PAUSED) in the catalogue.

    Its catalogue writes hold ``states.lock`` (also held by the dispatcher's jobs); the
    queues it stops go to ``states`` (:meth:`SharedState.stop_queue`), which discovery
    reads.
    """

    def __init__(
        self,
        *,
        catalogue: Catalogue,
        lease: Lease,
        writer: ColdWriter,
        metrics: Metrics,
        states: SharedState,
    ) -> None:
        self.catalogue = catalogue
        self.lease = lease
        self.writer = writer
        self.metrics = metrics
        self.states = states
        self._group = GroupCommit(catalogue, states.lock)

    async def commit(self, row: QueueRow, plan: SegmentPlan, spooled: Spooled) -> CommitResult:
        """Upload and commit one planned segment; return the queue's new row.

        Steps: check continuity with cold → upload COMMIT_LOG and CONSUME_QUEUE under
        fresh names → check the lease → create MANIFEST → catalogue. If a manifest is
        already at this start (the catalogue is behind the cold store, or another
        writer won), it is adopted instead; ours is never written over it.
        """
        if not await self.writer.continuity.ok(row):
            await self.diverge(row, "hot record before the next segment differs from cold")
            return CommitResult(CommitKind.DIVERGED, row)
        try:
            await asyncio.to_thread(check_built, plan, spooled, row.cold_cl_end)
        except CorruptDataError as exc:
            self.stop_inconsistent(row, exc)
            return CommitResult(CommitKind.STOPPED, row)
        self.lease.check()
        manifest = await self.writer.write_segment(
            plan, spooled, row, self.lease.epoch, check=self.lease.check
        )
        self.lease.check()
        outcome = await self.writer.create_manifest(manifest, check=self.lease.check)
        if outcome is ManifestOutcome.CREATED:
            fresh = await self._group.commit(manifest)
            last = int(plan.units["size"][-1])  # its last record, for the next check
            tail = await asyncio.to_thread(_tail, spooled, last)
            self.writer.continuity.remember(plan.queue, plan.end - 1, tail)
            return CommitResult(CommitKind.COMMITTED, fresh)
        await self.writer.discard(manifest)
        if outcome is ManifestOutcome.UNREADABLE:
            self.stop_unreadable(row, manifest.key)
            return CommitResult(CommitKind.STOPPED, row)
        return CommitResult(CommitKind.ADOPTED, await self.adopt_ahead(row, manifest.key))

    async def adopt_ahead(self, row: QueueRow, key: str) -> QueueRow:
        """The cold store already holds a manifest at ``key``: adopt it if its objects
        are whole and agree with the hot store, else quarantine it; never overwrite it.

        Returns the queue's row to go on with: past the adopted segment, or unchanged
        after a quarantine (the next round commits this writer's own segment there).
        """
        return await adopt_or_quarantine(
            key,
            row=row,
            catalogue=self.catalogue,
            writer=self.writer,
            hot=self.writer.hot,
            lease=self.lease,
            lock=self.states.lock,
        )

    def stop_unreadable(self, row: QueueRow, key: str) -> None:
        """Stop tiering the queue: cold holds a manifest of a newer format at ``key``."""
        log.error(
            "queue %s/%d STOPPED: %s holds a manifest of a newer format than this "
            "tieredstore reads (a newer sidecar wrote it); nothing more is uploaded for "
            "this queue until the sidecar is upgraded",
            row.topic, row.queue_id, key,
        )  # fmt: skip
        self._stop(row, f"newer-format manifest at {key}", "UnsupportedFormatError")

    def stop_inconsistent(self, row: QueueRow, error: TieredStoreError) -> None:
        """Stop tiering the queue: a hot record disagrees with its consume-queue unit,
        or a built segment failed its check (``error`` names the offset). Nothing of
        the segment was committed; the other queues go on."""
        log.error(
            "queue %s/%d STOPPED: %s; nothing of it was committed and nothing more is "
            "tiered for this queue until the sidecar restarts (check the broker's store)",
            row.topic, row.queue_id, error,
        )  # fmt: skip
        self._stop(row, f"inconsistent hot store: {error}", type(error).__name__)

    def _stop(self, row: QueueRow, reason: str, error_kind: str) -> None:
        self.states.stop_queue(QueueKey(row.topic, row.queue_id), reason)
        self.metrics.set_queue_state(row.topic, row.queue_id, QueueState.STOPPED)
        self.metrics.errors.labels(error_kind).inc()

    async def diverge(self, row: QueueRow, why: str) -> None:
        """Turn the queue DIVERGED (cold untouched); tiering of it stops until repair."""
        log.error(
            "queue %s/%d DIVERGED: %s; tiering of it stops until `tieredstore repair "
            "--topic %s --queue %d`",
            row.topic, row.queue_id, why, row.topic, row.queue_id,
        )  # fmt: skip
        self.states.mark_reminded(QueueKey(row.topic, row.queue_id), QueueState.DIVERGED)
        async with self.states.lock:
            self.catalogue.queues.set_state(row.topic, row.queue_id, QueueState.DIVERGED)
        self.metrics.set_queue_state(row.topic, row.queue_id, QueueState.DIVERGED)
        self.metrics.errors.labels("DivergedError").inc()

    def hot_data_lost(self, lost: HotDataLost) -> None:
        """Turn the queue PAUSED: the broker deleted records before they were tiered."""
        log.error(
            "queue %s: the broker deleted offsets [%d, %d) before they were tiered "
            "(%d messages lost to cold); queue PAUSED, tiering of it stops until "
            "`tieredstore resume --topic %s --queue %d --accept-loss` records the loss",
            lost.queue,
            lost.start,
            lost.end,
            lost.end - lost.start,
            lost.queue.topic,
            lost.queue.queue_id,
        )
        self.states.mark_reminded(lost.queue, QueueState.PAUSED)
        self.metrics.hot_data_lost.labels(lost.queue.topic, str(lost.queue.queue_id)).inc(
            lost.end - lost.start
        )
        self.catalogue.queues.set_state(lost.queue.topic, lost.queue.queue_id, QueueState.PAUSED)
        self.metrics.set_queue_state(lost.queue.topic, lost.queue.queue_id, QueueState.PAUSED)


# -- the built segment, checked end to end before upload ---------------------------
#
# The end-to-end check of one built segment, before anything of it is uploaded.
#
# The commitlog pass checked every record as it gathered it; this check looks at the
# result whole, as a reader of cold will: the spooled COMMIT_LOG bytes against the units
# the CONSUME_QUEUE object will be made of (:func:`check_built`). It proves that
#
# * the plan's counts agree: ``end - start`` units, as many as the manifest will say;
# * the spool file is exactly the units' sizes long, records back to back from ``cl_base``
#   (the cold offsets the CONSUME_QUEUE object will hold);
# * each record there is the one its unit names (:class:`~tieredstore.cold.segment.RecordHeads`:
#   size, magic, queue offset ``start + i``, and physicalOffset rewritten to its cold
#   offset);
# * the store-time range the manifest will record is the records' own.
#
# A failure is a :class:`~tieredstore.errors.CorruptRecordError` (or CorruptUnitError)
# naming the queue offset; the caller stops the queue and commits nothing.


def _tail(spooled: Spooled, size: int) -> bytes:
    """The last ``size`` bytes of the spool file (blocking)."""
    with spooled.path.open("rb") as f:
        f.seek(spooled.size - size)
        return f.read(size)


def check_built(plan: SegmentPlan, spooled: Spooled, cl_base: int) -> None:
    """Check the spooled segment of ``plan`` at cold commitlog ``cl_base`` (module doc).

    Blocking (reads the spool file; run it in a thread). Raises CorruptUnitError or
    CorruptRecordError, naming ``plan.queue`` and the first queue offset at fault.
    """
    where = f"built segment [{plan.start}, {plan.end}) of {plan.queue}"
    sizes = plan.units["size"].astype(np.int64)
    count = int(sizes.shape[0])
    if count != plan.count:
        raise CorruptUnitError(f"{count} units for {plan.count} offsets", where=where)
    total = int(sizes.sum())
    if total != spooled.size or total != plan.nbytes:
        raise CorruptUnitError(
            f"units cover {total} bytes, the spooled commit log has {spooled.size}",
            where=where,
        )
    try:
        low, high = _check_records(plan, spooled, cl_base, where)
    except OSError as exc:
        raise StoreError(f"cannot read the spooled segment: {exc}", where=where) from exc
    if (low, high) != (spooled.min_store_timestamp, spooled.max_store_timestamp):
        raise CorruptRecordError(
            f"store times [{low}, {high}] differ from the gathered range "
            f"[{spooled.min_store_timestamp}, {spooled.max_store_timestamp}]",
            where=where,
        )


def _check_records(
    plan: SegmentPlan, spooled: Spooled, cl_base: int, where: str
) -> tuple[int, int]:
    """Check each spooled record against its unit; return the store-time range."""
    sizes = plan.units["size"].astype(np.int64)
    rel = np.cumsum(sizes) - sizes
    with _mapped(spooled.path, spooled.size) as data:
        heads, stamps = _read_heads(data, plan.start, rel, sizes, cl_base)
    bad = heads.first_bad()
    if bad is not None:
        raise CorruptRecordError(
            f"record of queue offset {plan.start + bad}: {heads.fault(bad)}", where=where
        )
    return int(stamps.min()), int(stamps.max())


def _read_heads(
    data: mmap.mmap, start: int, rel: I64, sizes: I64, cl_base: int
) -> tuple[RecordHeads, I64]:
    """The records' head check and store times (copies: no view of ``data`` is kept,
    so the map can close)."""
    arr = np.frombuffer(data, dtype=np.uint8)
    offsets = start + np.arange(sizes.shape[0], dtype=np.int64)
    return RecordHeads.check(arr, rel, sizes, offsets, cl_base + rel), store_timestamps(arr, rel)


class _mapped:  # noqa: N801 - used like a function: ``with _mapped(path, size) as data``
    """A read-only map of the first ``size`` bytes of ``path``, closed on exit."""

    def __init__(self, path: Path, size: int) -> None:
        self._file = path.open("rb")
        self._map = mmap.mmap(self._file.fileno(), size, access=mmap.ACCESS_READ)

    def __enter__(self) -> mmap.mmap:
        return self._map

    def __exit__(self, *_exc: object) -> None:
        try:
            self._map.close()
        finally:
            self._file.close()
