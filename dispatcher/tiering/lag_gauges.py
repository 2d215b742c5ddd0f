"""The per-queue lag and retention-headroom gauges, set from a plan alone.

Planning refreshes them from the hot store and the catalogue, never the backend: while
the cold store is down they still show what is waiting and how close the broker's own
retention is to deleting it (:mod:`tieredstore.dispatcher.retention_pressure`).
"""

from __future__ import annotations

from tieredstore.clock import Clock
from tieredstore.dispatcher.metrics import Metrics, QueueLagGauges
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
    gauges = metrics.per_queue.lag(row.topic, row.queue_id)
    gauges.lag_messages.set(max(hot.max - row.cold_commit, 0))
    gauges.cold_ahead.set(0)
    if isinstance(outcome, HotDataLost):
        gauges.lost_unacknowledged.set(outcome.end - outcome.start)
        gauges.headroom_bytes.set(0)
        gauges.headroom_seconds.set(0)
        return
    gauges.lost_unacknowledged.set(0)
    gauges.lag_bytes.set(outcome.pending_bytes)
    oldest = outcome.oldest_ms
    age = (clock.now_ms() - oldest) / 1000 if oldest is not None else 0.0
    gauges.lag_seconds.set(max(age, 0.0))
    _set_headroom(gauges, oldest_file, outcome)


def _set_headroom(
    gauges: QueueLagGauges, oldest_file: HotOldest | None, outcome: SegmentPlan | Wait
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
    gauges.headroom_bytes.set(room.bytes)
    gauges.headroom_seconds.set(room.seconds)
