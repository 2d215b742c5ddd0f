"""What the catalogue holds: queue, segment and lease rows, and their states."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tieredstore.cold.manifest import Manifest

__all__ = ["LeaseRow", "QueueRow", "QueueState", "SegmentRow", "SegmentStatus"]


class QueueState(enum.Enum):
    """Whether the dispatcher tiers a queue.

    ACTIVE: tiered. PAUSED: the broker deleted offsets before they were tiered (the
    dispatcher stopped it, nothing after the hole is tiered); ``tieredstore resume
    --accept-loss`` records the loss in cold and makes it ACTIVE again.
    DIVERGED: the hot store no longer agrees with cold; tiering stopped until
    ``tieredstore repair``. DELETED: the topic is gone and its cold data destroyed.
    """

    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    DIVERGED = "DIVERGED"
    DELETED = "DELETED"


class SegmentStatus(enum.Enum):
    """COMMITTED: readable. DELETING: expiry started; readers never see it again."""

    COMMITTED = "COMMITTED"
    DELETING = "DELETING"


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One queue's cold state.

    Queue offsets ``[cold_min, cold_commit)`` are in cold (committed segments and batch
    slices, less any segments still being deleted); ``cold_commit`` is the next queue
    offset to tier and ``cold_cl_end`` the cold commitlog offset its segment (or slice)
    starts at. ``init_offset`` is
    where tiering of the queue began, ``cq_base == init_offset * 20`` the base of its cold
    consume-queue address space. ``init_offset <= cold_min <= cold_commit`` always.
    """

    topic: str
    queue_id: int
    init_offset: int
    cold_min: int
    cold_commit: int
    cold_cl_end: int
    cq_base: int
    state: QueueState
    updated_at_ms: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.queue_id}"


@dataclass(frozen=True, slots=True)
class SegmentRow:
    """One segment: exactly the manifest that committed it, and its status."""

    manifest: Manifest
    status: SegmentStatus

    @property
    def topic(self) -> str:
        return self.manifest.topic

    @property
    def queue_id(self) -> int:
        return self.manifest.queue_id

    @property
    def start_offset(self) -> int:
        return self.manifest.start_offset

    @property
    def end_offset(self) -> int:
        return self.manifest.end_offset

    @property
    def cl_base(self) -> int:
        return self.manifest.cl_base

    @property
    def cl_end(self) -> int:
        return self.manifest.cl_end

    @property
    def manifest_key(self) -> str:
        return self.manifest.key

    def __str__(self) -> str:
        return f"{self.topic}/{self.queue_id}[{self.start_offset}, {self.end_offset})"


@dataclass(frozen=True, slots=True)
class LeaseRow:
    """The catalogue's mirror of the writer lease (the real one is ``_lease.json``)."""

    broker: str
    owner: str
    epoch: int
    expires_at_ms: int
    updated_at_ms: int
