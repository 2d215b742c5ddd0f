"""Streaming one committed link in bounded chunks, every record checked on the way.

:func:`segment_chunks` reads a link's CONSUME_QUEUE units in blocks and its COMMIT_LOG
records in ranges of at most ``batch_bytes`` (one record more if a single record is
larger), so memory stays bounded whatever the link's size. Both are range reads inside
the link's spans (:class:`~tieredstore.cold.history.Span`): a segment's whole objects, or
a batch slice's ranges of its batch object. Every chunk is checked before it is handed
on (vectorised): units point at contiguous records inside the link, and each record has
a known magic, totalSize == its unit's size, queueOffset field == its queue offset and
physicalOffset field == its cold offset. When the whole link is read, the digest of
each span's bytes is compared with the one its commit point records.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from tieredstore.backends.base import Backend
from tieredstore.cold.compressed.framed import read_range
from tieredstore.cold.digests import Hasher, hasher
from tieredstore.cold.history import Committed
from tieredstore.cold.segment import MIN_RECORD_SIZE, check_record_heads, span_fault
from tieredstore.errors import CorruptUnitError, DigestMismatchError
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE, Units, decode_units
from tieredstore.formats.vector import store_timestamps

__all__ = ["Chunk", "segment_chunks"]

I64 = npt.NDArray[np.int64]
_UNITS_PER_READ: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class Chunk:
    """Consecutive records of one link: queue offsets ``[first, first + len(sizes))``.

    ``data`` holds the records back to back, as read; ``starts`` are their positions in
    it; ``cold`` their cold commitlog offsets.
    """

    link: Committed
    first: int
    data: bytes
    starts: I64
    sizes: I64
    tags: I64
    cold: I64
    stamps: I64

    def __len__(self) -> int:
        return len(self.sizes)


def _check_units(m: Committed, first: int, units: Units, expected_cold: int) -> None:
    cold = units["commitlog_offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    want = expected_cold + np.concatenate((np.zeros(1, np.int64), np.cumsum(sizes)[:-1]))
    bad = np.flatnonzero((sizes < MIN_RECORD_SIZE) | (cold != want) | (cold + sizes > m.cl_end))
    if bad.size:
        i = int(bad[0])
        raise CorruptUnitError(
            f"unit of queue offset {first + i} points at cold offset {int(cold[i])} size "
            f"{int(sizes[i])}, not at the next record inside [{m.cl_base}, {m.cl_end})",
            where=f"{m.consume_queue_key}@"
            f"{m.consume_queue.at + (first - m.start_offset + i) * CQ_UNIT_SIZE}",
        )


class _Digests:
    """Digests of both spans' bytes (by the commit point's algorithm), fed in order in a
    worker thread (hashing overlaps the reads and the writes); compared only if the
    whole link was read."""

    def __init__(self, m: Committed, whole: bool) -> None:
        self.m = m
        self.whole = whole
        self.cl = hasher(m.algorithm)
        self.cq = hasher(m.algorithm)
        self._last: asyncio.Future[None] | None = None

    def feed(self, h: Hasher, data: bytes) -> None:
        """Queue ``data`` for ``h`` after everything fed before it."""
        if self.whole:
            self._last = asyncio.ensure_future(self._update(self._last, h, data))

    @staticmethod
    async def _update(prev: asyncio.Future[None] | None, h: Hasher, data: bytes) -> None:
        if prev is not None:
            await prev
        await asyncio.to_thread(h.update, data)

    async def check(self) -> None:
        if not self.whole:
            return
        if self._last is not None:
            await self._last
        for span, h in ((self.m.commit_log, self.cl), (self.m.consume_queue, self.cq)):
            if h.hexdigest() != span.digest:
                found = f"{self.m.digest_algorithm} is {h.hexdigest()}"
                message, at = span_fault(self.m, span, found, span.digest)
                raise DigestMismatchError(message, where=at)


async def segment_chunks(
    backend: Backend, m: Committed, *, first: int, batch_bytes: int
) -> AsyncIterator[Chunk]:
    """Yield the records of link ``m`` from queue offset ``first`` to its end, in chunks.

    Raises:
        CorruptUnitError / CorruptRecordError: a unit or record that does not fit.
        DigestMismatchError: a span (read whole) differs from its commit point.
        ObjectNotFoundError: an object of the committed link is missing.
    """
    if not m.start_offset <= first <= m.end_offset:
        raise ValueError(f"offset {first} outside {m.describe()}")
    cq, cl = m.consume_queue, m.commit_log
    digests = _Digests(m, whole=first == m.start_offset)
    offset = first
    cold_next = -1
    while offset < m.end_offset:
        n = min(m.end_offset - offset, _UNITS_PER_READ)
        rel = (offset - m.start_offset) * CQ_UNIT_SIZE
        raw = await read_range(
            backend, cq.key, cq.at + rel, cq.at + rel + n * CQ_UNIT_SIZE, cq.framed
        )
        digests.feed(digests.cq, raw)
        units = decode_units(raw, where=m.consume_queue_key)
        if cold_next < 0:
            cold_next = int(units["commitlog_offset"][0]) if first > m.start_offset else m.cl_base
        _check_units(m, offset, units, cold_next)
        sizes_all = units["size"].astype(np.int64)
        ends = np.cumsum(sizes_all)
        done = 0
        while done < n:
            # At most batch_bytes, but always at least one record: never a stall.
            limit = (int(ends[done - 1]) if done else 0) + batch_bytes
            k = max(int(np.searchsorted(ends, limit, side="right")) - done, 1)
            sizes = sizes_all[done : done + k]
            lo = cl.at + cold_next - m.cl_base
            data = await read_range(backend, cl.key, lo, lo + int(sizes.sum()), cl.framed)
            digests.feed(digests.cl, data)
            arr = np.frombuffer(data, dtype=np.uint8)
            starts = np.concatenate((np.zeros(1, np.int64), np.cumsum(sizes)[:-1]))
            cold = cold_next + starts
            check_record_heads(m, offset, arr, starts, sizes, cold)
            yield Chunk(
                m,
                offset,
                data,
                starts,
                sizes,
                units["tags_code"][done : done + k].astype(np.int64),
                cold,
                store_timestamps(arr, starts),
            )
            offset += k
            done += k
            cold_next += len(data)
    await digests.check()
