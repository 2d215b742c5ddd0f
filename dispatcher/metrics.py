"""Dispatcher metrics (Prometheus), one registry per dispatcher so tests stay isolated.

Lag gauges are refreshed every tick from the hot store and the catalogue alone — they
need no backend call, so they keep moving while the backend is down.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Metrics"]


class Metrics:
    """All metrics of one sidecar."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
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
            "1 for the queue's current state (ACTIVE, PAUSED, DIVERGED, DELETED)",
            ["topic", "queue", "state"],
            registry=r,
        )
        self.hot_data_lost = Counter(
            "tieredstore_hot_messages_lost_before_tiering",
            "Messages the broker deleted before they were tiered",
            ["topic", "queue"],
            registry=r,
        )
        self.expired_segments = Counter(
            "tieredstore_expired_segments", "Segments deleted by retention", registry=r
        )
        self.lease_held = Gauge(
            "tieredstore_lease_held", "1 while this sidecar holds the lease", registry=r
        )
        self.lease_epoch = Gauge("tieredstore_lease_epoch", "Epoch of the lease held", registry=r)
        self.ticks = Counter("tieredstore_ticks", "Dispatcher ticks run", registry=r)
        self.last_tick = Gauge(
            "tieredstore_last_tick_timestamp_seconds", "When the last tick finished", registry=r
        )

    def set_queue_state(self, topic: str, queue: int, state: str) -> None:
        for s in ("ACTIVE", "PAUSED", "DIVERGED", "DELETED"):
            self.queue_state.labels(topic, str(queue), s).set(1 if s == state else 0)
