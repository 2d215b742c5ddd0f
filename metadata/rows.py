"""What the catalogue holds: queue, segment and lease rows, and their states."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from tieredstore.cold.manifest import Manifest

__all__ = [
    "PERSISTED_STATES",
    "TRANSITIONS",
    "LeaseRow",
    "QueueRow",
    "QueueState",
    "SegmentRow",
    "SegmentStatus",
    "is_valid_transition",
]


class QueueState(enum.Enum):
    """Every state a queue is shown in: ``tieredstore status`` (text and ``--json``),
    the HTTP API's ``/v1/queues``, the ``tieredstore_queue_state`` gauge and the log.

    **Persisted** (:attr:`persisted`; the only values of the catalogue's ``queues.state``
    column, changed by :meth:`tieredstore.metadata.queue_table.QueueTable.set_state` along
    :data:`TRANSITIONS` only):

    * ACTIVE: tiered. A queue's row is created ACTIVE.
    * PAUSED: the broker deleted offsets before they were tiered (the dispatcher stopped
      it, nothing after the hole is tiered); ``tieredstore resume --accept-loss`` records
      the loss in cold and makes it ACTIVE again.
    * DIVERGED: the hot store no longer agrees with cold; tiering stopped until
      ``tieredstore repair``.
    * DELETED: the topic is gone and its cold data destroyed (retention, ``expire
      --purge``); final.

    **Per process** (never in the catalogue: the running sidecar shows them over the
    catalogue's state, STOPPED winning over DEGRADED, and keeps them in the state dir's
    ``stopped-queues.json`` for ``status``; its next start forgets them):

    * STOPPED: this process stopped tiering the queue (a newer-format manifest at its
      frontier, an inconsistent hot store, a damaged batch holding its tail that it
      cannot heal) until it restarts.
    * DEGRADED: cold damage was found in the queue's committed history; the queue is
      still tiered. The gauge has no DEGRADED label: ``tieredstore_queue_cold_damaged``
      says it.
    """

    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    DIVERGED = "DIVERGED"
    DELETED = "DELETED"
    STOPPED = "STOPPED"
    DEGRADED = "DEGRADED"

    @property
    def persisted(self) -> bool:
        """Whether the catalogue stores this state (else it is the running process's)."""
        return self in PERSISTED_STATES


#: The states the catalogue stores (its schema's ``CHECK`` lists the same values).
PERSISTED_STATES: Final = frozenset(
    {QueueState.ACTIVE, QueueState.PAUSED, QueueState.DIVERGED, QueueState.DELETED}
)

#: Every change of a queue's persisted state the code makes, as ``(from, to)``; any
#: other is refused by :meth:`~tieredstore.metadata.queue_table.QueueTable.set_state`. Setting a
#: persisted state to itself is allowed too (a no-op; :func:`is_valid_transition`).
#: ``tests/repo/test_state_transitions.py`` checks that every ``set_state`` the code
#: performs is here, and that nothing else is.
TRANSITIONS: Final[frozenset[tuple[QueueState, QueueState]]] = frozenset(
    {
        # the committer: the broker deleted offsets before they were tiered
        (QueueState.ACTIVE, QueueState.PAUSED),
        # the committer: the hot store no longer agrees with cold
        (QueueState.ACTIVE, QueueState.DIVERGED),
        # `resume` (`--accept-loss`: the loss recorded), or reconcile adopting a loss record
        (QueueState.PAUSED, QueueState.ACTIVE),
        # `repair`: the cold history cut back to what the hot store holds
        (QueueState.DIVERGED, QueueState.ACTIVE),
        # retention or `expire --purge`: the topic is gone and its cold data destroyed
        (QueueState.ACTIVE, QueueState.DELETED),
        (QueueState.PAUSED, QueueState.DELETED),
        (QueueState.DIVERGED, QueueState.DELETED),
    }
)


def is_valid_transition(source: QueueState, target: QueueState) -> bool:
    """Whether the catalogue may move a queue from ``source`` to ``target``: a pair of
    :data:`TRANSITIONS`, or a persisted state to itself. A per-process state (STOPPED,
    DEGRADED) is never one end of a valid transition: the catalogue does not store it."""
    if source is target:
        return source.persisted
    return (source, target) in TRANSITIONS


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
