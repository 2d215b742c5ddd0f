"""The dispatcher: one supervised asyncio loop that tiers every queue of one broker.

Lifecycle (:class:`DispatcherState`)::

    CREATED ──start()──▶ RUNNING ──stop()/signal──▶ STOPPING ──▶ STOPPED
                            │                                      ▲
                            └──────── fatal error ──▶ FAILED ──────┘ (close)

Each tick: discover queues in the hot store (new topics appear while running), create
catalogue rows for new ones **eagerly** (one transaction: init offset, cold CQ base,
cold CL base — no half-initialised queue exists), then for every ACTIVE queue not
already in flight start a task that tiers ready segments until the group-commit rules say
wait. Tasks run under a semaphore (``tiering.concurrency``); a queue is never tiered by
two tasks at once.

Per segment: plan → upload COMMIT_LOG → upload CONSUME_QUEUE → check lease → write
MANIFEST (the commit point) → advance the catalogue. A crash anywhere is safe: names are
deterministic, uncommitted objects are never read, and on start the catalogue adopts
manifests it had not recorded yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from dispatcher.coldio import ColdWriter
from dispatcher.lease import Lease
from dispatcher.metrics import Metrics
from dispatcher.planner import HotDataLost, Limits, SegmentPlan, Wait, plan_segment
from dispatcher.topic_filter import TopicFilter
from metadata.catalogue import Catalogue
from metadata.rows import QueueRow, QueueState
from tieredstore.backends.base import Backend
from tieredstore.clock import Clock
from tieredstore.errors import (
    CatalogueError,
    DivergedError,
    InvalidNameError,
    LeaseLostError,
    RetryableError,
    TieredStoreError,
)
from tieredstore.hotstore import HotStore, QueueKey
from tieredstore.layout import validate_topic

__all__ = ["Dispatcher", "DispatcherConfig", "DispatcherState", "Periodic", "TickReport"]

log = logging.getLogger(__name__)


class DispatcherState(enum.Enum):
    CREATED = "created"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class DispatcherConfig:
    """What the dispatcher needs from the settings."""

    limits: Limits = field(default_factory=Limits)
    tick_interval: float = 1.0
    concurrency: int = 4
    read_batch_bytes: int = 1 << 20
    init_policy: str = "earliest"
    guard: bool = True
    guard_age_ms: int = 10_000
    topic_filter: TopicFilter = field(default_factory=TopicFilter)
    lease_renew_interval: float = 10.0


@dataclass(frozen=True, slots=True)
class Periodic:
    """A job the dispatcher runs every ``interval`` seconds while it runs (e.g. retention).

    ``job`` is awaited on the dispatcher's clock; a RetryableError is logged and the job
    runs again next interval; a FatalError stops the dispatcher (FAILED).
    """

    name: str
    interval: float
    job: Callable[[], Awaitable[object]]


class CommitKind(enum.Enum):
    COMMITTED = "committed"  # uploaded and committed by this writer
    ADOPTED = "adopted"  # already committed in cold; the catalogue caught up instead
    DIVERGED = "diverged"  # the hot store no longer matches cold: nothing written


@dataclass(frozen=True, slots=True)
class CommitResult:
    kind: CommitKind
    row: QueueRow


@dataclass(slots=True)
class TickReport:
    """What one tick (or a whole catch-up pass) did."""

    segments: int = 0
    messages: int = 0
    bytes: int = 0
    new_queues: list[QueueKey] = field(default_factory=list)
    diverged: list[QueueKey] = field(default_factory=list)
    lost: list[HotDataLost] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def merge(self, other: TickReport) -> None:
        self.segments += other.segments
        self.messages += other.messages
        self.bytes += other.bytes
        self.new_queues += other.new_queues
        self.diverged += other.diverged
        self.lost += other.lost
        self.errors += other.errors


class Dispatcher:
    """Tiers one broker's store into one cold prefix. See the module docstring."""

    def __init__(
        self,
        *,
        hot: HotStore,
        backend: Backend,
        catalogue: Catalogue,
        lease: Lease,
        writer: ColdWriter,
        clock: Clock,
        config: DispatcherConfig,
        metrics: Metrics | None = None,
        on_segment: Callable[[SegmentPlan], None] | None = None,
        periodic: Sequence[Periodic] = (),
        startup: Sequence[Callable[[], Awaitable[object]]] = (),
    ) -> None:
        self.hot = hot
        self.backend = backend
        self.catalogue = catalogue
        self.lease = lease
        self.writer = writer
        self.clock = clock
        self.config = config
        self.metrics = metrics or Metrics()
        self.on_segment = on_segment
        self.periodic = tuple(periodic)
        self.startup = tuple(startup)
        self.state = DispatcherState.CREATED
        self._sem = asyncio.Semaphore(config.concurrency)
        self._inflight: dict[QueueKey, asyncio.Task[TickReport]] = {}
        self._stopping = asyncio.Event()
        self._lock = asyncio.Lock()  # serialises catalogue writes across queue tasks
        self._refused: set[str] = set()  # topics whose names the cold store cannot hold

    # -- discovery and eager initialisation ---------------------------------------
    def _init_offset(self, key: QueueKey) -> int:
        rng = self.hot.queue_range(key.topic, key.queue_id)
        policy = self.config.init_policy
        if policy == "latest":
            return rng.max
        if policy.startswith("timestamp:"):
            return self.hot.offset_by_time(key.topic, key.queue_id, int(policy.split(":", 1)[1]))
        return rng.min

    async def discover(self) -> list[QueueRow]:
        """Return ACTIVE queue rows, creating rows for queues seen for the first time."""
        keys = await asyncio.to_thread(self.hot.queues)
        rows: list[QueueRow] = []
        new: list[QueueKey] = []
        for key in keys:
            if not self.config.topic_filter.accepts(key.topic) or key.topic in self._refused:
                continue
            row = self.catalogue.queue(key.topic, key.queue_id)
            if row is None:
                try:
                    validate_topic(key.topic)
                except InvalidNameError as exc:
                    # Refused once, loudly; the other topics go on.
                    self._refused.add(key.topic)
                    log.error("topic %r is not tiered: %s", key.topic, exc)
                    self.metrics.errors.labels("InvalidNameError").inc()
                    continue
                init = await asyncio.to_thread(self._init_offset, key)
                row = self.catalogue.ensure_queue(key.topic, key.queue_id, init)
                new.append(key)
                log.info(
                    "queue %s initialised at offset %d (%s)", key, init, self.config.init_policy
                )
            self.metrics.set_queue_state(key.topic, key.queue_id, row.state.name)
            if row.state is QueueState.ACTIVE:
                rows.append(row)
        self._new_queues = new
        return rows

    # -- one queue -----------------------------------------------------------------
    def _guard_ts(self) -> int | None:
        """Newest store time that is surely flushed, or None when the guard is off.

        The checkpoint's physicMsgTimestamp, or ``guard_age`` ago if later: a real
        broker only advances the checkpoint on flushes a producer waited for, never for
        its own writes (delay deliveries, transaction commits), so those would otherwise
        wait for the next producer forever. Its flush interval is well under the age.
        """
        if not self.config.guard:
            return None
        flushed = self.hot.checkpoint().physic_msg_timestamp
        return max(flushed, self.clock.now_ms() - self.config.guard_age_ms)

    async def _plan(self, row: QueueRow, flush: bool) -> SegmentPlan | Wait | HotDataLost:
        guard = await asyncio.to_thread(self._guard_ts)
        key = QueueKey(row.topic, row.queue_id)
        return await asyncio.to_thread(
            plan_segment,
            self.hot,
            key,
            row.cold_commit,
            self.config.limits,
            now_ms=self.clock.now_ms(),
            guard_ts=guard,
            flush=flush,
        )

    def _update_lag(self, row: QueueRow, outcome: SegmentPlan | Wait | HotDataLost) -> None:
        """Set the lag gauges from the plan alone (hot store + catalogue, no backend).

        Also for a ready segment: if its upload then fails (backend down), the gauges
        still show what is waiting.
        """
        hot = outcome.hot
        labels = (row.topic, str(row.queue_id))
        self.metrics.lag_messages.labels(*labels).set(max(hot.max - row.cold_commit, 0))
        if isinstance(outcome, HotDataLost):
            return
        self.metrics.lag_bytes.labels(*labels).set(outcome.pending_bytes)
        oldest = outcome.oldest_ms
        age = (self.clock.now_ms() - oldest) / 1000 if oldest is not None else 0.0
        self.metrics.lag_seconds.labels(*labels).set(max(age, 0.0))

    async def tier_queue(self, row: QueueRow, *, flush: bool) -> TickReport:
        """Tier ready segments of one queue until the rules say wait."""
        report = TickReport()
        key = QueueKey(row.topic, row.queue_id)
        while not self._stopping.is_set():
            try:
                outcome = await self._plan(row, flush)
            except DivergedError as exc:
                await self._diverge(row, str(exc))
                report.diverged.append(key)
                return report
            self._update_lag(row, outcome)
            if isinstance(outcome, Wait):
                return report
            if isinstance(outcome, HotDataLost):
                self._hot_data_lost(outcome)
                report.lost.append(outcome)
                return report
            async with self._sem:
                started = time.perf_counter()
                result = await self._commit_segment(row, outcome)
            if result.kind is CommitKind.DIVERGED:
                report.diverged.append(key)
                return report
            row = result.row
            if result.kind is CommitKind.ADOPTED:
                continue
            self.metrics.upload_seconds.observe(time.perf_counter() - started)
            self.metrics.segments_tiered.labels(outcome.reason.value).inc()
            self.metrics.messages_tiered.inc(outcome.count)
            self.metrics.bytes_tiered.inc(outcome.nbytes)
            report.segments += 1
            report.messages += outcome.count
            report.bytes += outcome.nbytes
            if self.on_segment:
                self.on_segment(outcome)
        return report

    async def _commit_segment(self, row: QueueRow, plan: SegmentPlan) -> CommitResult:
        """Upload and commit one planned segment; return the queue's new row.

        Steps: refuse to overwrite a committed manifest (the catalogue is behind the
        cold store: adopt what is there instead) → check continuity with cold → upload
        COMMIT_LOG and CONSUME_QUEUE → check the lease → write MANIFEST → catalogue.
        """
        if await self.writer.manifest_exists(row.topic, row.queue_id, plan.start):
            return CommitResult(CommitKind.ADOPTED, await self._adopt_ahead(row, plan.start))
        if not await self.writer.continuity_ok(row):
            await self._diverge(row, "hot record before the next segment differs from cold")
            return CommitResult(CommitKind.DIVERGED, row)
        manifest = await self.writer.write_segment(plan, row, self.lease.epoch)
        await self.lease.ensure_held()
        await self.writer.write_manifest(manifest)
        async with self._lock:
            self.catalogue.commit_segment(manifest)
            fresh = self.catalogue.queue(row.topic, row.queue_id) or row
        return CommitResult(CommitKind.COMMITTED, fresh)

    async def _adopt_ahead(self, row: QueueRow, start: int) -> QueueRow:
        """The cold store already holds a segment at ``start``: reconcile, never overwrite."""
        log.warning(
            "queue %s/%d: cold already has a committed segment at offset %d; "
            "adopting it into the catalogue instead of rewriting it",
            row.topic,
            row.queue_id,
            start,
        )
        async with self._lock:
            await self.writer.recover()
            fresh = self.catalogue.queue(row.topic, row.queue_id) or row
        if fresh.cold_commit <= start:
            raise CatalogueError(
                f"the catalogue is behind the cold store at queue offset {start} and the "
                "committed segment there could not be adopted (see the reconcile report)",
                where=f"{row.topic}/{row.queue_id}",
            )
        return fresh

    async def _diverge(self, row: QueueRow, why: str) -> None:
        log.error("queue %s/%d DIVERGED: %s; tiering of it stops", row.topic, row.queue_id, why)
        async with self._lock:
            self.catalogue.set_state(row.topic, row.queue_id, QueueState.DIVERGED)
        self.metrics.set_queue_state(row.topic, row.queue_id, "DIVERGED")
        self.metrics.errors.labels("DivergedError").inc()

    def _hot_data_lost(self, lost: HotDataLost) -> None:
        log.error(
            "queue %s: the broker deleted offsets [%d, %d) before they were tiered "
            "(%d messages lost to cold); queue paused",
            lost.queue,
            lost.start,
            lost.end,
            lost.end - lost.start,
        )
        self.metrics.hot_data_lost.labels(lost.queue.topic, str(lost.queue.queue_id)).inc(
            lost.end - lost.start
        )
        self.catalogue.set_state(lost.queue.topic, lost.queue.queue_id, QueueState.PAUSED)
        self.metrics.set_queue_state(lost.queue.topic, lost.queue.queue_id, "PAUSED")

    # -- ticks ---------------------------------------------------------------------
    async def tick(self, *, flush: bool = False) -> TickReport:
        """Discover queues and run one round of tiering; waits for the tasks it started.

        Queues still in flight from an earlier tick are skipped, never doubled.
        """
        report = TickReport()
        rows = await self.discover()
        report.new_queues = list(self._new_queues)
        started: list[asyncio.Task[TickReport]] = []
        for row in rows:
            key = QueueKey(row.topic, row.queue_id)
            if key in self._inflight:
                continue
            task = asyncio.create_task(self.tier_queue(row, flush=flush), name=f"tier {key}")
            self._inflight[key] = task
            task.add_done_callback(functools.partial(self._done, key))
            started.append(task)
        for result in await asyncio.gather(*started, return_exceptions=True):
            if isinstance(result, BaseException):
                self._record_error(result, report)
            else:
                report.merge(result)
        self.metrics.ticks.inc()
        self.metrics.last_tick.set(self.clock.now_ms() / 1000)
        return report

    def _done(self, key: QueueKey, _task: asyncio.Task[TickReport]) -> None:
        self._inflight.pop(key, None)

    def _record_error(self, exc: BaseException, report: TickReport) -> None:
        """Count and log a queue task's error; the queue is retried next tick.

        Only our own errors are recorded; a lost lease, cancellation or a bug propagates
        and stops the dispatcher.
        """
        if isinstance(exc, LeaseLostError) or not isinstance(exc, TieredStoreError):
            raise exc
        self.metrics.errors.labels(type(exc).__name__).inc()
        report.errors.append(str(exc))
        level = logging.WARNING if isinstance(exc, RetryableError) else logging.ERROR
        log.log(level, "tiering failed: %s", exc)

    async def catch_up(self) -> TickReport:
        """One full catch-up pass (``run --once``): tier every queue up to hot max.

        Repeats ticks with ``flush`` until a tick tiers nothing (subject to the guard).
        The lease is renewed meanwhile, as in :meth:`run`, so a pass may last longer
        than the lease; a renewal that fails for good (another writer took the lease)
        stops the pass with its error.
        """
        renew = asyncio.create_task(self._renew_loop(), name="lease renewal")
        total = TickReport()
        try:
            while not self._stopping.is_set():
                tick = asyncio.ensure_future(self.tick(flush=True))
                await asyncio.wait({tick, renew}, return_when=asyncio.FIRST_COMPLETED)
                if renew.done() and renew.exception() is not None:
                    tick.cancel()
                    await asyncio.gather(tick, return_exceptions=True)
                    raise renew.exception()  # type: ignore[misc]
                report = await tick
                total.merge(report)
                if report.segments == 0:
                    break
        finally:
            renew.cancel()
            await asyncio.gather(renew, return_exceptions=True)
        return total

    # -- lifecycle -----------------------------------------------------------------
    async def start(self, *, wait_for_lease: bool) -> None:
        """Acquire the lease, adopt committed manifests the catalogue missed, then run the
        ``startup`` jobs (e.g. finishing expiries a crash interrupted) under the lock."""
        if self.state is not DispatcherState.CREATED:
            raise RuntimeError(f"dispatcher already {self.state.value}")
        await self.lease.acquire(wait=wait_for_lease)
        self.metrics.lease_held.set(1)
        self.metrics.lease_epoch.set(self.lease.epoch)
        await self.writer.recover()
        async with self._lock:
            for job in self.startup:
                await job()
        self.state = DispatcherState.RUNNING

    async def _sleep_or_stop(self, seconds: float) -> None:
        sleeper = asyncio.ensure_future(self.clock.sleep(seconds))
        stopper = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (sleeper, stopper):
                t.cancel()

    async def _renew_loop(self) -> None:
        while not self._stopping.is_set():
            await self._sleep_or_stop(self.config.lease_renew_interval)
            if self._stopping.is_set():
                return
            try:
                await self.lease.renew()
            except RetryableError as exc:
                log.warning("lease renewal failed, will retry: %s", exc)

    async def _periodic_loop(self, job: Periodic) -> None:
        while not self._stopping.is_set():
            await self._sleep_or_stop(job.interval)
            if self._stopping.is_set():
                return
            try:
                async with self._lock:
                    await job.job()
            except RetryableError as exc:
                log.warning("%s failed, will run again: %s", job.name, exc)
                self.metrics.errors.labels(type(exc).__name__).inc()

    async def _tick_loop(self) -> None:
        while not self._stopping.is_set():
            await self.tick()
            await self._sleep_or_stop(self.config.tick_interval)

    async def run(self, *, shutdown_deadline: float = 30.0) -> None:
        """Run until :meth:`stop` is called (a signal handler calls it).

        On stop, no new segment starts; segments in flight get ``shutdown_deadline``
        seconds to commit, then are abandoned (their objects stay uncommitted and are
        rewritten or collected later). Raises LeaseLostError if the lease is lost.
        """
        renew = asyncio.create_task(self._renew_loop(), name="lease renewal")
        ticks = asyncio.create_task(self._tick_loop(), name="tick loop")
        stop = asyncio.create_task(self._stopping.wait(), name="stop request")
        jobs = [asyncio.create_task(self._periodic_loop(j), name=j.name) for j in self.periodic]
        try:
            done, _ = await asyncio.wait(
                {renew, ticks, stop, *jobs}, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                if task is not stop and task.exception() is not None:
                    self.state = DispatcherState.FAILED
                    raise task.exception()  # type: ignore[misc]
            self.stop()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(ticks), timeout=shutdown_deadline)
        finally:
            for task in (renew, ticks, stop, *jobs):
                task.cancel()
            await asyncio.gather(renew, ticks, stop, *jobs, return_exceptions=True)

    def stop(self) -> None:
        """Ask the loop to stop taking new segments (idempotent)."""
        if self.state is DispatcherState.RUNNING:
            self.state = DispatcherState.STOPPING
        self._stopping.set()

    async def close(self) -> None:
        """Release the lease and mark STOPPED. Safe to call twice."""
        if self.state is DispatcherState.STOPPED:
            return
        for task in list(self._inflight.values()):
            task.cancel()
        with contextlib.suppress(TieredStoreError):
            await self.lease.release()
        self.metrics.lease_held.set(0)
        self.state = DispatcherState.STOPPED
