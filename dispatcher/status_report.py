"""Per-queue status: the catalogue joined with the broker store's current state.

What ``tieredstore status`` prints and the HTTP API's ``/v1/queues`` serves: hot
min/max, cold min/commit, lag, state, losses and retention headroom of each queue
(:func:`collect`). Reads the broker store and catalogue rows only; it never contacts the
cold store.

The writer — is a sidecar tiering this broker? — is judged here too
(:func:`writer_status`). ``status`` judges it from the catalogue's mirror of the lease
(:meth:`tieredstore.metadata.catalogue.Catalogue.lease`, written by the sidecar when it takes the
lease, at each renewal and when it releases it) and from the queues' last change
(``updated_at_ms``: a commit moves it):

==============  ==========================================================  =========
state           when                                                        verdict
==============  ==========================================================  =========
``HELD``        the mirrored hold has not ended, and there is no stall      —
``STALLED``     held, messages wait, and no queue moved for ``stall_after``  WARNING
``NOT_HELD``    the hold ended (a release, or a renewal that never came)    WARNING
                or none was ever recorded                                   if lag
==============  ==========================================================  =========

Without lag, nobody holding the lease is not a problem (a ``run --once`` from cron).
The times are the sidecar's wall clock compared with this host's. A sidecar that has
just taken over a backlog counts as stalled only once ``stall_after`` passes without
its first commit.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tieredstore.cold.loss import LossRecord
from tieredstore.dispatcher.retention_pressure import Headroom, HotOldest, hot_oldest
from tieredstore.errors import TieredStoreError
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.humanize import human_seconds, iso_time
from tieredstore.metadata.rows import LeaseRow, QueueRow, QueueState

__all__ = [
    "LossStatus",
    "QueueStatus",
    "WriterState",
    "WriterStatus",
    "as_json",
    "collect",
    "mark_stopped",
    "untiered",
    "writer_status",
]


@dataclass(frozen=True, slots=True)
class LossStatus:
    """One accepted loss: ``[start, end)``, when and by whom."""

    start: int
    end: int
    accepted_at_ms: int
    writer_id: str


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue as ``status`` and ``/v1/queues`` show it (:func:`as_json` for JSON)."""

    topic: str
    queue: int
    state: QueueState
    hot_min: int
    hot_max: int
    cold_min: int
    cold_commit: int
    lag_messages: int
    lag_bytes: int
    lag_seconds: float
    note: str
    retention_headroom_bytes: int | None = None
    retention_headroom_seconds: float | None = None
    lost_unacknowledged: int = 0
    lost_accepted: int = 0
    losses: list[LossStatus] = field(default_factory=list)


def as_json(status: QueueStatus) -> dict[str, Any]:
    """The queue as ``status --json`` and ``/v1/queues`` give it: its fields by name, the
    state as its name (``"ACTIVE"``)."""
    return asdict(status) | {"state": status.state.value}


def collect(
    hot: HotStore,
    rows: Sequence[QueueRow],
    now_ms: int,
    losses: Sequence[LossRecord] = (),
) -> list[QueueStatus]:
    """Join catalogue rows (and accepted ``losses``) with the hot store's current state."""
    by_queue: dict[tuple[str, int], list[LossStatus]] = {}
    for loss in losses:
        entry = LossStatus(loss.start_offset, loss.end_offset, loss.accepted_at_ms, loss.writer_id)
        by_queue.setdefault((loss.topic, loss.queue_id), []).append(entry)
    oldest = hot_oldest(hot)
    out: list[QueueStatus] = []
    for row in rows:
        status = _one(hot, row, now_ms, oldest)
        accepted = by_queue.get((row.topic, row.queue_id), [])
        lost = sum(x.end - x.start for x in accepted)
        out.append(replace(status, losses=accepted, lost_accepted=lost))
    return out


def _one(hot: HotStore, row: QueueRow, now_ms: int, oldest: HotOldest | None) -> QueueStatus:
    note = ""
    room: Headroom | None = None
    try:
        rng = hot.queue_range(row.topic, row.queue_id)
        lag = max(rng.max - row.cold_commit, 0)
        lag_bytes, lag_s = 0, 0.0
        start = max(row.cold_commit, rng.min)
        if start < rng.max:
            units = hot.read_units(row.topic, row.queue_id, start, rng.max)
            lag_bytes = int(units["size"].sum())
            first = int(units["commitlog_offset"][0])
            ts = hot.read_store_timestamp(first)
            lag_s = max(now_ms - ts, 0) / 1000
            room = oldest.headroom(first, ts) if oldest is not None else None
        else:
            room = Headroom.none_pending()
        lost = max(rng.min - row.cold_commit, 0)
        if rng.max < row.cold_commit:
            note = f"hot max below cold commit: cold is {row.cold_commit - rng.max} ahead"
        elif lost:
            note = f"hot offsets [{row.cold_commit}, {rng.min}) deleted before tiering"
            room = Headroom.lost()
    except TieredStoreError as exc:
        rng_min = rng_max = -1
        lag, lag_bytes, lag_s, lost, note = 0, 0, 0.0, 0, str(exc)
    else:
        rng_min, rng_max = rng.min, rng.max
    return QueueStatus(
        topic=row.topic,
        queue=row.queue_id,
        state=row.state,
        hot_min=rng_min,
        hot_max=rng_max,
        cold_min=row.cold_min,
        cold_commit=row.cold_commit,
        lag_messages=lag,
        lag_bytes=lag_bytes,
        lag_seconds=lag_s,
        note=note,
        retention_headroom_bytes=int(room.bytes) if room and room.finite else None,
        retention_headroom_seconds=room.seconds if room and room.finite else None,
        lost_unacknowledged=lost,
    )


def mark_stopped(
    statuses: Sequence[QueueStatus],
    stopped: Mapping[QueueKey, str],
    degraded: Mapping[QueueKey, str] | None = None,
) -> list[QueueStatus]:
    """The running sidecar's view: queues it STOPPED show that state and the reason
    (``stopped[queue]``, naming the key or offset) instead of the catalogue's; queues
    whose committed history it found damaged (``degraded``) show DEGRADED and the
    finding. STOPPED wins over DEGRADED, both over the catalogue's state."""
    out = []
    for s in statuses:
        key = QueueKey(s.topic, s.queue)
        if reason := stopped.get(key):
            s = replace(s, state=QueueState.STOPPED, note=reason)
        elif degraded and (reason := degraded.get(key)):
            s = replace(s, state=QueueState.DEGRADED, note=reason)
        out.append(s)
    return out


def untiered(hot: HotStore, rows: Sequence[QueueRow]) -> tuple[int, int]:
    """(messages, queues) the hot store holds beyond the cold commit of the ACTIVE
    ``rows`` (blocking): what a stopped pass leaves for the next run. A queue the hot
    store cannot read is skipped."""
    messages = queues = 0
    for row in rows:
        if row.state is not QueueState.ACTIVE:
            continue
        try:
            hot_max = hot.queue_range(row.topic, row.queue_id).max
        except TieredStoreError:
            continue
        if hot_max > row.cold_commit:
            messages += hot_max - row.cold_commit
            queues += 1
    return messages, queues


class WriterState(enum.Enum):
    HELD = "held"
    STALLED = "stalled"
    NOT_HELD = "not_held"


@dataclass(frozen=True, slots=True)
class WriterStatus:
    """The writer as ``status`` sees it: ``warning`` (short, None when nothing is wrong)
    and ``detail`` (who: the last or current holder), which the health line puts after
    the lag, so that a narrow screen cuts the owner's long name before the lag."""

    state: WriterState
    holder: str  # the current or last holder ("" when none was ever recorded)
    since_ms: int | None  # NOT_HELD: when the hold ended; STALLED: the last progress
    warning: str | None
    detail: str = ""


def writer_status(
    lease: LeaseRow | None,
    rows: Sequence[QueueRow],
    *,
    lag_messages: int,
    now_ms: int,
    stall_after_s: float,
) -> WriterStatus:
    """Judge the writer (module docstring) from the mirrored ``lease``, the queue ``rows``
    and the total lag in messages."""
    if lease is None or not lease.owner or lease.expires_at_ms <= now_ms:
        holder = lease.owner if lease is not None else ""
        since = lease.expires_at_ms if lease is not None and lease.owner else None
        if since is None:
            text = "no sidecar holds the writer lease (none recorded in this state dir)"
        else:
            text = f"no sidecar holds the writer lease since {iso_time(since)}"
        return WriterStatus(
            WriterState.NOT_HELD,
            holder,
            since,
            text if lag_messages else None,
            f"last holder {holder}" if holder and lag_messages else "",
        )
    progress = max((r.updated_at_ms for r in rows), default=lease.updated_at_ms)
    idle_s = (now_ms - progress) / 1000
    if lag_messages and idle_s >= stall_after_s:
        text = (
            f"the lease holder made no progress for {human_seconds(idle_s)} "
            f"(since {iso_time(progress)})"
        )
        detail = f"lease holder {lease.owner}"
        return WriterStatus(WriterState.STALLED, lease.owner, progress, text, detail)
    return WriterStatus(WriterState.HELD, lease.owner, None, None)
