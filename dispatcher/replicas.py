"""The broker group rule: cold is never ahead of a replica that may take over.

A sidecar runs beside every replica of a RocketMQ broker group (``group.replica``, the
same ``cold.broker``); the writer lease decides which one tiers. A slave replicates the
master's commitlog asynchronously (classic ``ASYNC_MASTER``, and ``SYNC_MASTER`` when a
slave falls out of sync), so at the instant the master dies the slave may lack the
newest records. Had they been tiered, the promoted slave would hand their queue offsets
out again to new messages: every queue DIVERGED, a repair that quarantines what
consumers were acknowledged. RocketMQ persists no slave acknowledgement a sidecar could
read (a classic master keeps ``slaveAckOffset`` in memory only), so the group says it
itself, in cold:

* **Reports.** Every sidecar, holding the lease or standing by, publishes each tick
  (:meth:`ReplicaGroup.report`) the commitlog offset its own store holds durably
  (:func:`held_end`: the end of the newest record dispatched to a consume queue, after
  an ``fdatasync`` of the commitlog up to there) as ``_replicas/<replica>.json``
  (:mod:`tieredstore.cold.replicas`). A slave's commitlog is a byte copy of the
  master's at the same physical offsets, so one offset says it for every queue.
* **The limit.** The lease holder tiers a record only if it ends at or below the lowest
  ``confirmed`` of the *other* replicas whose report is live (:meth:`ReplicaGroup.limit`,
  passed to :func:`tieredstore.dispatcher.tiering.planner.plan_segment` as ``cl_limit``).
* **Liveness without shared clocks.** A report is live while its ``beat`` keeps
  changing: a report unchanged for ``group.replica_timeout`` on *this* host's monotonic
  clock is from a replica that stopped (dead, frozen, cut off). It no longer holds
  tiering back: tiering goes on under the others (or alone), logged, and the bytes it
  would have held back are no longer protected (``tieredstore_group_replicas_missing``).
  A replica not heard from yet is waited for during one timeout after this process
  started (nothing is tiered past the reporting replicas meanwhile).
* **What it costs.** Tiering lags the slowest live replica's durable end (replication
  lag plus its sidecar's tick), shown as ``tieredstore_group_unconfirmed_bytes``; a
  replica that stops costs one ``replica_timeout`` of no tiering at most.

Why it holds under ``kill -9`` and a power cut of the master's host: everything cold
holds was, before it was uploaded, durable on every live replica's disk; the master's own
lost tail is not what the new master serves from. A replica that stopped reporting may
be behind cold when it comes back; if it is then promoted, the loud divergence path
(DIVERGED, ``repair``) stays.

``group.replicas`` 1 (the default) is a single broker: no limit, and a sidecar with an
empty ``group.replica`` publishes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

from tieredstore.backends.base import Backend
from tieredstore.clock import Clock, sleep_until
from tieredstore.cold.replicas import ReplicaReport, publish_report, read_reports
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.dispatcher.tiering.durability import CommitlogSyncer
from tieredstore.errors import CorruptUnitError, OffsetOutOfRangeError, TieredStoreError
from tieredstore.hot.store import HotStore
from tieredstore.settings.declaration import GroupSettings

__all__ = ["GroupMetrics", "ReplicaGroup", "ReportState", "held_end"]

log = logging.getLogger(__name__)


def held_end(hot: HotStore) -> int:
    """The end of the newest record any consume queue of ``hot`` indexes (0: none).

    Every commitlog byte below it is in the store: the commitlog is written in order, and
    a record reaches a consume queue only after it was appended (blocking: reads the last
    unit of every queue). A queue whose last unit cannot be read now (being written, or
    torn by a crash the broker has not recovered yet) is left out: the end can only come
    out lower, never higher than what the store holds.
    """
    end = 0
    for key in hot.queues():
        try:
            rng = hot.queue_range(key.topic, key.queue_id)
            if rng.max <= rng.min:
                continue
            unit = hot.read_units(key.topic, key.queue_id, rng.max - 1, rng.max)
        except (CorruptUnitError, OffsetOutOfRangeError):
            continue
        end = max(end, int(unit["commitlog_offset"][0]) + int(unit["size"][0]))
    return end


class GroupMetrics:
    """The broker group rule's metrics, in the sidecar's registry."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.replicas_confirming = Gauge(
            "tieredstore_group_replicas_confirming",
            "Other replicas of the group whose live reports limit tiering",
            registry=r,
        )
        self.replicas_missing = Gauge(
            "tieredstore_group_replicas_missing",
            "Other replicas of the group (group.replicas - 1) that do not report: cold may "
            "get ahead of their stores",
            registry=r,
        )
        self.confirmed_offset = Gauge(
            "tieredstore_group_confirmed_offset",
            "Commitlog offset tiering may not pass (the lowest live replica's durable end; "
            "-1: no limit)",
            registry=r,
        )
        self.unconfirmed_bytes = Gauge(
            "tieredstore_group_unconfirmed_bytes",
            "Commitlog bytes this store holds that the group's limit keeps from tiering "
            "(the lag the rule costs)",
            registry=r,
        )
        self.last_report = Gauge(
            "tieredstore_group_last_report",
            "Unix time of this replica's last published report",
            registry=r,
        )
        self.report_failures = Counter(
            "tieredstore_group_report_failures",
            "Replica reports not published (the store or the cold store failed)",
            registry=r,
        )


@dataclass(frozen=True, slots=True)
class ReportState:
    """The last report attempt: when it succeeded (monotonic ms, None: never) and the
    error of the last failure since (None: the last attempt succeeded)."""

    published_ms: int | None
    error: str | None


@dataclass(frozen=True, slots=True)
class _Seen:
    beat: int
    since_ms: int  # monotonic ms on this host when this beat was first read


class ReplicaGroup:
    """This sidecar's part in its broker group: its report, and the limit the others set.

    ``settings`` is the ``[group]`` section; ``syncer`` makes the reported end durable
    (its own :class:`CommitlogSyncer`, so a tiering round's memory is never reused).
    """

    def __init__(
        self,
        *,
        hot: HotStore,
        backend: Backend,
        settings: GroupSettings,
        cluster: str,
        broker: str,
        clock: Clock,
        metrics: Metrics,
    ) -> None:
        self.hot = hot
        self.backend = backend
        self.settings = settings
        self.cluster = cluster
        self.broker = broker
        self.clock = clock
        self.metrics = GroupMetrics(metrics.registry)
        self.syncer = CommitlogSyncer(hot)
        self._started_ms = clock.monotonic_ms()
        self._beat = clock.now_ms()  # above any beat an earlier process of ours wrote
        self._seen: dict[str, _Seen] = {}
        self._missing: set[str] = set()
        self.state = ReportState(None, None)
        self.last_confirmed = 0  # the confirmed offset of this replica's last report
        #: This tick's limit (:meth:`new_tick`): None, or the offset tiering may not pass.
        self.cl_limit: int | None = None

    @property
    def reporting(self) -> bool:
        """Whether this sidecar publishes reports (``group.replica`` is set)."""
        return bool(self.settings.replica)

    @property
    def limited(self) -> bool:
        """Whether other replicas limit tiering (``group.replicas`` above 1)."""
        return self.settings.replicas > 1

    # -- this replica's report --------------------------------------------------------
    async def report(self) -> ReplicaReport:
        """Make this store durable up to :func:`held_end`, then publish it.

        Raises what reading or syncing the store, or the write, raised (the caller
        records it: :meth:`report_until`).
        """
        end = await asyncio.to_thread(held_end, self.hot)
        self.syncer.new_round()  # never trust an earlier sync: the broker may have rewound
        await self.syncer.ensure(end)
        self._beat += 1
        report = ReplicaReport(self.settings.replica, end, self._beat, self.clock.now_ms())
        await publish_report(self.backend, self.cluster, self.broker, report)
        self.last_confirmed = end
        return report

    async def report_until(self, stopping: asyncio.Event, interval: Callable[[], float]) -> None:
        """Publish a report every ``interval()`` seconds (read after each report: the
        sidecar's is ``tiering.tick_interval`` in force) until ``stopping`` is set; a
        failure is logged (when it is new), counted and kept in :attr:`state`, and the
        next interval tries again."""
        if not self.reporting:
            return
        while not stopping.is_set():
            try:
                await self.report()
            except TieredStoreError as exc:
                if self.state.error != str(exc):
                    log.error("replica report not published: %s", exc)
                self.state = ReportState(self.state.published_ms, str(exc))
                self.metrics.report_failures.inc()
            else:
                if self.state.published_ms is None:
                    log.info(
                        "replica %s reports: its store holds commitlog offset %d durably",
                        self.settings.replica, self.last_confirmed,
                    )  # fmt: skip
                elif self.state.error is not None:
                    log.info("replica report published again")
                self.state = ReportState(self.clock.monotonic_ms(), None)
                self.metrics.last_report.set(self.clock.now_ms() / 1000)
            await sleep_until(self.clock, stopping, interval())

    def report_healthy(self) -> tuple[bool, str]:
        """Whether this replica's reports go out: the last attempt succeeded within
        ``replica_timeout`` (a standby that cannot read or sync its store is not)."""
        st = self.state
        if st.error is not None:
            return False, f"replica report failing: {st.error}"
        if st.published_ms is None:
            return False, "no replica report published yet"
        age = (self.clock.monotonic_ms() - st.published_ms) / 1000
        if age > self.settings.replica_timeout:
            return False, f"last replica report {age:.1f}s ago"
        return True, f"replica {self.settings.replica} reported {age:.1f}s ago"

    # -- the limit the other replicas set ----------------------------------------------
    async def new_tick(self) -> None:
        """Set :attr:`cl_limit` for the tick that starts (reads the reports when limited)."""
        if self.limited:
            self.cl_limit = await self.limit(await asyncio.to_thread(held_end, self.hot))

    async def limit(self, hot_end: int | None = None) -> int | None:
        """The commitlog offset tiering may not pass now, or None when nothing limits it.

        The lowest ``confirmed`` of the other replicas whose report is live; 0 (tier
        nothing) while a replica not heard from yet may still report (the first
        ``replica_timeout`` of this process) or when the reports cannot be read; None
        when the group is a single broker or no other replica is live. ``hot_end``
        (this store's :func:`held_end`) only feeds the lag gauge.
        """
        if not self.limited:
            return None
        try:
            reports = await read_reports(self.backend, self.cluster, self.broker)
        except TieredStoreError as exc:
            log.warning("replica reports unreadable, tiering nothing this tick: %s", exc)
            return 0
        now = self.clock.monotonic_ms()
        live = [r for r in reports if r.replica != self.settings.replica and self._live(r, now)]
        self._log_changes(reports, live)
        expected = self.settings.replicas - 1
        missing = max(0, expected - len(live))
        self.metrics.replicas_confirming.set(len(live))
        self.metrics.replicas_missing.set(missing)
        cap: int | None
        if missing and now - self._started_ms < self.settings.replica_timeout * 1000:
            cap = min((r.confirmed for r in live), default=0)
        elif live:
            cap = min(r.confirmed for r in live)
        else:
            cap = None
        self.metrics.confirmed_offset.set(-1 if cap is None else cap)
        if hot_end is not None:
            self.metrics.unconfirmed_bytes.set(0 if cap is None else max(0, hot_end - cap))
        return cap

    def _live(self, report: ReplicaReport, now: int) -> bool:
        seen = self._seen.get(report.replica)
        if seen is None or seen.beat != report.beat:
            seen = self._seen[report.replica] = _Seen(report.beat, now)
        return now - seen.since_ms <= self.settings.replica_timeout * 1000

    def _log_changes(self, reports: list[ReplicaReport], live: list[ReplicaReport]) -> None:
        names = {r.replica for r in live}
        stale = {r.replica for r in reports if r.replica != self.settings.replica} - names
        for name in sorted(stale - self._missing):
            log.warning(
                "replica %s stopped reporting (unchanged for %ss): tiering goes on without "
                "its confirmation; cold may get ahead of its store",
                name, self.settings.replica_timeout,
            )  # fmt: skip
        for name in sorted(self._missing & names):
            log.info("replica %s reports again: tiering waits for it again", name)
        self._missing = (self._missing | stale) - names
