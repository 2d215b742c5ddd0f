"""Group commit of segment rows: segments committed at about the same time share one
catalogue transaction.

Each catalogue commit is a SQLite transaction ending in an ``fsync`` (``synchronous =
FULL``), a millisecond or more. Committed one by one on the event loop, a round of a
thousand small segments spent seconds there with every other upload waiting behind it.
:class:`GroupCommit` instead queues each request and lets one flush at a time commit
everything queued in **one** transaction, in a thread
(:meth:`~tieredstore.metadata.segment_table.SegmentTable.commit_many`), while the next requests
queue up behind it. Each caller still returns only once its row is durable, with its
own outcome: a segment the catalogue refuses fails alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tieredstore.cold.manifest import Manifest
from tieredstore.errors import CatalogueError
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueRow, SegmentRow

__all__ = ["GroupCommit"]

_Outcome = tuple[SegmentRow, QueueRow] | CatalogueError


class GroupCommit:
    """Commits manifests to the catalogue in groups (module docstring).

    ``lock`` is held while a group is committed (the dispatcher's lock, which its
    periodic jobs hold while they change the catalogue).
    """

    def __init__(self, catalogue: Catalogue, lock: asyncio.Lock) -> None:
        self.catalogue = catalogue
        self._lock = lock
        self._queued: list[tuple[Manifest, asyncio.Future[QueueRow]]] = []
        self._flushing: asyncio.Task[None] | None = None
        self.groups = 0  # transactions run so far

    async def commit(self, manifest: Manifest) -> QueueRow:
        """Record ``manifest``'s segment; return its queue's row after it.

        Raises:
            CatalogueError: the catalogue refused this segment (see
                :meth:`~tieredstore.metadata.segment_table.SegmentTable.commit`), or the
                database failed (then no segment of the group is committed).
        """
        done: asyncio.Future[QueueRow] = asyncio.get_running_loop().create_future()
        self._queued.append((manifest, done))
        if self._flushing is None:
            flushing = asyncio.create_task(self._flush(), name="catalogue group commit")
            flushing.add_done_callback(self._never_ran)
            self._flushing = flushing
        return await done  # cancelled: the group still commits it (idempotent)

    def _never_ran(self, flushing: asyncio.Task[None]) -> None:
        """A flush cancelled before its first step never reached its own clean-up:
        cancel the callers it would have served (else they would wait forever)."""
        if flushing is self._flushing:
            self._flushing = None
            queued, self._queued = self._queued, []
            for _, done in queued:
                done.cancel()

    async def _flush(self) -> None:
        """Commit groups until nothing is queued (one flush task at a time). Cancelled
        (the loop is shutting down), it cancels every caller still waiting: none is
        left waiting for a flush that will not come."""
        group: list[tuple[Manifest, asyncio.Future[QueueRow]]] = []
        try:
            while self._queued:
                group, self._queued = self._queued, []
                self.groups += 1
                try:
                    async with self._lock:
                        outcomes = await asyncio.to_thread(
                            self.catalogue.segments.commit_many, [m for m, _ in group]
                        )
                except Exception as exc:  # the transaction failed: every one of them
                    for _, done in group:
                        if not done.done():
                            done.set_exception(exc)
                    continue
                _settle(group, outcomes)
        except asyncio.CancelledError:
            for _, done in [*group, *self._queued]:
                done.cancel()
            self._queued = []
            raise
        finally:
            self._flushing = None


def _settle(
    group: Sequence[tuple[Manifest, asyncio.Future[QueueRow]]], outcomes: Sequence[_Outcome]
) -> None:
    for (_, done), outcome in zip(group, outcomes, strict=True):
        if done.done():
            continue
        if isinstance(outcome, CatalogueError):
            done.set_exception(outcome)
        else:
            done.set_result(outcome[1])
