"""The batch delete: a batch object goes once every slice in it lives on in a segment.

Compaction (:mod:`tieredstore.dispatcher.tiering.batch.compaction`) rewrites slices as segments;
the batch objects that held them are then garbage, but a batch is shared by many queues and the
reading rule (:func:`~tieredstore.cold.history.choose`) reads a slice wherever no segment
holds its offsets, so a batch is deleted only when **all** of these hold:

(a) **unreferenced**: no slice row of the catalogue names it
    (``catalogue.slices.referenced_batches()``);
(b) **covered, byte for byte, or withdrawn**: every slice in its head lies inside one
    segment of its queue's committed history in cold (the queue's manifests, read now,
    through ``choose``), and that segment's bytes at the slice's offsets and cold
    commitlog range are the slice's: compared by digest when the boundaries are the same
    and the algorithms too, else byte for byte (both read); or a batch fence of a higher
    sequence withdrew it (:class:`~tieredstore.cold.batch.Withdrawn`: ``repair`` copied its
    bytes to the quarantine first, the heal of a lost tail tiered them again from hot);
(c) **old**: its ``created_at_ms`` is at least the grace in the past (``max(compact_after,
    10 min)``, :data:`MIN_GRACE_MS`): longer than the read service keeps a listing, so no
    reader still holds a slice of it from a listing taken before the compaction;
(d) **never the newest**: a writer lists ``_batches/`` to find the next free sequence, so
    the highest sequence must never vanish. A batch that is the highest and may go
    otherwise gets a batch fence above it first (:meth:`BatchKeys.fence
    <tieredstore.dispatcher.tiering.batch.sequence.BatchKeys.fence>`), then is deleted: an idle
    broker, or one whose batching was turned off, keeps no batch (and, through retention, no
    expired segment) for good.

The lease is checked (and renewed when due) right before each delete: a writer that lost
it deletes nothing more (LeaseLostError propagates). A batch **fence** is never deleted
(a few hundred bytes per sidecar start): a writer of an older epoch frozen inside its
create at that sequence, however long, must still find the key taken when it lands. A
batch object whose head does not parse is never deleted, and reported; so is an old,
unreferenced batch whose slices no segment holds (or holds with other bytes).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Final

from tieredstore.backends.base import Backend
from tieredstore.cold.batch import BatchFence, BatchHead
from tieredstore.cold.history import (
    Committed,
    Withdrawal,
    batch_links,
    choose,
    read_batch,
    read_span,
    slices_of,
    span_bytes,
)
from tieredstore.cold.layout import (
    QueuePath,
    SegmentKind,
    kind_prefix,
    parse_batch_key,
)
from tieredstore.cold.manifest import FenceMarker, Manifest, read_stored
from tieredstore.dispatcher.lease.guard import hold_lease
from tieredstore.dispatcher.tiering.batch.sequence import BatchKeys
from tieredstore.errors import ColdDataError, InvalidNameError, ObjectNotFoundError
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.metadata.catalogue import Catalogue

__all__ = ["MIN_GRACE_MS", "BatchCollection", "collect_batches"]

log = logging.getLogger(__name__)

#: The least grace a batch (or batch fence) gets before it may be deleted: longer than
#: the read service keeps a listing of ``_batches/``.
MIN_GRACE_MS: Final = 10 * 60 * 1000


@dataclass(frozen=True, slots=True)
class BatchCollection:
    """What one collection did: the keys deleted, and one line per batch it will not
    delete for a reason the operator should see (unparsable, uncovered, other bytes)."""

    deleted: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    #: Batch objects (not fences) still there afterwards: referenced, young, uncovered.
    left: int = 0


#: What a batch key held when the collection read it (the error if it did not parse).
_Head = BatchHead | BatchFence | None | ColdDataError


@dataclass(slots=True)
class _Collector:
    """One collection's reads: the unreferenced batch heads and each queue's committed
    segments, each read once; the withdrawals among those heads."""

    backend: Backend
    now_ms: int
    grace_ms: int
    referenced: set[str]
    segments: dict[QueuePath, tuple[Committed, ...] | str] = field(default_factory=dict)
    heads: dict[str, _Head] = field(default_factory=dict)
    withdrawals: dict[QueuePath, list[Withdrawal]] = field(default_factory=dict)

    async def read_heads(self, listed: list[tuple[int, str, int]]) -> None:
        """Read every unreferenced head (a fence is never referenced, so every withdrawal
        is among them) and index the withdrawals by queue."""
        for _sequence, key, size in listed:
            if key in self.referenced:
                continue  # (a): its head is not even read (no request)
            try:
                found: _Head = await read_batch(self.backend, key, size)
            except ColdDataError as exc:  # CorruptBatchError, UnsupportedFormatError
                found = exc
            self.heads[key] = found
            if isinstance(found, BatchFence):
                for w in batch_links(found):
                    if isinstance(w, Withdrawal):
                        self.withdrawals.setdefault(w.queue, []).append(w)

    async def verdict(self, key: str) -> tuple[bool, str]:
        """Whether the batch (or fence) at ``key`` may go, and a problem line when it must
        stay for a reason worth reporting (else ``""``)."""
        found = self.heads.get(key)
        if isinstance(found, ColdDataError):
            return False, f"batch {key} does not parse, never deleted: {found}"
        if found is None:
            return False, ""  # gone since the listing
        if isinstance(found, BatchFence):
            return False, ""  # kept for good (module docstring)
        if key in self.referenced or not self._old(found.index.created_at_ms):
            return False, ""
        return await self._covered(found)

    def _old(self, created_at_ms: int) -> bool:
        return created_at_ms + self.grace_ms <= self.now_ms

    async def _covered(self, head: BatchHead) -> tuple[bool, str]:
        for link in slices_of(head):
            problem = await self._uncovered(link)
            if problem:
                return False, f"batch {head.index.key} kept: {problem}"
        return True, ""

    async def _uncovered(self, link: Committed) -> str:
        """``""`` if one committed segment holds ``link``'s offsets with its bytes, or a
        fence withdrew it, else why not (one line naming the slice)."""
        if any(w.withdraws(link) for w in self.withdrawals.get(link.queue, ())):
            return ""
        segments = await self._segments_of(link.queue)
        if isinstance(segments, str):
            return f"{link.describe()}: {segments}"
        cover = next(
            (s for s in segments if s.start_offset <= link.start_offset < link.end_offset
             <= s.end_offset),
            None,
        )  # fmt: skip
        if cover is None:
            return f"{link.describe()} is in no committed segment"
        if not await _same_bytes(self.backend, link, cover):
            return f"{link.describe()}: {cover.describe()} holds other bytes at its offsets"
        return ""

    async def _segments_of(self, queue: QueuePath) -> tuple[Committed, ...] | str:
        """The queue's chosen segments (its manifests in cold), or why they are unknown."""
        if queue not in self.segments:
            try:
                self.segments[queue] = await _committed_segments(self.backend, queue)
            except (ColdDataError, InvalidNameError) as exc:
                self.segments[queue] = f"its manifests cannot be read: {exc}"
        return self.segments[queue]


async def _committed_segments(backend: Backend, queue: QueuePath) -> tuple[Committed, ...]:
    """The segments of ``queue``'s committed history, from its manifests (no slices)."""

    async def stored(key: str) -> Manifest | FenceMarker | None:
        try:
            return read_stored(await backend.read(key), key)
        except ObjectNotFoundError:
            return None  # expired since the listing

    listed = await backend.list(kind_prefix(queue, SegmentKind.MANIFEST) + "/")
    found = await asyncio.gather(*(stored(info.key) for info in listed))
    links = [Committed.of_manifest(m) for m in found if isinstance(m, Manifest)]
    return choose(links, []).links


async def _same_bytes(backend: Backend, link: Committed, cover: Committed) -> bool:
    """Whether segment ``cover`` holds exactly ``link``'s bytes at ``link``'s offsets."""
    rel_cl = link.cl_base - cover.cl_base, link.cl_end - cover.cl_base
    rel_cq = [(o - cover.start_offset) * CQ_UNIT_SIZE for o in (link.start_offset, link.end_offset)]
    if not 0 <= rel_cl[0] < rel_cl[1] <= cover.commit_log.size:
        return False  # the cold commitlog ranges disagree
    if (link.start_offset, link.end_offset, link.cl_base, link.cl_end) == (
        cover.start_offset, cover.end_offset, cover.cl_base, cover.cl_end,
    ) and link.digest_algorithm == cover.digest_algorithm:  # fmt: skip
        return (link.commit_log.digest, link.consume_queue.digest) == (
            cover.commit_log.digest,
            cover.consume_queue.digest,
        )
    theirs = (
        await read_span(backend, cover.commit_log, *rel_cl),
        await read_span(backend, cover.consume_queue, *rel_cq),
    )
    ours = (
        await span_bytes(backend, link.commit_log),
        await span_bytes(backend, link.consume_queue),
    )
    return theirs == ours


async def collect_batches(
    keys: BatchKeys,
    catalogue: Catalogue,
    *,
    now_ms: int,
    grace_ms: int,
) -> BatchCollection:
    """Delete the batch objects of ``catalogue``'s broker that the rules (module docstring)
    allow, holding the lease of ``keys`` before each delete (and fencing above the
    highest before it goes); say what was deleted, what is kept for a reason to report
    (each also logged as an ERROR), and how many batch objects are left.

    Raises:
        LeaseLostError: another writer took the lease (nothing more is deleted).
        RetryableError / BackendError: the cold store failed.
    """
    backend = keys.backend
    listed = sorted(
        (sequence, info.key, info.size)
        for info in await backend.list(keys.prefix)
        if (sequence := parse_batch_key(info.key, keys.prefix)) is not None
    )
    if not listed:
        return BatchCollection()
    referenced = await asyncio.to_thread(catalogue.slices.referenced_batches)
    collector = _Collector(backend, now_ms, grace_ms, referenced)
    await collector.read_heads(listed)
    deleted: list[str] = []
    problems: list[str] = []
    for _sequence, key, _size in listed:
        if key in referenced:
            continue  # (a): not compacted yet
        ok, problem = await collector.verdict(key)
        if problem:
            log.error("%s", problem)
            problems.append(problem)
        if not ok:
            continue
        await hold_lease(keys.lease)
        if key == listed[-1][1]:
            await keys.fence()  # (d): the highest never vanishes
        await backend.delete(key)
        deleted.append(key)
    if deleted:
        log.info("deleted %d batch objects (every slice compacted): %s", len(deleted), deleted)
    left = sum(
        1
        for _s, key, _z in listed
        if key not in deleted
        and (key in referenced or isinstance(collector.heads.get(key), BatchHead))
    )
    return BatchCollection(tuple(deleted), tuple(problems), left)
