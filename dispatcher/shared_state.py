"""What the dispatcher's parts share about the queues of one process: one owner.

:class:`SharedState` is built once, by :func:`tieredstore.dispatcher.assembly.build_dispatcher`, and
handed explicitly to :class:`~tieredstore.dispatcher.discovery.Discovery`,
:class:`~tieredstore.dispatcher.tiering.committer.SegmentCommitter`,
:class:`~tieredstore.dispatcher.tiering.rounds.Rounds` and the
:class:`~tieredstore.dispatcher.dispatcher.Dispatcher`; nothing else makes one. Every part runs on
the one event loop and no thread touches it, so plain reads and writes are atomic
between awaits; the lock is for catalogue writes that span awaits.

Who may change what:

* :attr:`SharedState.lock`: held by whoever writes the catalogue while tiering runs —
  the committer (its group commits, a divergence, an adoption), the periodic and
  start-up jobs, and the dispatcher's start while it heals cold damage;
* the stopping flag: set by :meth:`SharedState.request_stop` alone (the dispatcher's
  ``stop``); the rounds and the loops only read it or wait on it;
* the stopped queues: added by :meth:`SharedState.stop_queue` alone (the committer);
  discovery keeps them out of the ACTIVE set; a restart (a new process) tries them again;
* the damaged queues: filled by the dispatcher's start, before the first tick, and by
  the rounds when a tick finds a damaged batch object
  (:func:`tieredstore.dispatcher.tiering.batch.damage.handle_damage`, under the lock);
* the reminders: :meth:`SharedState.mark_reminded` (the committer, which explains the
  queues it stops itself) and :meth:`SharedState.first_reminder` (discovery).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from tieredstore.dispatcher import stopped_file
from tieredstore.hot.store import QueueKey
from tieredstore.metadata.rows import QueueState

__all__ = ["Damaged", "SharedState", "Stopped"]

#: Queues this process stopped, with the reason (one line naming the key or offset):
#: cold holds a manifest (or marker) of a newer format at their frontier, or a hot
#: record disagrees with its consume-queue unit, or a built segment failed its check.
#: Not tiered again until a restart (which tries once more: an upgraded sidecar may
#: have moved past it, an operator may have fixed the store).
Stopped = dict[QueueKey, str]

#: Queues whose committed history is damaged, with the reason ``status`` shows
#: (:func:`tieredstore.dispatcher.tiering.cold_writer.report_damage`).
Damaged = dict[QueueKey, str]


class SharedState:
    """The queue state the dispatcher's parts share; see the module docstring.

    The stopped and damaged queues are written to ``stopped_path`` (None: nowhere),
    where ``tieredstore status`` reads them (:mod:`tieredstore.dispatcher.stopped_file`).
    """

    def __init__(self, *, stopped_path: Path | None = None) -> None:
        #: Serialises catalogue writes across queue tasks and jobs (module docstring).
        self.lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._stopped: Stopped = {}
        #: Queues with cold damage found (DEGRADED): the dispatcher's start fills it and
        #: :func:`~tieredstore.dispatcher.tiering.cold_writer.heal_damaged` rewrites its notes
        #: before the first tick; a tick that finds a damaged batch object adds the queues it
        #: held (:func:`~tieredstore.dispatcher.tiering.batch.damage.handle_damage`); everyone else
        #: only reads it.
        self.damaged: Damaged = {}
        # Stopped queues (and the state they stopped in) already explained to the
        # operator by this process.
        self._reminded: set[tuple[QueueKey, QueueState]] = set()
        self._stopped_path = stopped_path

    # -- stopping: set by the dispatcher, read by everyone -----------------------------
    @property
    def stopping(self) -> asyncio.Event:
        """Set once a stop was asked: no round starts, the loops end. Wait on it or
        read it; only :meth:`request_stop` sets it."""
        return self._stopping

    def request_stop(self) -> None:
        """Ask every part to stop taking new work (the dispatcher's ``stop``; idempotent)."""
        self._stopping.set()

    # -- stopped queues: added by the committer, read by discovery and status ----------
    @property
    def stopped(self) -> Mapping[QueueKey, str]:
        """The queues this process stopped, with the reason (read-only: :meth:`stop_queue`
        adds to it)."""
        return MappingProxyType(self._stopped)

    def is_stopped(self, key: QueueKey) -> bool:
        """Whether this process stopped the queue (discovery leaves it out)."""
        return key in self._stopped

    def stop_queue(self, key: QueueKey, reason: str) -> None:
        """Stop tiering the queue until a restart, for ``reason`` (the committer, and a
        tick's batch damage it cannot heal), and save the stopped queues where ``status``
        reads them."""
        self._stopped[key] = reason
        self.save()

    def save(self) -> None:
        """Write the stopped and damaged queues where ``tieredstore status`` reads them
        (a small file, replaced whole)."""
        if self._stopped_path is not None:
            stopped_file.save(self._stopped_path, self._stopped, self.damaged)

    # -- reminders: the operator is told once per process and state --------------------
    def mark_reminded(self, key: QueueKey, state: QueueState) -> None:
        """Note that the operator was told why the queue is in ``state`` (the committer,
        which says so when it stops the queue itself)."""
        self._reminded.add((key, state))

    def first_reminder(self, key: QueueKey, state: QueueState) -> bool:
        """Whether the operator is yet to be told why the queue is in ``state``; noted as
        told from now on (discovery, which then tells)."""
        if (key, state) in self._reminded:
            return False
        self._reminded.add((key, state))
        return True
