"""Continuity: the hot record just below a queue's cold commit offset still equals cold's.

A broker that lost unflushed data and re-wrote offsets has different bytes at an offset
cold already holds; before committing the next segment or batch slice of a queue the
writer compares the two records outside bytes [28, 36) (the physical offset, which
tiering rewrites). The cold record is the last one of the catalogue's last link, a
segment or a batch slice.

This process remembers a digest of the last record of every queue it commits
(:meth:`Continuity.remember`), so the check costs no request while the sidecar runs: a
tick of a thousand small queues, one batch object, stays one write and no read. A queue
committed by another process (after a restart, an adoption) is read from cold once.
"""

from __future__ import annotations

import asyncio
import hashlib

from metadata.catalogue import Catalogue
from metadata.rows import QueueRow
from tieredstore.backends.base import Backend
from tieredstore.cold.history import Committed
from tieredstore.errors import ObjectNotFoundError, OffsetOutOfRangeError
from tieredstore.formats.record import PHYSICAL_OFFSET_SLICE
from tieredstore.hot.store import HotStore, QueueKey

__all__ = ["Continuity"]


def _masked(record: bytes | memoryview) -> bytes:
    """A digest of ``record`` outside its physical offset field."""
    view, s = memoryview(record), PHYSICAL_OFFSET_SLICE
    h = hashlib.blake2b(view[: s.start], digest_size=16)
    h.update(view[s.stop :])
    return len(view).to_bytes(8, "big") + h.digest()


class Continuity:
    """The continuity check of one broker's queues (module docstring)."""

    def __init__(self, hot: HotStore, catalogue: Catalogue, backend: Backend) -> None:
        self.hot = hot
        self.catalogue = catalogue
        self.backend = backend
        self._tails: dict[QueueKey, tuple[int, bytes]] = {}
        self.reads = 0  # cold records read (a remembered one costs none)

    def remember(self, queue: QueueKey, offset: int, record: bytes | memoryview) -> None:
        """``record`` (its cold bytes) was just committed at ``offset``, the queue's last."""
        self._tails[queue] = (offset, _masked(record))

    async def ok(self, row: QueueRow) -> bool:
        """Whether the hot record at ``row.cold_commit - 1`` equals cold's. True when
        nothing is tiered yet or the hot record is gone (deleted by retention: nothing
        to compare); False when the cold object vanished."""
        last = row.cold_commit - 1
        if last < row.cold_min:
            return True  # nothing committed (or all of it expired)
        hot = self.hot
        rng = await asyncio.to_thread(hot.queue_range, row.topic, row.queue_id)
        if not rng.min <= last < rng.max:
            return True  # also right after an accepted loss: ``last`` is in no segment
        unit = (await asyncio.to_thread(hot.read_units, row.topic, row.queue_id, last, last + 1))[0]
        size = int(unit["size"])
        hot_bytes = await asyncio.to_thread(
            hot.read_record_bytes, int(unit["commitlog_offset"]), size
        )
        tail = self._tails.get(QueueKey(row.topic, row.queue_id))
        if tail is not None and tail[0] == last:
            return tail[1] == _masked(hot_bytes)
        span = self._link_at(row, last).commit_log  # a segment's, or a batch slice's
        self.reads += 1
        try:
            cold_bytes = await self.backend.read_exact(span.key, span.end - size, span.end)
        except ObjectNotFoundError:
            return False
        return _masked(cold_bytes) == _masked(hot_bytes)

    def _link_at(self, row: QueueRow, offset: int) -> Committed:
        """The catalogue's committed link holding ``offset``: a segment, else a batch
        slice. Raises OffsetOutOfRangeError (the segments' message) when neither does."""
        try:
            return Committed.of_manifest(
                self.catalogue.segments.at(row.topic, row.queue_id, offset).manifest
            )
        except OffsetOutOfRangeError:
            for link in self.catalogue.slices.of(row.topic, row.queue_id):
                if link.start_offset <= offset < link.end_offset:
                    return link
            raise
