"""The dispatcher: one supervised asyncio loop that tiers every queue of one broker.

Lifecycle (:class:`DispatcherState`)::

    CREATED ──start()──▶ RUNNING ──stop()/signal──▶ STOPPING ──▶ STOPPED
                            │                                      ▲
                            └──────── fatal error ──▶ FAILED ──────┘ (close)

The parts are built by :func:`tieredstore.dispatcher.assembly.build_dispatcher` (the one place that
builds them) and handed in; the queue state they share is one
:class:`~tieredstore.dispatcher.shared_state.SharedState`.

Each tick: discover queues in the hot store and create catalogue rows for new ones
eagerly (:mod:`tieredstore.dispatcher.discovery`), then start one task that tiers every ACTIVE queue
not already in flight, in rounds, until the group-commit rules say wait for each
(:mod:`tieredstore.dispatcher.tiering.rounds`; each segment is committed by
:mod:`tieredstore.dispatcher.tiering.committer`). A
queue is never tiered by two tasks at once. The lease is renewed until every write has
returned, also while draining on stop; periodic jobs (retention, config backup) run
under the same lock as catalogue writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence

from tieredstore.clock import Clock, sleep_until, wait_at_most
from tieredstore.dispatcher.background_loops import Periodic, run_periodic
from tieredstore.dispatcher.discovery import Discovery
from tieredstore.dispatcher.lease.guard import mirror_lease
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.dispatcher.lease.renewal import renew_until, renewing
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.dispatcher.shared_state import SharedState
from tieredstore.dispatcher.status_report import untiered
from tieredstore.dispatcher.tiering.cold_writer import ColdWriter, heal_damaged, report_damage
from tieredstore.dispatcher.tiering.durability import CommitlogSyncer
from tieredstore.dispatcher.tiering.provenance_writer import ProvenanceWriter
from tieredstore.dispatcher.tiering.rounds import Rounds
from tieredstore.dispatcher.tiering.tick_report import TickReport, record_error
from tieredstore.dispatcher.topic_filter import TopicFilter
from tieredstore.errors import ColdStoreAccessError, LeaseLostError, TieredStoreError
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueRow
from tieredstore.settings.in_force import SettingsInForce
from tieredstore.settings.loader import TieringSettings

__all__ = ["Dispatcher", "DispatcherState"]

log = logging.getLogger(__name__)


class DispatcherState(enum.Enum):
    CREATED = "created"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


class Dispatcher:
    """Tiers one broker's store into one cold prefix. See the module docstring.

    Composes :class:`Discovery` (which queues), :class:`Rounds` (tiering them, each
    segment committed by its :class:`~tieredstore.dispatcher.tiering.committer.SegmentCommitter`)
    and the :class:`ProvenanceWriter`; owns the lifecycle, the ticks, the lease renewals and
    the periodic jobs. It only stores the parts it is given
    (:func:`tieredstore.dispatcher.assembly.build_dispatcher` builds them).
    """

    def __init__(
        self,
        *,
        hot: HotStore,
        catalogue: Catalogue,
        lease: Lease,
        writer: ColdWriter,
        clock: Clock,
        in_force: SettingsInForce,
        metrics: Metrics,
        states: SharedState,
        discovery: Discovery,
        rounds: Rounds,
        provenance: ProvenanceWriter,
        periodic: Sequence[Periodic] = (),
        startup: Sequence[Callable[[], Awaitable[object]]] = (),
    ) -> None:
        self.hot = hot
        self.catalogue = catalogue
        self.lease = lease
        #: After each renewal: the catalogue mirrors the hold for `status`.
        self._mirror = functools.partial(mirror_lease, catalogue, lease)
        self.writer = writer
        self.clock = clock
        self.metrics = metrics
        #: The queue state shared with discovery, the rounds and the committer: the lock,
        #: the stopping flag, the stopped and damaged queues.
        self.states = states
        self.discovery = discovery
        self.rounds = rounds
        self.provenance = provenance
        self.periodic = tuple(periodic)
        self.startup = tuple(startup)
        #: The settings in force (a reload replaces them; every tick reads them afresh).
        self.in_force = in_force
        self.state = DispatcherState.CREATED
        self._inflight: dict[QueueKey, asyncio.Task[TickReport]] = {}
        self._abandoning = asyncio.Event()  # a second stop: in-flight segments go now
        self._writes_done = asyncio.Event()  # renewals go on until every write returned

    @property
    def tiering(self) -> TieringSettings:
        """The ``[tiering]`` settings in force now (read from :attr:`in_force`)."""
        return self.in_force.tiering

    @property
    def syncer(self) -> CommitlogSyncer:
        """Makes planned records durable (``guard = sync``); replaceable by tests."""
        return self.rounds.guard.syncer

    @syncer.setter
    def syncer(self, syncer: CommitlogSyncer) -> None:
        self.rounds.guard.syncer = syncer

    async def discover(self) -> list[QueueRow]:
        """Return ACTIVE queue rows, creating rows for queues seen for the first time."""
        return await self.discovery.discover()

    async def tier_queue(self, row: QueueRow, *, flush: bool) -> TickReport:
        """Tier ready segments of one queue until the rules say wait."""
        return await self.rounds.tier_queues([row], flush=flush)

    async def tier_queues(self, rows: Sequence[QueueRow], *, flush: bool) -> TickReport:
        """Tier ready segments of many queues, in rounds (:meth:`Rounds.tier_queues`)."""
        return await self.rounds.tier_queues(rows, flush=flush)

    # -- ticks ---------------------------------------------------------------------
    async def tick(self, *, flush: bool = False) -> TickReport:
        """Discover queues and tier them (:meth:`tier_queues`); waits for the task it started.

        Queues still in flight from an earlier tick are skipped, never doubled. A cold
        store refusing the tick's first requests (ColdStoreAccessError: keys rotated, a
        policy changed) ends it with that error in the report, as a queue's would: the
        next tick tries again (:mod:`tieredstore.dispatcher.cold_access` logs it once).
        """
        report = TickReport()
        try:
            await self.lease.reclaim_if_lapsed()  # LeaseLostError if taken over: fenced
            rows = await self.discover()
            await self.provenance.before_tiering(rows, self.tiering, self.discovery.new_ranges)
        except ColdStoreAccessError as exc:
            record_error(exc, report, self.metrics)
            self.metrics.ticks.inc()
            return report
        await self.rounds.new_tick()
        report.new_queues = list(self.discovery.new_queues)
        idle = [r for r in rows if QueueKey(r.topic, r.queue_id) not in self._inflight]
        started: list[asyncio.Task[TickReport]] = []
        if idle:
            task = asyncio.create_task(self.tier_queues(idle, flush=flush), name="tiering pass")
            keys = [QueueKey(r.topic, r.queue_id) for r in idle]
            for key in keys:
                self._inflight[key] = task
            task.add_done_callback(functools.partial(self._done, keys))
            started.append(task)
        for result in await asyncio.gather(*started, return_exceptions=True):
            if isinstance(result, BaseException):
                record_error(result, report, self.metrics)
            else:
                report.merge(result)
        self.metrics.ticks.inc()
        self.metrics.last_tick.set(self.clock.now_ms() / 1000)
        return report

    def _done(self, keys: Sequence[QueueKey], _task: asyncio.Task[TickReport]) -> None:
        for key in keys:
            self._inflight.pop(key, None)

    async def catch_up(self, *, shutdown_deadline: float = 30.0) -> TickReport:
        """One full catch-up pass (``run --once``): ticks with ``flush`` until one tiers
        nothing, renewing the lease as :meth:`run` does (a renewal that fails for good
        stops the pass with its error). :meth:`stop` ends it as it ends :meth:`run`
        (in-flight segments get ``shutdown_deadline`` seconds, then are abandoned) and
        the report says ``interrupted``: a stopped pass never reads as a finished one."""
        self._writes_done.clear()
        renew = asyncio.create_task(self._renew_loop(), name="lease renewal")
        stop = asyncio.create_task(self.states.stopping.wait(), name="stop request")
        total = TickReport()
        before = dataclasses.replace(self.rounds.committed)
        try:
            while not self.states.stopping.is_set():
                tick = asyncio.ensure_future(self.tick(flush=True))
                await asyncio.wait({tick, renew, stop}, return_when=asyncio.FIRST_COMPLETED)
                if renew.done() and renew.exception() is not None:
                    tick.cancel()
                    await asyncio.gather(tick, return_exceptions=True)
                    raise renew.exception()  # type: ignore[misc]
                if not tick.done():  # a stop while the tick runs: drain, then abandon
                    await wait_at_most(self.clock, tick, shutdown_deadline, cut=self._abandoning)
                    total.abandoned = self.rounds.in_flight if not tick.done() else 0
                    await _keep_or_abandon(tick, total, self._abandon_inflight)
                    break
                total.merge(report := await tick)
                if report.idle:
                    return total
            total.interrupted = True
            total.count_since(before, self.rounds.committed)  # an abandoned tick's too
            total.left_messages, total.left_queues = await _untiered(self.hot, self.catalogue)
            return total
        except LeaseLostError as exc:
            self._fenced(exc)
            raise
        finally:
            stop.cancel()
            self._writes_done.set()
            renew.cancel()
            await asyncio.gather(renew, stop, return_exceptions=True)

    # -- lifecycle -----------------------------------------------------------------
    async def start(self, *, wait_for_lease: bool) -> None:
        """Acquire the lease, adopt committed manifests the catalogue missed, then run the
        ``startup`` jobs (e.g. finishing expiries a crash interrupted) under the lock.

        The lease is renewed all along (:func:`renewing`): reconciling a large cold store
        can take longer than the lease lives, and a writer that let it lapse would be
        fenced by its own successor. LeaseLostError if another writer takes over."""
        if self.state is not DispatcherState.CREATED:
            raise RuntimeError(f"dispatcher already {self.state.value}")
        await self.lease.acquire(wait=wait_for_lease)
        self._mirror()
        try:
            await renewing(self.lease, self.clock, self._start_up(), on_renewed=self._mirror)
        except LeaseLostError as exc:
            self._fenced(exc)
            raise
        self.state = DispatcherState.RUNNING

    async def _start_up(self) -> None:
        damaged = self.states.damaged
        damaged.clear()
        self.states.save()  # empty: this process tries every queue once more
        self.metrics.lease_held.set(1)
        self.metrics.lease_epoch.set(self.lease.epoch)
        if self.tiering.batching:
            await self.rounds.batcher.start()  # before recover: it adopts what the fence froze
        else:  # a takeover all the same: an older writer's batch create must not land
            await self.rounds.batcher.keys.fence_takeover()
        report = await self.writer.recover()
        damaged.clear()
        found = report_damage(report.findings, self.metrics, self.catalogue)
        damaged.update(found.queues)
        async with self.states.lock:  # the lost tails the broker still holds: tiered again
            await heal_damaged(
                damaged, writer=self.writer, hot=self.hot, metrics=self.metrics,
                keys=self.rounds.batcher.keys, lost_batches=found.batches,
            )  # fmt: skip
        self.states.save()  # with the damaged queues: `status` shows them DEGRADED
        await self.provenance.publish_rules(
            TopicFilter.of(self.tiering).rules(), str(self.tiering.init_policy)
        )
        await asyncio.to_thread(self.rounds.clear_spool)
        async with self.states.lock:
            for job in self.startup:
                await job()

    async def _renew_loop(self) -> None:
        await renew_until(self.lease, self.clock, self._writes_done, on_renewed=self._mirror)

    async def _periodic_loop(self, job: Periodic) -> None:
        await run_periodic(
            job,
            clock=self.clock,
            stopping=self.states.stopping,
            lock=self.states.lock,
            metrics=self.metrics,
        )

    async def _tick_loop(self) -> None:
        while not self.states.stopping.is_set():
            await self.tick()
            await sleep_until(self.clock, self.states.stopping, self.tiering.tick_interval)

    async def run(self, *, shutdown_deadline: float = 30.0) -> None:
        """Run until :meth:`stop` is called (a signal handler calls it).

        On stop, no new segment starts; segments in flight get ``shutdown_deadline``
        seconds to commit, then are abandoned (their objects stay uncommitted and GC
        collects them). The lease is renewed until every in-flight write has returned —
        also while draining — and a segment whose lease lapses anyway stops at its next
        chunk (:meth:`Lease.check`), so no write outlives the lease. Raises
        LeaseLostError if the lease is lost.
        """
        self._writes_done.clear()
        renew = asyncio.create_task(self._renew_loop(), name="lease renewal")
        ticks = asyncio.create_task(self._tick_loop(), name="tick loop")
        stop = asyncio.create_task(self.states.stopping.wait(), name="stop request")
        jobs = [asyncio.create_task(self._periodic_loop(j), name=j.name) for j in self.periodic]
        try:
            done, _ = await asyncio.wait(
                {renew, ticks, stop, *jobs}, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                if task is not stop and task.exception() is not None:
                    self.state = DispatcherState.FAILED
                    if isinstance(task.exception(), LeaseLostError):
                        self._fenced(task.exception())  # type: ignore[arg-type]
                    raise task.exception()  # type: ignore[misc]
            self.stop()
            await wait_at_most(self.clock, ticks, shutdown_deadline, cut=self._abandoning)
        finally:
            for task in (ticks, stop, *jobs):
                task.cancel()
            await asyncio.gather(ticks, stop, *jobs, return_exceptions=True)
            await self._abandon_inflight()
            self._writes_done.set()
            renew.cancel()
            await asyncio.gather(renew, return_exceptions=True)

    def stop(self) -> None:
        """Ask the loop to stop taking new segments (idempotent)."""
        if self.state is DispatcherState.RUNNING:
            self.state = DispatcherState.STOPPING
        self.states.request_stop()

    def abandon(self) -> None:
        """Stop, and abandon the segments in flight now (a second Ctrl-C), not later."""
        self.stop()
        self._abandoning.set()

    def _fenced(self, exc: LeaseLostError) -> None:
        """Count and log that this writer lost its lease: it writes nothing more (and
        ``tieredstore_lease_held`` says so at once, not only once it closes)."""
        self.metrics.fenced.inc()
        self.metrics.lease_held.set(0)
        log.error("fenced: this sidecar no longer holds the writer lease: %s", exc)

    async def _abandon_inflight(self) -> None:
        """Cancel queue tasks still running and wait until each has returned."""
        tasks = list(set(self._inflight.values()))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        """Release the lease — after the last write returned — and mark STOPPED.

        Safe to call twice.
        """
        if self.state is DispatcherState.STOPPED:
            return
        await self._abandon_inflight()
        self._writes_done.set()
        with contextlib.suppress(TieredStoreError):
            await self.lease.release()
        if self.lease.epoch:  # it was held: `status` learns since when nobody holds it
            mirror_lease(self.catalogue, self.lease, released=True)
        self.metrics.lease_held.set(0)
        self.state = DispatcherState.STOPPED


async def _untiered(hot: HotStore, catalogue: Catalogue) -> tuple[int, int]:
    """What an interrupted pass leaves for the next run (:func:`untiered`, in a thread)."""
    return await asyncio.to_thread(untiered, hot, catalogue.queues.all())


async def _keep_or_abandon(
    tick: asyncio.Future[TickReport],
    total: TickReport,
    abandon_inflight: Callable[[], Awaitable[None]],
) -> None:
    """Keep what a stopped tick reported if it ended in time; else cancel it and the
    queue tasks it started (their segments stay uncommitted, never read)."""
    if tick.done():
        total.merge(await tick)
        return
    tick.cancel()
    await asyncio.gather(tick, return_exceptions=True)
    await abandon_inflight()
