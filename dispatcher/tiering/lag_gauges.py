"""The per-queue lag and retention-headroom gauges, set from a plan alone.

Planning refreshes them from the hot store and the catalogue, never the backend: while
the cold store is down they still show what is waiting and how close the broker's own
retention is to deleting it (:mod:`tieredstore.dispatcher.retention_pressure`).
"""

from __future__ import annotations

from tieredstore.clock import Clock
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.dispatcher.retention_pressure import Headroom, HotOldest
from tieredstore.dispatcher.tiering.planner import HotDataLost, SegmentPlan, Wait
from tieredstore.metadata.rows import QueueRow

__all__ = ["set_lag"]


def set_lag(
    metrics: Metrics,
    clock: Clock,
    oldest_file: HotOldest | None,
    row: QueueRow,
    outcome: SegmentPlan | Wait | HotDataLost,
) -> None:
    """Set ``row``'s lag gauges from its plan (also for a ready segment: if its upload
    then fails, the gauges still show what is waiting). ``oldest_file`` is the broker's
    oldest commitlog file this tick (None: unreadable, headroom left unchanged)."""
    hot = outcome.hot
    labels = (row.topic, str(row.queue_id))
    metrics.lag_messages.labels(*labels).set(max(hot.max - row.cold_commit, 0))
    metrics.cold_ahead.labels(*labels).set(0)
    if isinstance(outcome, HotDataLost):
        metrics.lost_unacknowledged.labels(*labels).set(outcome.end - outcome.start)
        metrics.retention_headroom_bytes.labels(*labels).set(0)
        metrics.retention_headroom_seconds.labels(*labels).set(0)
        return
    metrics.lost_unacknowledged.labels(*labels).set(0)
    metrics.lag_bytes.labels(*labels).set(outcome.pending_bytes)
    oldest = outcome.oldest_ms
    age = (clock.now_ms() - oldest) / 1000 if oldest is not None else 0.0
    metrics.lag_seconds.labels(*labels).set(max(age, 0.0))
    _set_headroom(metrics, oldest_file, labels, outcome)


def _set_headroom(
    metrics: Metrics,
    oldest_file: HotOldest | None,
    labels: tuple[str, str],
    outcome: SegmentPlan | Wait,
) -> None:
    """Retention pressure of the oldest pending message."""
    cl: int | None = outcome.oldest_cl
    ms: int | None = outcome.oldest_ms
    if cl is None or ms is None:
        room = Headroom.none_pending()
    elif oldest_file is None:
        return  # the broker's oldest file could not be read this tick
    else:
        room = oldest_file.headroom(cl, ms)
    metrics.retention_headroom_bytes.labels(*labels).set(room.bytes)
    metrics.retention_headroom_seconds.labels(*labels).set(room.seconds)
