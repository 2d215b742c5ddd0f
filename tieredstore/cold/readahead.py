"""Read-ahead for sequential readers of committed segment objects.

A consumer draining a queue's history asks for the next few records again and again. Each
pull as its own range request would pay a cold-store round trip per pull; instead
:class:`ReadAhead` reads objects in fixed-size *parts* (``part_bytes``) and, whenever a
read touches part ``i`` of an object, starts fetching part ``i + 1`` in the background, so
the next pull finds it in memory (or already on its way).

Committed segment objects never change (a manifest names them; expiry deletes, it never
rewrites), so a cached part is never stale. What can happen is that an object is deleted
while it is cached: a read then still answers from memory, which is what the object held.

Bounds and eviction:

* parts are kept least-recently-used first out while their bytes exceed
  ``capacity_bytes``; a part being fetched counts at its full length, so memory stays
  bounded even when many queues read ahead at once;
* the parts a read needs are kept for it even when they alone exceed the capacity (one
  read's range); a prefetch starts only when its part fits beside what is kept, and
  never evicts anything;
* a part whose fetch failed is dropped at once: the next read asks the backend again
  (the error goes to every reader that waited for it, never to a later one);
* ``capacity_bytes == 0`` turns the cache off: every read goes to the backend as asked.

Compressed objects (:meth:`ReadAhead.read_framed`, stored as seekable zstd frames:
:mod:`tieredstore.cold.compressed.framed`) are cached as their *decoded frames* instead of
stored parts: a frame is the least a read decodes, so a consumer pulling a few records at a
time decodes each frame once, not once per pull, and a read of frame ``i`` fetches and
decodes frame ``i + 1`` ahead. A decoded frame counts at its decoded length
(``cold.frame_size``, 1 MiB by default) against the same ``capacity_bytes``, so the bound
above holds for both kinds: ``capacity_bytes`` plus the frames one read needs (memory
beyond that is transient: a frame's stored bytes while it is fetched and decoded, and
views a caller still holds). The seek tables come from the decoder's own cache.

Loop-safe, thread-unsafe: every caller shares the one event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tieredstore.cold.compressed.framed import Framed, index_reads, read_range
from tieredstore.cold.compressed.frames import FrameIndex, decode
from tieredstore.cold.pieces import Pieces
from tieredstore.errors import CorruptFrameError

if TYPE_CHECKING:
    from tieredstore.backends.base import Backend

__all__ = ["ReadAhead", "ReadAheadStats"]

log = logging.getLogger(__name__)

#: (object key, part or frame index, whether it is a decoded frame).
_PartKey = tuple[str, int, bool]


@dataclass(frozen=True, slots=True)
class ReadAheadStats:
    """What the cache holds now and what it has done since it was built (``decodes``:
    frames of compressed objects decoded, prefetched ones included)."""

    parts: int
    bytes: int
    hits: int
    misses: int
    prefetches: int
    decodes: int = 0


class ReadAhead:
    """Range reads of immutable objects through a size-bounded cache of parts."""

    def __init__(
        self,
        backend: Backend,
        *,
        capacity_bytes: int,
        part_bytes: int,
        on_fetch: Callable[[int], None] | None = None,
    ) -> None:
        if capacity_bytes < 0 or part_bytes < 1:
            raise ValueError("capacity_bytes must be >= 0 and part_bytes >= 1")
        self.backend = backend
        self.capacity_bytes = capacity_bytes
        self.part_bytes = part_bytes
        self._on_fetch = on_fetch
        self._parts: OrderedDict[_PartKey, asyncio.Task[bytes]] = OrderedDict()
        self._lengths: dict[_PartKey, int] = {}
        self._bytes = 0
        self._hits = self._misses = self._prefetches = self._decodes = 0

    @property
    def stats(self) -> ReadAheadStats:
        return ReadAheadStats(
            len(self._parts), self._bytes, self._hits, self._misses, self._prefetches,
            self._decodes,
        )  # fmt: skip

    async def read(self, key: str, start: int, end: int, size: int) -> bytes:
        """Bytes ``[start, end)`` of ``key``, an object of ``size`` bytes, as one
        ``bytes`` (a copy of the cached parts; :meth:`read_pieces` copies nothing).

        Raises what the backend raises (ObjectNotFoundError for a deleted object, a
        RetryableError while the store is unreachable); nothing is cached from a failure.
        """
        return (await self.read_pieces(key, start, end, size)).tobytes()

    async def read_pieces(self, key: str, start: int, end: int, size: int) -> Pieces:
        """Bytes ``[start, end)`` of ``key`` as views over the cached parts (no copy).

        The views keep their parts alive after an eviction; with the cache off
        (``capacity_bytes == 0``) they view the backend's answer. Raises as :meth:`read`.
        """
        if not 0 <= start < end <= size:
            raise ValueError(f"range [{start}, {end}) is not inside an object of {size} bytes")
        if self.capacity_bytes == 0:
            return Pieces.of(await self.backend.read_exact(key, start, end))
        first, last = start // self.part_bytes, (end - 1) // self.part_bytes
        tasks = [self._part(key, i, size, prefetch=False) for i in range(first, last + 1)]
        self._evict(keep={(key, i, False) for i in range(first, last + 1)})
        lo = (last + 1) * self.part_bytes
        if lo < size:
            self._prefetch((key, last + 1, False), min(self.part_bytes, size - lo),
                           lambda: self._part(key, last + 1, size, prefetch=True))  # fmt: skip
        parts = [await t for t in tasks]
        return Pieces.of_parts(parts, first * self.part_bytes, start, end)

    async def read_framed(self, key: str, start: int, end: int, framed: Framed) -> Pieces:
        """Uncompressed bytes ``[start, end)`` of the compressed object at ``key`` as views
        over its cached decoded frames (no copy); the frames the range overlaps are
        fetched and decoded unless cached, and the next one ahead. With the cache off
        (``capacity_bytes == 0``), or for frames after a plain head (``framed.at > 0``: a
        compressed batch, whose slices are read once each) the one decoder reads the range
        as asked.

        Raises:
            ValueError: an empty or negative range.
            CorruptFrameError: the object does not decode, or holds fewer than ``end``
                bytes.
            BackendError / ObjectNotFoundError: as the backend's reads.
        """
        if not 0 <= start < end:
            raise ValueError(f"range [{start}, {end}) is empty or negative")
        if self.capacity_bytes == 0 or framed.at:
            return Pieces.of(await read_range(self.backend, key, start, end, framed))
        index = await self._index(key, framed)
        if end > index.size:
            raise CorruptFrameError(
                f"holds {index.size} bytes decoded, the range read ends at {end}", where=key
            )
        first, last = index.frames(start, end)
        tasks = [self._frame(key, index, i, prefetch=False) for i in range(first, last)]
        self._evict(keep={(key, i, True) for i in range(first, last)})
        if last < index.count:
            self._prefetch((key, last, True), int(index.starts[last + 1] - index.starts[last]),
                           lambda: self._frame(key, index, last, prefetch=True))  # fmt: skip
        frames = [await t for t in tasks]
        return Pieces.of_parts(frames, int(index.starts[first]), start, end)

    async def _index(self, key: str, framed: Framed) -> FrameIndex:
        reads = index_reads(self.backend.url, key, framed)
        try:
            a, b = next(reads)
            while True:
                a, b = reads.send(await self.backend.read_exact(key, a, b))
        except StopIteration as done:
            index: FrameIndex = done.value
            return index

    def _prefetch(self, pk: _PartKey, length: int, start: Callable[[], object]) -> None:
        """Call ``start`` (which fetches part ``pk`` of ``length`` bytes) unless the part
        is cached or does not fit the capacity (a prefetch never evicts: what a reader uses
        now is worth more than a guess)."""
        if pk in self._parts:
            self._parts.move_to_end(pk)
        elif self._bytes + length <= self.capacity_bytes:
            start()

    def _part(self, key: str, index: int, size: int, *, prefetch: bool) -> asyncio.Task[bytes]:
        lo = index * self.part_bytes
        hi = min(lo + self.part_bytes, size)
        return self._task((key, index, False), hi - lo, lambda: self._fetch(key, lo, hi), prefetch)

    def _frame(self, key: str, index: FrameIndex, i: int, *, prefetch: bool) -> asyncio.Task[bytes]:
        length = int(index.starts[i + 1] - index.starts[i])
        return self._task((key, i, True), length, lambda: self._decode(key, index, i), prefetch)

    def _task(
        self,
        pk: _PartKey,
        length: int,
        fetch: Callable[[], Coroutine[object, object, bytes]],
        prefetch: bool,
    ) -> asyncio.Task[bytes]:
        """Part ``pk`` (``length`` bytes once fetched): its task, started by ``fetch`` unless
        one is cached or under way."""
        key, index, _ = pk
        task = self._parts.get(pk)
        if task is not None and _failed(task):
            self._drop(pk)  # failed, its done callback not run yet: fetch again
            task = None
        if task is not None:
            self._parts.move_to_end(pk)
            if not prefetch:
                self._hits += 1
            return task
        if prefetch:
            self._prefetches += 1
        else:
            self._misses += 1
        task = asyncio.create_task(fetch(), name=f"read-ahead {key}#{index}")
        task.add_done_callback(lambda t: self._settled(pk, t))
        self._parts[pk] = task
        self._lengths[pk] = length
        self._bytes += length
        return task

    async def _fetch(self, key: str, lo: int, hi: int) -> bytes:
        data = await self.backend.read_exact(key, lo, hi)
        if self._on_fetch is not None:
            self._on_fetch(len(data))
        return data

    async def _decode(self, key: str, index: FrameIndex, i: int) -> bytes:
        """Frame ``i`` fetched and decoded (in a worker thread: a 1 MiB frame is a few ms
        of CPU, which the other readers on the loop need not wait for)."""
        stored = await self._fetch(key, int(index.at[i]), int(index.at[i + 1]))
        self._decodes += 1
        return await asyncio.to_thread(decode, index, i, i + 1, stored, where=key)

    def _settled(self, pk: _PartKey, task: asyncio.Task[bytes]) -> None:
        """Drop a failed part at once (the next read retries), and mark its exception as
        seen: a prefetch nobody awaits must not log "exception was never retrieved"."""
        if _failed(task):
            if self._parts.get(pk) is task:
                self._drop(pk)
            if not task.cancelled():
                log.debug("read-ahead of %s part %d failed: %s", *pk[:2], task.exception())

    def _evict(self, keep: set[_PartKey]) -> None:
        for pk in list(self._parts):
            if self._bytes <= self.capacity_bytes:
                return
            if pk not in keep:
                self._drop(pk)

    def _drop(self, pk: _PartKey) -> None:
        # A dropped part still being fetched finishes for whoever awaits it; its bytes
        # are simply not kept.
        del self._parts[pk]
        self._bytes -= self._lengths.pop(pk)

    async def settle(self) -> None:
        """Wait until no part is being fetched (the background fetches included)."""
        pending = [t for t in self._parts.values() if not t.done()]
        await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.sleep(0)  # one loop turn: the parts' done callbacks run

    async def close(self) -> None:
        """Cancel fetches nobody waits for and forget every part; safe to call twice."""
        tasks = list(self._parts.values())
        for pk in list(self._parts):
            self._drop(pk)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _failed(task: asyncio.Task[bytes]) -> bool:
    return task.done() and (task.cancelled() or task.exception() is not None)
