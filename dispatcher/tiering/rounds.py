"""Tiering in rounds: plan many queues, guard, one commitlog pass, commit each.

A round plans one segment per queue still going (the group-commit rules, up to about
``PASS_MAX_RECORDS`` records in all), makes the planned records durable (the guard,
:mod:`tieredstore.dispatcher.tiering.durability`), reads their records with **one commitlog-order
pass** (:mod:`tieredstore.dispatcher.tiering.commitlog_pass`: sequential windows, checked, rewritten
and hashed in bulk,
spooled per segment), then commits the segments (:mod:`tieredstore.dispatcher.tiering.committer`),
``tiering.concurrency`` at once. With ``tiering.batching`` on, the round's segments cut by
age go instead into one batch object (:mod:`tieredstore.dispatcher.tiering.batch.writer`), and age
cuts happen every ``BATCH_EVERY`` ticks only, each taking what falls due before the
next (:func:`~tieredstore.dispatcher.tiering.batch.writer.round_limits`). Planning also refreshes
each queue's lag and retention headroom gauges from the hot store and catalogue alone
(:mod:`tieredstore.dispatcher.tiering.lag_gauges`), so they stay current while the cold store is
down.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Final

from tieredstore.clock import Clock
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.dispatcher.retention_pressure import HotOldest, hot_oldest
from tieredstore.dispatcher.shared_state import SharedState
from tieredstore.dispatcher.tiering.batch.writer import (
    BatchItem,
    BatchWriter,
    round_limits,
    split_round,
)
from tieredstore.dispatcher.tiering.commitlog_pass import GatherJob, Spooled, gather_segments
from tieredstore.dispatcher.tiering.committer import CommitKind, SegmentCommitter
from tieredstore.dispatcher.tiering.durability import DurabilityGuard
from tieredstore.dispatcher.tiering.lag_gauges import set_lag
from tieredstore.dispatcher.tiering.planner import (
    HotDataLost,
    SegmentPlan,
    Wait,
    WaitReason,
    plan_segment,
    units_unchanged,
)
from tieredstore.dispatcher.tiering.spool_room import RoundBudget, spool_room
from tieredstore.dispatcher.tiering.tick_report import TickReport, record_error
from tieredstore.dispatcher.tiering.uploader import encoding_ahead
from tieredstore.errors import (
    CorruptRecordError,
    DamagedObjectError,
    DivergedError,
    SpoolTooSmallError,
    StoreError,
    TieredStoreError,
)
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.metadata.rows import QueueRow
from tieredstore.settings.in_force import SettingsInForce

__all__ = ["PASS_MAX_RECORDS", "PASS_WINDOW_BYTES", "OnCommitted", "Rounds"]

#: Observes each commit: ``(plan, sliced)``, ``sliced`` when the plan's segment went into
#: a batch object as a slice rather than into a segment of its own.
OnCommitted = Callable[[SegmentPlan, bool], None]

#: Commitlog bytes read per window by the tiering pass
#: (:mod:`tieredstore.dispatcher.tiering.commitlog_pass`).
PASS_WINDOW_BYTES: Final = 2 << 20
#: Records planned per round at most (bounds the unit arrays' memory).
PASS_MAX_RECORDS: Final = 1 << 20


def _cl_end(planned: tuple[QueueRow, SegmentPlan]) -> int:
    return planned[1].cl_end


def _recheck_units(
    hot: HotStore,
    planned: Sequence[tuple[QueueRow, SegmentPlan]],
    gathered: Sequence[Spooled | TieredStoreError],
) -> list[Spooled | TieredStoreError]:
    """Read each gathered segment's consume-queue units again, after the pass (blocking;
    one thread hop for the round). A segment planned on a unit the broker was still
    writing (:func:`~tieredstore.dispatcher.tiering.planner.units_unchanged`) gets a StoreError in
    place of its spool: it is not committed, and planned again next tick."""
    return [
        _recheck(hot, plan, spooled) for (_, plan), spooled in zip(planned, gathered, strict=True)
    ]


def _recheck(
    hot: HotStore, plan: SegmentPlan, spooled: Spooled | TieredStoreError
) -> Spooled | TieredStoreError:
    """The gathered segment, or its error; a record that disagreed with a unit the broker
    was still writing is no inconsistency (the segment is planned again)."""
    if isinstance(spooled, TieredStoreError) and not isinstance(spooled, CorruptRecordError):
        return spooled
    try:
        if units_unchanged(hot, plan):
            return spooled  # a CorruptRecordError stands: the queue stops
    except TieredStoreError as exc:
        return exc
    return StoreError(
        f"consume-queue units [{plan.start}, {plan.end}) changed while they were tiered "
        "(read while the broker was writing them); planned again next tick",
        where=str(plan.queue),
    )


@contextlib.asynccontextmanager
async def _spool(root: Path | None) -> AsyncIterator[Path]:
    """A fresh spool directory for one round under ``root``, removed (with its files)
    afterwards; made and removed in a thread (a round may leave a thousand files)."""
    directory = Path(await asyncio.to_thread(_new_spool, root))
    try:
        yield directory
    finally:
        await asyncio.to_thread(shutil.rmtree, directory, True)


def _new_spool(root: Path | None) -> str:
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
    return tempfile.mkdtemp(dir=root, prefix="round-")


def _going(
    outcomes: Sequence[object],
    report: TickReport,
    metrics: Metrics,
    damage: list[DamagedObjectError],
) -> list[QueueRow]:
    """The rows a round's commits (``outcomes``: rows, lists of rows, None or errors)
    leave to go on with; errors recorded, damaged batch objects put in ``damage``."""
    going: list[QueueRow] = []
    for outcome in outcomes:
        if isinstance(outcome, DamagedObjectError):
            damage.append(outcome)
        elif isinstance(outcome, BaseException):
            record_error(outcome, report, metrics)
        elif isinstance(outcome, list):
            going.extend(outcome)
        elif isinstance(outcome, QueueRow):
            going.append(outcome)
    return going


class Rounds:
    """Tiers queues in rounds until the rules say wait (see the module docstring), reading
    ``in_force.tiering`` at each use (the semaphore keeps its ``concurrency``); spools go in
    ``spool_dir`` (None: the temp dir); no round starts once ``states.stopping`` is set."""

    def __init__(
        self,
        *,
        hot: HotStore,
        clock: Clock,
        metrics: Metrics,
        in_force: SettingsInForce,
        spool_dir: Path | None = None,
        guard: DurabilityGuard,
        committer: SegmentCommitter,
        states: SharedState,
        batcher: BatchWriter,
        on_segment: OnCommitted | None = None,
    ) -> None:
        self.hot = hot
        self.clock = clock
        self.metrics = metrics
        self.in_force = in_force
        self.spool_dir = spool_dir
        self.guard = guard
        self.committer = committer
        self.on_segment = on_segment
        self.states = states
        self.batcher = batcher  # with tiering.batching on, small segments share one object
        self._sem = asyncio.Semaphore(in_force.tiering.concurrency)
        self.in_flight = 0  # segments of the round under way not yet committed: a stop waits
        self.committed = TickReport()  # every commit ever: counts an abandoned tick's too
        self._oldest: HotOldest | None = None  # the broker's oldest file, this tick
        self._ticks = 0  # ticks begun (batching on, age cuts happen every other one)
        self._damage: list[DamagedObjectError] = []  # damaged batch objects this round found

    async def new_tick(self) -> None:
        """Read what a tick's rounds share: the broker's oldest file (for headroom), a fresh
        sync round, the guard mode in force (a gauge) and the broker group's limit."""
        self._ticks += 1
        self._oldest = await asyncio.to_thread(hot_oldest, self.hot)
        await self.guard.new_tick()
        self.metrics.set_guard_mode(self.guard.mode(self.in_force.tiering.guard).value)

    def clear_spool(self) -> None:
        """Remove spool directories a crashed run left (they are never read again)."""
        root = self.spool_dir
        if root is None or not root.is_dir():
            return
        for stale in root.glob("round-*"):
            shutil.rmtree(stale, ignore_errors=True)

    async def tier_queues(self, rows: Sequence[QueueRow], *, flush: bool) -> TickReport:
        """Tier ready segments of many queues, in rounds, until the rules say wait.

        A queue whose segment was adopted, or committed with more pending behind it
        when it was planned, goes on to the next round; one whose segment reached the
        hot max it was planned against is done for this call (what arrived since waits
        for the next tick: planning every queue again only to find most idle cost as
        much as a round); one that waits, lost data, diverged or failed stops (a
        failure is recorded; the next tick tries again).
        """
        report = TickReport()
        todo = list(rows)
        while todo and not self.states.stopping.is_set():
            planned, later = await self._plan_round(todo, flush, report)
            if planned and not await self.guard.make_durable(
                self.in_force.tiering.guard, max(planned, key=_cl_end)[1].cl_end
            ):
                continue  # fdatasync refused: plan again under the checkpoint rule
            todo = later + await self._run_round(planned, report)
        return report

    async def _plan_round(
        self, rows: Sequence[QueueRow], flush: bool, report: TickReport
    ) -> tuple[list[tuple[QueueRow, SegmentPlan]], list[QueueRow]]:
        """Plan the next segment of each row, up to the round's size; return the plans
        and the rows left for a later round. Waits, losses and divergence are handled
        (and reported) here; a queue whose planning failed is recorded and dropped."""
        tiering = self.in_force.tiering  # one round, one set of settings
        guard = await asyncio.to_thread(self.guard.guard_ts, tiering.guard)
        room = await asyncio.to_thread(spool_room, self.spool_dir, tiering.spool_max_bytes)
        budget = RoundBudget(PASS_MAX_RECORDS, room, encoded=self.committer.writer.frames)
        outcomes = await asyncio.to_thread(self._plan_rows, rows, flush, guard, budget)
        self.metrics.spool_too_small.set(any(isinstance(o, SpoolTooSmallError) for o in outcomes))
        planned: list[tuple[QueueRow, SegmentPlan]] = []
        for row, outcome in zip(rows, outcomes, strict=False):
            key = QueueKey(row.topic, row.queue_id)
            if isinstance(outcome, DivergedError):
                await self.committer.diverge(row, str(outcome))
                report.diverged.append(key)
            elif isinstance(outcome, Exception):
                record_error(outcome, report, self.metrics)
            else:
                set_lag(self.metrics, self.clock, self._oldest, row, outcome)
                if isinstance(outcome, HotDataLost):
                    self.committer.hot_data_lost(outcome)
                    report.lost.append(outcome)
                elif isinstance(outcome, SegmentPlan):
                    planned.append((row, outcome))
        return planned, list(rows[len(outcomes) :])

    def _plan_rows(
        self, rows: Sequence[QueueRow], flush: bool, guard: int | None, budget: RoundBudget
    ) -> list[SegmentPlan | Wait | HotDataLost | Exception]:
        """Plan rows in order while the round's ``budget`` (records, spool bytes) lasts
        (blocking). Errors are returned in place of the queue's outcome, for the caller
        to record; a row planned past the budget is left for a later round."""
        out: list[SegmentPlan | Wait | HotDataLost | Exception] = []
        now_ms = self.clock.now_ms()
        limits = round_limits(self.in_force.tiering, self._ticks)
        for row in rows:
            if budget.full():
                break
            key = QueueKey(row.topic, row.queue_id)
            try:
                outcome = plan_segment(
                    self.hot, key, row.cold_commit, limits,
                    now_ms=now_ms, guard_ts=guard, flush=flush, cl_limit=self.guard.group.cl_limit,
                )  # fmt: skip
            except Exception as exc:  # the caller records it (or re-raises a bug)
                out.append(exc)
                continue
            admitted = budget.admit(key, outcome) if isinstance(outcome, SegmentPlan) else outcome
            if admitted is None:
                break
            out.append(admitted)
        return out

    async def _run_round(
        self, planned: Sequence[tuple[QueueRow, SegmentPlan]], report: TickReport
    ) -> list[QueueRow]:
        """Gather the planned segments in one pass, commit each; return the rows to go on."""
        if not planned:
            return []
        jobs = [GatherJob(plan, row.cold_cl_end) for row, plan in planned]
        batching = self.in_force.tiering.batching
        self.in_flight = len(planned)
        try:
            async with _spool(self.spool_dir) as directory:
                try:
                    gathered = await self._gather(jobs, directory)
                except TieredStoreError as exc:
                    gathered = [exc] * len(jobs)
                gathered = await asyncio.to_thread(_recheck_units, self.hot, planned, gathered)
                batches, single = split_round(planned, gathered, batching=batching)
                ahead = (s for _, _, s in single if isinstance(s, Spooled))  # commits' order
                async with encoding_ahead(self.committer.writer.encodings, ahead):
                    outcomes = await asyncio.gather(
                        self._commit_batches(batches, report),
                        *(self._commit_gathered(r, p, s, report) for r, p, s in single),
                        return_exceptions=True,
                    )
        finally:
            self.in_flight = 0
        going = _going(outcomes, report, self.metrics, self._damage)
        if self._damage:  # after every commit of the round returned: none is in flight
            found, self._damage = self._damage, []
            touched = await self.batcher.damaged(found)
            going = [r for r in going if QueueKey(r.topic, r.queue_id) not in touched]
        return going

    async def _commit_batches(
        self, batches: Sequence[Sequence[BatchItem]], report: TickReport
    ) -> list[QueueRow]:
        """Commit each batch object in turn; return the rows to go on with."""
        going: list[QueueRow] = []
        for items in batches:
            async with self._sem:
                started = time.perf_counter()
                published = self.batcher.batches
                outcomes = await self.batcher.commit(items)
            report.batches += self.batcher.batches - published
            self.committed.batches += self.batcher.batches - published
            self.in_flight = max(self.in_flight - len(items), 0)
            self.metrics.upload_seconds.observe(time.perf_counter() - started)
            for item, outcome in zip(items, outcomes, strict=True):
                if isinstance(outcome, DamagedObjectError):
                    self._damage.append(outcome)
                elif isinstance(outcome, TieredStoreError):
                    record_error(outcome, report, self.metrics)
                elif outcome is CommitKind.DIVERGED:
                    report.diverged.append(QueueKey(item.row.topic, item.row.queue_id))
                elif isinstance(outcome, QueueRow) and (
                    nxt := self._counted(item.plan, outcome, report, sliced=True)
                ):
                    going.append(nxt)
        return going

    async def _gather(
        self, jobs: Sequence[GatherJob], directory: Path
    ) -> list[Spooled | TieredStoreError]:
        """Run the pass in a thread; if cancelled, stop it and wait for it to return (its
        spool files must not be written after the directory is removed)."""
        stop = threading.Event()
        plain = self.committer.writer.frames is None  # else the spool files are encoded
        work = asyncio.ensure_future(
            asyncio.to_thread(
                gather_segments, self.hot, jobs, directory, window_bytes=PASS_WINDOW_BYTES,
                stop=stop, writeback=plain,
            )
        )  # fmt: skip
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            stop.set()
            await asyncio.gather(work, return_exceptions=True)
            raise

    async def _commit_gathered(
        self,
        row: QueueRow,
        plan: SegmentPlan,
        spooled: Spooled | TieredStoreError,
        report: TickReport,
    ) -> QueueRow | None:
        """Commit one gathered segment; return the queue's new row to go on with, or None
        to stop (diverged, or nothing more was pending when it was planned)."""
        try:
            if isinstance(spooled, CorruptRecordError):
                self.committer.stop_inconsistent(row, spooled)
                return None
            if isinstance(spooled, TieredStoreError):
                raise spooled
            async with self._sem:
                started = time.perf_counter()
                result = await self.committer.commit(row, plan, spooled)
        finally:
            self.in_flight = max(self.in_flight - 1, 0)
        if result.kind is CommitKind.DIVERGED:
            report.diverged.append(QueueKey(row.topic, row.queue_id))
            return None
        if result.kind is CommitKind.STOPPED:
            return None
        if result.kind is CommitKind.ADOPTED:
            return result.row
        self.metrics.upload_seconds.observe(time.perf_counter() - started)
        return self._counted(plan, result.row, report)

    def _counted(
        self, plan: SegmentPlan, row: QueueRow, report: TickReport, *, sliced: bool = False
    ) -> QueueRow | None:
        """Count a committed segment (or batch slice); return ``row`` to go on with, or
        None if the queue drained to the hot max it was planned against (done this tick)."""
        self.metrics.segments_tiered.labels(plan.reason.value).inc()
        if sliced:
            self.metrics.slices_tiered.inc()
        self.metrics.messages_tiered.inc(plan.count)
        self.metrics.bytes_tiered.inc(plan.nbytes)
        for counts in (report, self.committed):
            counts.count(plan.count, plan.nbytes, sliced=sliced)
        if self.on_segment:
            self.on_segment(plan, sliced)
        if plan.end < plan.hot.max:
            return row
        # Drained to the hot max it was planned against: done for this tick. Its gauges
        # say so now (no planning follows that would set them).
        set_lag(self.metrics, self.clock, self._oldest, row, Wait(WaitReason.IDLE, plan.hot))
        return None
