"""Dispatcher metrics (Prometheus), one registry per dispatcher so tests stay isolated.

Lag gauges are refreshed every tick from the hot store and the catalogue alone — they
need no backend call, so they keep moving while the backend is down.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tieredstore.metadata.rows import QueueState

__all__ = ["GAUGE_STATES", "Metrics", "PerQueueGauges", "QueueLagGauges"]

#: The ``state`` labels of ``tieredstore_queue_state``, in the order they are exported:
#: every queue state but DEGRADED, which ``tieredstore_queue_cold_damaged`` says.
#: :meth:`Metrics.set_queue_state` sets the queue's ``state`` label to 1, the others to 0.
GAUGE_STATES: Final = tuple(s for s in QueueState if s is not QueueState.DEGRADED)


@dataclass(frozen=True, slots=True)
class QueueLagGauges:
    """One queue's lag, loss and retention-headroom gauges (their labelled children),
    as planning sets them every tick (:meth:`Metrics.queue_lag`)."""

    lag_messages: Gauge
    lag_bytes: Gauge
    lag_seconds: Gauge
    cold_ahead: Gauge
    lost_unacknowledged: Gauge
    headroom_bytes: Gauge
    headroom_seconds: Gauge


class Metrics:
    """All metrics of one sidecar."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._tiering(self.registry)
        self._batching(self.registry)
        self._queues(self.registry)
        self._guard(self.registry)
        self._spool(self.registry)
        self._lifecycle(self.registry)
        self._reads(self.registry)
        self.per_queue = PerQueueGauges(self)  # labelled once per queue

    def _tiering(self, r: CollectorRegistry) -> None:
        """What was tiered, and the cold-store requests it took."""
        self.bytes_tiered = Counter(
            "tieredstore_bytes_tiered", "Commitlog bytes committed to cold", registry=r
        )
        self.messages_tiered = Counter(
            "tieredstore_messages_tiered", "Messages committed to cold", registry=r
        )
        self.segments_tiered = Counter(
            "tieredstore_segments_tiered", "Segments committed to cold", ["reason"], registry=r
        )
        self.upload_seconds = Histogram(
            "tieredstore_segment_upload_seconds",
            "Time to upload and commit one segment",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=r,
        )
        self.retries = Counter(
            "tieredstore_backend_retries", "Backend calls retried", ["operation"], registry=r
        )
        self.errors = Counter("tieredstore_errors", "Errors by class", ["error_class"], registry=r)
        self.backend_requests = Counter(
            "tieredstore_backend_requests",
            "Requests made to the cold store by operation (S3: one per HTTP request)",
            ["operation"],
            registry=r,
        )
        self.backend_bytes = Counter(
            "tieredstore_backend_bytes",
            "Payload bytes read from and written to the cold store by operation",
            ["operation"],
            registry=r,
        )
        self.upload_rate_limit = Gauge(
            "tieredstore_upload_rate_limit_bytes_per_second",
            "Upload bandwidth limit in effect (tiering.max_bytes_per_second; 0 = none)",
            registry=r,
        )
        self.upload_throttled = Counter(
            "tieredstore_upload_throttled_seconds",
            "Time segment uploads waited for the upload bandwidth limit",
            registry=r,
        )

    def _batching(self, r: CollectorRegistry) -> None:
        """Batch objects (``tiering.batching``): committed, their slices, compaction."""
        self.batches_committed = Counter(
            "tieredstore_batches_committed",
            "Batch objects committed (tiering.batching)",
            registry=r,
        )
        self.slices_tiered = Counter(
            "tieredstore_slices_tiered",
            "Batch slices committed to cold (each also counted in _segments_tiered_total)",
            registry=r,
        )
        self.slices_compacted = Counter(
            "tieredstore_slices_compacted", "Batch slices rewritten as segments", registry=r
        )
        self.batches_deleted = Counter(
            "tieredstore_batches_deleted",
            "Batch objects deleted (nothing refers to them)",
            registry=r,
        )

    def _queues(self, r: CollectorRegistry) -> None:
        """Per queue: lag and state."""
        self.lag_messages = Gauge(
            "tieredstore_queue_lag_messages",
            "Hot messages not yet in cold",
            ["topic", "queue"],
            registry=r,
        )
        self.lag_bytes = Gauge(
            "tieredstore_queue_lag_bytes",
            "Hot bytes not yet in cold",
            ["topic", "queue"],
            registry=r,
        )
        self.lag_seconds = Gauge(
            "tieredstore_queue_lag_seconds",
            "Age of the oldest hot message not yet in cold",
            ["topic", "queue"],
            registry=r,
        )
        self.queue_state = Gauge(
            "tieredstore_queue_state",
            "1 for the queue's current state (ACTIVE, PAUSED, DIVERGED, DELETED; STOPPED: "
            "cold holds a manifest of a newer format at its frontier, or a hot record "
            "disagrees with its consume-queue unit; nothing more is uploaded)",
            ["topic", "queue", "state"],
            registry=r,
        )
        self.queues_skipped = Gauge(
            "tieredstore_queues_skipped",
            "Consume-queue directories discovery skips (a name that is not UTF-8 or not a "
            "queue id, a directory or consume queue that cannot be read); each is logged",
            registry=r,
        )
        self.queue_damaged = Gauge(
            "tieredstore_queue_cold_damaged",
            "1 while cold damage was found in the queue's committed history, at start or "
            "by a tick (a manifest or batch object missing, cut short or not checking, "
            "an object of the wrong size): status says DEGRADED",
            ["topic", "queue", "kind"],
            registry=r,
        )
        self.cold_ranges_retiered = Counter(
            "tieredstore_cold_ranges_retiered",
            "Lost committed tails tiered again from hot (their manifests were gone from "
            "cold while the broker still held the offsets); each is recorded in cold",
            ["topic", "queue"],
            registry=r,
        )
        self._losses(r)

    def _losses(self, r: CollectorRegistry) -> None:
        """Per queue: data lost before tiering, retention headroom, cold ahead of hot."""
        self.hot_data_lost = Counter(
            "tieredstore_hot_messages_lost_before_tiering",
            "Messages the broker deleted before they were tiered",
            ["topic", "queue"],
            registry=r,
        )
        self.lost_unacknowledged = Gauge(
            "tieredstore_queue_lost_unacknowledged_messages",
            "Messages the broker deleted before they were tiered, not yet accepted as lost "
            "(the queue is PAUSED until tieredstore resume --accept-loss)",
            ["topic", "queue"],
            registry=r,
        )
        self.lost_accepted = Gauge(
            "tieredstore_queue_lost_accepted_messages",
            "Messages recorded as lost before tiering (loss records in cold, accepted by resume)",
            ["topic", "queue"],
            registry=r,
        )
        self.retention_headroom_bytes = Gauge(
            "tieredstore_queue_retention_headroom_bytes",
            "Commitlog bytes the broker holds before the queue's oldest untiered message "
            "(its retention deletes them first); +Inf when nothing is untiered",
            ["topic", "queue"],
            registry=r,
        )
        self.retention_headroom_seconds = Gauge(
            "tieredstore_queue_retention_headroom_seconds",
            "Seconds of traffic the broker holds before the queue's oldest untiered message; "
            "+Inf when nothing is untiered",
            ["topic", "queue"],
            registry=r,
        )
        self.cold_ahead = Gauge(
            "tieredstore_queue_cold_ahead_messages",
            "Offsets cold holds beyond the hot max (the broker rewound: lost data cold has)",
            ["topic", "queue"],
            registry=r,
        )

    def _guard(self, r: CollectorRegistry) -> None:
        """The durability guard (``tiering.guard``)."""
        self.guard_mode = Gauge(
            "tieredstore_guard_mode",
            "1 for the durability rule in force (sync, checkpoint, none); sync falls back "
            "to checkpoint when the store refuses fdatasync",
            ["mode"],
            registry=r,
        )
        self.guard_syncs = Counter(
            "tieredstore_guard_synced_files",
            "Broker commitlog files fdatasync'ed before their records were tiered",
            registry=r,
        )
        self.guard_sync_seconds = Histogram(
            "tieredstore_guard_sync_seconds",
            "Time to make a segment's records durable (fdatasync of the commitlog files)",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
            registry=r,
        )
        self.guard_sync_failures = Counter(
            "tieredstore_guard_sync_failures",
            "fdatasync refused by the store's filesystem (the guard fell back to checkpoint)",
            registry=r,
        )

    def _lifecycle(self, r: CollectorRegistry) -> None:
        """Expiry, the lease, fencing and ticks."""
        self.expired_segments = Counter(
            "tieredstore_expired_segments", "Segments deleted by retention", registry=r
        )
        self.lease_held = Gauge(
            "tieredstore_lease_held", "1 while this sidecar holds the lease", registry=r
        )
        self.lease_epoch = Gauge("tieredstore_lease_epoch", "Epoch of the lease held", registry=r)
        self.fenced = Counter(
            "tieredstore_fenced",
            "Times this sidecar found it had lost the writer lease and stopped writing",
            registry=r,
        )
        self.cold_access_refused = Gauge(
            "tieredstore_cold_access_refused",
            "1 while the cold store refuses this sidecar's op requests (fault: why)",
            ["fault", "op"], registry=r,
        )  # fmt: skip
        self.ticks = Counter("tieredstore_ticks", "Dispatcher ticks run", registry=r)
        self.last_tick = Gauge(
            "tieredstore_last_tick_timestamp_seconds", "When the last tick finished", registry=r
        )

    def _spool(self, r: CollectorRegistry) -> None:
        """The tiering spool in the state dir (:mod:`tieredstore.dispatcher.tiering.spool_room`)."""
        self.spool_too_small = Gauge(
            "tieredstore_spool_too_small",
            "1 while a segment does not fit the spool alone (state dir disk too small or "
            "tiering.spool_max_bytes too low): nothing is tiered for that queue",
            registry=r,
        )

    def _reads(self, r: CollectorRegistry) -> None:
        """The read service (the broker plugin's and ``/v1/messages``' requests)."""
        self.read_requests = Counter(
            "tieredstore_read_requests",
            "Read API requests by endpoint and outcome (ok, bad_request, out_of_range, "
            "unavailable, error)",
            ["endpoint", "outcome"],
            registry=r,
        )
        self.read_bytes = Counter(
            "tieredstore_read_bytes", "Record bytes served by the read API", registry=r
        )
        self.readahead_bytes = Gauge(
            "tieredstore_readahead_bytes",
            "Bytes the read-ahead cache holds or is fetching (bounded by reads.cache_bytes)",
            registry=r,
        )
        self.readahead_fetched = Counter(
            "tieredstore_readahead_fetched_bytes",
            "Bytes the read-ahead cache fetched from the cold store",
            registry=r,
        )

    def set_guard_mode(self, mode: str) -> None:
        for m in ("sync", "checkpoint", "none"):
            self.guard_mode.labels(m).set(1 if m == mode else 0)

    def set_queue_state(self, topic: str, queue: int, state: QueueState) -> None:
        self.per_queue.show_state(topic, queue, state)


class PerQueueGauges:
    """A metrics' per-queue gauges, labelled once per queue and kept (no label is ever
    removed): ``labels()`` validates and locks on every call, and planning set eleven of
    them per queue and tick."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self._lag: dict[tuple[str, int], QueueLagGauges] = {}
        self._states: dict[tuple[str, int], tuple[tuple[QueueState, Gauge], ...]] = {}

    def lag(self, topic: str, queue_id: int) -> QueueLagGauges:
        """The queue's lag, loss and headroom gauges."""
        gauges = self._lag.get((topic, queue_id))
        if gauges is None:
            m, labels = self.metrics, (topic, str(queue_id))
            gauges = self._lag[(topic, queue_id)] = QueueLagGauges(
                m.lag_messages.labels(*labels),
                m.lag_bytes.labels(*labels),
                m.lag_seconds.labels(*labels),
                m.cold_ahead.labels(*labels),
                m.lost_unacknowledged.labels(*labels),
                m.retention_headroom_bytes.labels(*labels),
                m.retention_headroom_seconds.labels(*labels),
            )
        return gauges

    def show_state(self, topic: str, queue_id: int, state: QueueState) -> None:
        """1 for the queue's ``state`` label of ``tieredstore_queue_state``, 0 for the
        others (:data:`GAUGE_STATES`)."""
        gauges = self._states.get((topic, queue_id))
        if gauges is None:
            label = str(queue_id)
            gauges = self._states[(topic, queue_id)] = tuple(
                (s, self.metrics.queue_state.labels(topic, label, s.value)) for s in GAUGE_STATES
            )
        for s, gauge in gauges:
            gauge.set(1 if s is state else 0)
