"""Deciding what to tier next for one queue: the group-commit rules.

Given a queue's cold commit offset and the hot store, :func:`plan_segment` answers with
either a :class:`SegmentPlan` (tier queue offsets ``[start, end)`` now) or a
:class:`Wait` saying why not. It reads only consume-queue units and a few record headers;
the records themselves are read while uploading.

The rules, in order:

1. Hot max below the cold commit offset: the broker lost data cold already has —
   :class:`~tieredstore.errors.DivergedError`.
2. Hot min above the cold commit offset: the broker deleted data before it was
   tiered — :class:`HotDataLost` with the exact lost range (never silently skipped).
3. Nothing pending: ``Wait(IDLE)``.
4. Candidates are at most ``segment_max_messages`` units and at most
   ``segment_max_bytes`` bytes (but at least one record: a record larger than the byte
   limit is its own segment — never a stall).
5. Durability guard (``guard_ts``, when the guard observes the checkpoint): only the
   leading candidates whose storeTimestamp is at or before ``guard_ts``; none →
   ``Wait(GUARDED)`` (see :mod:`tieredstore.dispatcher.tiering.durability`; the ``sync`` guard
   instead makes a planned segment durable before it is uploaded).
6. Group confirmation (``cl_limit``, when the broker runs in a group of replicas): only
   the leading candidates whose record ends at or below ``cl_limit``, the commitlog offset
   every other reporting replica holds durably; none → ``Wait(UNCONFIRMED)`` (see
   :mod:`tieredstore.dispatcher.replicas`).
7. Cut now if the candidates fill the byte or message limit, or the oldest is at least
   ``segment_max_age`` old, or a catch-up pass flushes everything; else ``Wait(YOUNG)``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from tieredstore.errors import DivergedError
from tieredstore.formats.consumequeue import Units
from tieredstore.hot.store import HotRange, HotStore, QueueKey
from tieredstore.settings.loader import TieringSettings

__all__ = [
    "CutReason",
    "HotDataLost",
    "Limits",
    "SegmentPlan",
    "Wait",
    "WaitReason",
    "plan_segment",
    "units_unchanged",
]


@dataclass(frozen=True, slots=True)
class Limits:
    """Group-commit limits (see the ``tiering.*`` settings).

    ``age_cuts`` False: a segment that is not full waits whatever its age (a tick
    between two batch ticks, :mod:`tieredstore.dispatcher.tiering.rounds`).
    """

    max_bytes: int = 64 << 20
    max_messages: int = 1_000_000
    max_age_ms: int = 60_000
    age_cuts: bool = True

    @classmethod
    def of(cls, tiering: TieringSettings) -> Limits:
        """The ``tiering.segment_max_*`` settings as limits."""
        return cls(
            max_bytes=tiering.segment_max_bytes,
            max_messages=tiering.segment_max_messages,
            max_age_ms=int(tiering.segment_max_age * 1000),
        )


class CutReason(enum.Enum):
    BYTES = "bytes"
    MESSAGES = "messages"
    AGE = "age"
    FLUSH = "flush"


class WaitReason(enum.Enum):
    IDLE = "idle"  # nothing pending
    YOUNG = "young"  # pending data below every limit
    GUARDED = "guarded"  # pending data not yet known to be flushed (checkpoint guard)
    UNCONFIRMED = "unconfirmed"  # pending data not yet held by the group's other replicas


@dataclass(frozen=True, slots=True)
class SegmentPlan:
    """Tier queue offsets ``[start, end)``; ``units`` are their hot CQ units.

    ``pending_bytes`` and ``oldest_ms`` describe everything waiting, as in :class:`Wait`
    (the lag gauges need them even when the upload then fails). ``nbytes`` is the sum of
    the units' sizes: the segment's COMMIT_LOG bytes (summed once, when planned).
    """

    queue: QueueKey
    start: int
    end: int
    units: Units
    reason: CutReason
    hot: HotRange
    pending_bytes: int
    oldest_ms: int
    nbytes: int

    @property
    def count(self) -> int:
        return self.end - self.start

    @property
    def cl_end(self) -> int:
        """Commitlog offset just past the segment's last record."""
        return int(self.units["commitlog_offset"][-1]) + int(self.units["size"][-1])

    @property
    def oldest_cl(self) -> int:
        """Commitlog offset of the oldest pending message (the segment's first)."""
        return int(self.units["commitlog_offset"][0])


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to tier now, and why; ``pending`` messages and bytes are waiting.

    ``pending_bytes`` counts the first ``segment_max_messages`` pending units at most;
    ``oldest_ms`` and ``oldest_cl`` are the oldest pending message's store time and
    commitlog offset (None when nothing is pending).
    """

    reason: WaitReason
    hot: HotRange
    pending: int = 0
    pending_bytes: int = 0
    oldest_ms: int | None = None
    oldest_cl: int | None = None


@dataclass(frozen=True, slots=True)
class HotDataLost:
    """Queue offsets ``[start, end)`` were deleted by the broker before being tiered."""

    queue: QueueKey
    start: int
    end: int
    hot: HotRange


def _guarded_count(hot: HotStore, units: Units, guard_ts: int) -> int:
    """How many leading units have storeTimestamp <= guard_ts (binary search)."""
    offsets = units["commitlog_offset"]
    if hot.read_store_timestamp(int(offsets[-1])) <= guard_ts:
        return int(units.shape[0])
    lo, hi = 0, int(units.shape[0]) - 1  # unit hi is known to be too new
    while lo < hi:
        mid = (lo + hi) // 2
        if hot.read_store_timestamp(int(offsets[mid])) <= guard_ts:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _ready_count(
    hot: HotStore, units: Units, guard_ts: int | None, cl_limit: int | None
) -> tuple[int, WaitReason]:
    """How many leading units the durability guard (rule 5) and the group limit (rule 6)
    let through, and the reason of the one that stopped the rest."""
    k, why = int(units.shape[0]), WaitReason.YOUNG
    if guard_ts is not None:
        g = _guarded_count(hot, units, guard_ts)
        if g < k:
            k, why = g, WaitReason.GUARDED
    if cl_limit is not None:
        ends = units["commitlog_offset"][:k].astype(np.int64) + units["size"][:k].astype(np.int64)
        c = int(np.searchsorted(ends, cl_limit, side="right"))  # ends ascend within a queue
        if c < k:
            k, why = c, WaitReason.UNCONFIRMED
    return k, why


def plan_segment(
    hot: HotStore,
    queue: QueueKey,
    cold_commit: int,
    limits: Limits,
    *,
    now_ms: int,
    guard_ts: int | None,
    flush: bool = False,
    cl_limit: int | None = None,
) -> SegmentPlan | Wait | HotDataLost:
    """Apply the group-commit rules (module docstring) to one queue."""
    # The range and the first pending units in one read of the consume queue.
    rng, units = hot.queue_units(queue.topic, queue.queue_id, cold_commit, limits.max_messages)
    if rng.max < cold_commit:
        raise DivergedError(
            f"hot max offset {rng.max} of {queue} is below the cold commit offset "
            f"{cold_commit}: the broker lost data that is already in cold",
            where=str(queue),
        )
    if rng.min > cold_commit:
        return HotDataLost(queue, cold_commit, rng.min, rng)
    pending = rng.max - cold_commit
    if pending == 0:
        return Wait(WaitReason.IDLE, rng)
    n = min(pending, limits.max_messages)  # the units read: [cold_commit, cold_commit + n)
    sizes = np.cumsum(units["size"].astype(np.int64))
    k = int(np.searchsorted(sizes, limits.max_bytes, side="right"))  # fit in max_bytes
    full: CutReason | None
    if k == 0:
        k, full = 1, CutReason.BYTES  # one record above the limit: its own segment
    elif k < n or int(sizes[k - 1]) >= limits.max_bytes:
        full = CutReason.BYTES
    elif n >= limits.max_messages:
        full = CutReason.MESSAGES
    else:
        full = None
    units = units[:k]
    pending_bytes = int(sizes[-1])
    first_cl = int(units["commitlog_offset"][0])
    oldest = hot.read_store_timestamp(first_cl)
    ready, why = _ready_count(hot, units, guard_ts, cl_limit)
    if ready == 0:
        return Wait(why, rng, pending, pending_bytes, oldest, first_cl)
    if ready < k:
        units, k, full = units[:ready], ready, None
    if full is None and not flush:
        if not limits.age_cuts or now_ms - oldest < limits.max_age_ms:
            return Wait(WaitReason.YOUNG, rng, pending, pending_bytes, oldest, first_cl)
        full = CutReason.AGE
    reason = full or CutReason.FLUSH
    return SegmentPlan(
        queue, cold_commit, cold_commit + k, units, reason, rng, pending_bytes, oldest,
        nbytes=int(sizes[k - 1]),
    )  # fmt: skip


def units_unchanged(hot: HotStore, plan: SegmentPlan) -> bool:
    """Whether the plan's consume-queue units still read the same (one read of its
    range). Planning may read a unit while the broker is still writing it (its offset
    and size there, its tags code not yet): the hot max is where the first all-zero
    unit starts, and nothing else tells how far the broker's write has got. Checked
    again after the pass, when any such write has long finished, a segment planned on
    a torn unit is dropped (and planned again), never committed."""
    now = hot.read_units(plan.queue.topic, plan.queue.queue_id, plan.start, plan.end)
    return bool(np.array_equal(now, plan.units))
