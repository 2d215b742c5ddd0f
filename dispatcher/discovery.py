"""Queue discovery: which queues the dispatcher tiers, and the gauges of those it does not.

Each tick lists the queues in the hot store (new topics appear while running) and creates
catalogue rows for new ones **eagerly** (one transaction: init offset, cold CQ base, cold
CL base — no half-initialised queue exists). A topic the cold store cannot name is
refused once, loudly, and skipped from then on. A PAUSED or DIVERGED queue is not tiered,
but its gauges stay current and the operator is told once what to do about it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from tieredstore.cold.layout import validate_topic
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.dispatcher.shared_state import SharedState
from tieredstore.dispatcher.topic_filter import TopicFilter
from tieredstore.errors import InvalidNameError, TieredStoreError
from tieredstore.hot.store import HotRange, HotStore, QueueKey, SkippedDir
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueRow, QueueState
from tieredstore.settings.in_force import SettingsInForce
from tieredstore.settings.loader import InitStart, TieringSettings

__all__ = ["Discovery"]

log = logging.getLogger(__name__)


class Discovery:
    """Finds the queues to tier; see the module docstring.

    The ``[tiering]`` settings are read from ``in_force`` at each use, so a reload's init
    policy and topic filter apply to queues seen from then on. ``states`` (shared with the
    committer) says which queues this process stopped, and which the operator was already
    told about.
    """

    def __init__(
        self,
        *,
        hot: HotStore,
        catalogue: Catalogue,
        metrics: Metrics,
        in_force: SettingsInForce,
        states: SharedState,
    ) -> None:
        self.hot = hot
        self.catalogue = catalogue
        self.metrics = metrics
        self.in_force = in_force
        self.states = states
        self._refused: set[str] = set()  # topics whose names the cold store cannot hold
        self._skipped_seen: set[str] = set()  # skipped directories and queues, told once
        self._skipped_now = 0  # skipped this tick (the gauge)
        #: Queues the last :meth:`discover` created rows for.
        self.new_queues: list[QueueKey] = []
        #: The hot range each of them was initialised from (read once per new queue: the
        #: init records reuse it, :meth:`ProvenanceWriter.ensure_inits`).
        self.new_ranges: dict[QueueKey, HotRange] = {}

    @property
    def tiering(self) -> TieringSettings:
        """The ``[tiering]`` settings in force now (read from ``in_force``)."""
        return self.in_force.tiering

    def _init_offset(self, key: QueueKey) -> tuple[int, HotRange]:
        """The new queue's init offset by the policy, and the hot range it was chosen in."""
        rng = self.hot.queue_range(key.topic, key.queue_id)
        policy = self.tiering.init_policy
        if policy.start is InitStart.LATEST:
            return rng.max, rng
        if policy.start is InitStart.TIMESTAMP:
            return self.hot.offset_by_time(key.topic, key.queue_id, policy.timestamp_ms), rng
        return rng.min, rng

    async def discover(self) -> list[QueueRow]:
        """Return ACTIVE queue rows, creating rows for queues seen for the first time
        (all of one discovery's new queues in one catalogue transaction).

        A directory the hot store cannot name as a queue, or a new queue whose consume
        queue cannot be read, is skipped with one ERROR line (per process) and counted
        in ``tieredstore_queues_skipped``; every other queue goes on. Each tick looks
        again: a directory fixed meanwhile is tiered from then on.
        """
        scan = await asyncio.to_thread(self.hot.scan_queues)
        self._skip(scan.skipped)
        keys = list(scan.queues)
        topics = TopicFilter.of(self.tiering)
        known: dict[QueueKey, QueueRow] = {}
        fresh: list[QueueKey] = []
        for key in keys:
            if not topics.accepts(key.topic) or key.topic in self._refused:
                continue
            row = self.catalogue.queues.get(key.topic, key.queue_id)
            if row is not None:
                known[key] = row
            elif self._nameable(key):
                fresh.append(key)
        known |= await self._initialise(fresh)
        rows: list[QueueRow] = []
        for key in keys:
            row = known.get(key)
            if row is None:
                continue  # filtered out or refused
            if self.states.is_stopped(key):  # stopped by the committer, reason and all
                self.metrics.set_queue_state(key.topic, key.queue_id, QueueState.STOPPED)
                continue
            self.metrics.set_queue_state(key.topic, key.queue_id, row.state)
            if row.state is QueueState.ACTIVE:
                rows.append(row)
            elif row.state in (QueueState.PAUSED, QueueState.DIVERGED):
                await self._watch_stopped(row)
        self.new_queues = fresh
        await self._update_losses()
        return rows

    def _nameable(self, key: QueueKey) -> bool:
        """Whether the cold store can name the topic; refused once, loudly, if not (the
        other topics go on)."""
        try:
            validate_topic(key.topic)
        except InvalidNameError as exc:
            self._refused.add(key.topic)
            log.error("topic %r is not tiered: %s", key.topic, exc)
            self.metrics.errors.labels("InvalidNameError").inc()
            return False
        return True

    def _skip(self, skipped: Sequence[SkippedDir]) -> None:
        """Say once per process, loudly, which directories are no queue to tier."""
        for entry in skipped:
            if entry.path not in self._skipped_seen:
                self._skipped_seen.add(entry.path)
                log.error("consume-queue directory skipped, not tiered: %s", entry)
                self.metrics.errors.labels("SkippedQueueDirectory").inc()
        self._skipped_now = len(skipped)
        self.metrics.queues_skipped.set(self._skipped_now)

    def _init_offsets(self, fresh: Sequence[QueueKey]) -> dict[QueueKey, tuple[int, HotRange]]:
        """Init offsets of new queues and their hot ranges (blocking); a queue whose
        consume queue cannot be read is left out, with one ERROR line (per process and
        reason)."""
        out: dict[QueueKey, tuple[int, HotRange]] = {}
        for key in fresh:
            try:
                out[key] = self._init_offset(key)
            except TieredStoreError as exc:
                self._skipped_now += 1
                said = f"{key}: {exc}"
                if said not in self._skipped_seen:
                    self._skipped_seen.add(said)
                    log.error("queue %s skipped, not tiered: %s", key, exc)
                    self.metrics.errors.labels(type(exc).__name__).inc()
        return out

    async def _initialise(self, fresh: list[QueueKey]) -> dict[QueueKey, QueueRow]:
        """Create the rows of queues seen for the first time (init offsets by the
        policy, read from the hot store in one thread hop)."""
        self.new_ranges = {}
        if not fresh:
            return {}
        offsets = await asyncio.to_thread(self._init_offsets, fresh)
        self.metrics.queues_skipped.set(self._skipped_now)
        fresh[:] = [k for k in fresh if k in offsets]
        inits = [offsets[k][0] for k in fresh]
        self.new_ranges = {k: offsets[k][1] for k in fresh}
        if not fresh:
            return {}
        created = self.catalogue.queues.ensure_many(
            [(k.topic, k.queue_id, init) for k, init in zip(fresh, inits, strict=True)]
        )
        for key, init in zip(fresh, inits, strict=True):
            log.info("queue %s initialised at offset %d (%s)", key, init, self.tiering.init_policy)
        return dict(zip(fresh, created, strict=True))

    async def _watch_stopped(self, row: QueueRow) -> None:
        """Keep a PAUSED or DIVERGED queue's gauges current, and say once (per process
        and state) what the operator must do about it."""
        try:
            rng = await asyncio.to_thread(self.hot.queue_range, row.topic, row.queue_id)
        except TieredStoreError:
            return  # the next tick tries again; tiering of the queue is stopped anyway
        labels = (row.topic, str(row.queue_id))
        lost = max(rng.min - row.cold_commit, 0) if row.state is QueueState.PAUSED else 0
        self.metrics.lag_messages.labels(*labels).set(max(rng.max - row.cold_commit, 0))
        self.metrics.lost_unacknowledged.labels(*labels).set(lost)
        self.metrics.cold_ahead.labels(*labels).set(max(row.cold_commit - rng.max, 0))
        if not self.states.first_reminder(QueueKey(row.topic, row.queue_id), row.state):
            return
        flags = f"--topic {row.topic} --queue {row.queue_id}"
        if row.state is QueueState.PAUSED:
            log.error(
                "queue %s is PAUSED and not tiered: offsets [%d, %d) were deleted by the "
                "broker before they were tiered; record the loss and resume with "
                "`tieredstore resume %s --accept-loss`",
                row, row.cold_commit, max(rng.min, row.cold_commit), flags,
            )  # fmt: skip
        else:
            log.error(
                "queue %s is DIVERGED and not tiered (hot [%d, %d), cold commit %d); "
                "run `tieredstore repair %s`",
                row, rng.min, rng.max, row.cold_commit, flags,
            )  # fmt: skip

    async def _update_losses(self) -> None:
        """Set the accepted-loss gauge of every queue with a loss record."""
        totals: dict[tuple[str, int], int] = {}
        for loss in await asyncio.to_thread(self.catalogue.queues.losses):
            key = (loss.topic, loss.queue_id)
            totals[key] = totals.get(key, 0) + loss.count
        for (topic, queue_id), count in totals.items():
            self.metrics.lost_accepted.labels(topic, str(queue_id)).set(count)
