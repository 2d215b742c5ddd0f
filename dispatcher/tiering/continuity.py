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

A batch slice read from cold is checked whole first: its batch object's head is read
(once per batch object and process) and must hold the slice as the catalogue has it,
and the slice's commit-log bytes must have the size and digest its index records. A
batch object that is missing, of another size, with a head that does not parse, or a
slice whose bytes do not check raises :class:`~tieredstore.errors.DamagedObjectError`
naming the batch key and the slice: damage to a batch many queues share, which the
rounds make loud and heal for every queue it held
(:func:`tieredstore.dispatcher.tiering.batch.damage.handle_damage`), never a divergence of one
queue.
"""

from __future__ import annotations

import asyncio
import hashlib

from tieredstore.backends.base import Backend
from tieredstore.cold.batch import BatchHead
from tieredstore.cold.digests import DigestAlgorithm, digest
from tieredstore.cold.history import (
    Committed,
    EntryKind,
    read_batch,
    read_span,
    slices_of,
    span_bytes,
)
from tieredstore.errors import (
    CorruptBatchError,
    CorruptFrameError,
    Damage,
    DamagedObjectError,
    ObjectNotFoundError,
    OffsetOutOfRangeError,
    UnsupportedFormatError,
)
from tieredstore.formats.record import PHYSICAL_OFFSET_SLICE
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueRow

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
        self._heads: dict[str, BatchHead] = {}  # batch heads read and checked, by key
        self.reads = 0  # cold records read (a remembered one costs none)

    def remember(self, queue: QueueKey, offset: int, record: bytes | memoryview) -> None:
        """``record`` (its cold bytes) was just committed at ``offset``, the queue's last."""
        self._tails[queue] = (offset, _masked(record))

    async def ok(self, row: QueueRow) -> bool:
        """Whether the hot record at ``row.cold_commit - 1`` equals cold's. True when
        nothing is tiered yet or the hot record is gone (deleted by retention: nothing
        to compare); False when a segment's cold object vanished.

        Raises:
            DamagedObjectError: the record is in a batch slice whose batch object is
                missing, of another size, unparsable, or whose slice does not check.
        """
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
        link = self._link_at(row, last)  # a segment, or a batch slice
        span = link.commit_log
        self.reads += 1
        if link.kind is EntryKind.SLICE:
            return _masked((await self._slice_bytes(link))[-size:]) == _masked(hot_bytes)
        try:
            cold_bytes = await read_span(self.backend, span, span.size - size, span.size)
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

    async def _slice_bytes(self, link: Committed) -> bytes:
        """The commit-log bytes of the batch slice ``link``, checked against its batch
        object's head and its digest (module docstring); DamagedObjectError if not."""
        head = await self._head(link)
        if not any(c == link for c in slices_of(head)):
            raise _damaged(link, Damage.UNPARSABLE, "its head does not hold the slice")
        try:
            data = await span_bytes(self.backend, link.commit_log)
        except ObjectNotFoundError:
            raise _damaged(link, Damage.MISSING, "it is missing") from None
        except DamagedObjectError as exc:
            raise _damaged(link, exc.damage, exc.message) from exc
        except CorruptFrameError as exc:  # a compressed batch: frames that do not decode
            raise _damaged(link, Damage.DIGEST, exc.message) from exc
        if digest(data, DigestAlgorithm(link.digest_algorithm)) != link.commit_log.digest:
            raise _damaged(link, Damage.DIGEST, "the slice's bytes do not match its digest")
        return data

    async def _head(self, link: Committed) -> BatchHead:
        """The head of ``link``'s batch object, read once per key and process."""
        key, size = link.key, link.commit_log.stored_size
        if key in self._heads:
            return self._heads[key]
        try:
            listed = await self.backend.size(key)
        except ObjectNotFoundError:
            raise _damaged(link, Damage.MISSING, "it is missing") from None
        if listed != size:
            raise _damaged(link, Damage.SIZE, f"it is {listed} bytes, committed as {size}")
        try:
            head = await read_batch(self.backend, key, size)
        except (CorruptBatchError, UnsupportedFormatError) as exc:
            raise _damaged(link, Damage.UNPARSABLE, f"its head: {exc.message}") from exc
        except DamagedObjectError as exc:
            raise _damaged(link, exc.damage, exc.message) from exc
        if not isinstance(head, BatchHead):
            raise _damaged(link, Damage.MISSING, "it is missing (or holds a fence)")
        self._heads[key] = head
        return head


def _damaged(link: Committed, damage: Damage, why: str) -> DamagedObjectError:
    """The damage of ``link``'s batch object, said as one line naming the batch and the
    slice that needed it."""
    return DamagedObjectError(
        f"batch object of {link.describe()} is damaged ({damage.value}): {why}",
        key=link.key,
        damage=damage,
    )
