"""Taking a hot fingerprint (:mod:`tieredstore.cold.fingerprint`, the format): reading a
broker's hot store block by block, paced, into one :class:`Fingerprint`.

``tieredstore fingerprint`` runs this on each broker host (no Spark, no JVM) and creates
the result under the broker's prefix
(``_fingerprints/s<sequence:010d>-<taken_ms:013d>.json``,
:func:`~tieredstore.cold.layout.fingerprint_key`). Per block it takes the digest and the
leaf digests the format defines (:class:`BlockHasher`) and the store times of its first
and last record; per queue, ``stored_from`` for each ``since_ms`` of the broker's tiering
record, found in the hot records read for the blocks — what
:class:`tieredstore.verifier.scope.HotFacts` needs to decide, per message time, which messages were
stored while a rule tiered their topic.

All queues are read together, in commit-log order, one window (``window_bytes``,
:data:`DEFAULT_WINDOW_BYTES`) at a time: the window starts at the lowest record any queue
still has to read, and each queue with records below its end reads them (a run of its
open block, or more blocks), feeding its block's digest. Then the commit-log pages below
the lowest record still to read are released from the process
(:meth:`~tieredstore.hot.commitlog.HotCommitlog.release`). Read queue by queue instead,
every queue's records span the whole log (the broker interleaves them), and the run
would end up mapping every page of the hot store: its resident set the size of the store.

A window's runs are read in groups of about :data:`_GROUP_BYTES`, each by one gather into
one of two buffers the run keeps, and hashed by a worker thread while the next group is
read (xxhash lets go of the GIL). Memory is bounded by the window's mapped pages, the two
buffers, and the open blocks' consume-queue units, read a chunk at a time so that all
queues together hold about :data:`_UNITS_HELD` of them.

:func:`take_carrying` is the incremental form: given the broker's previous fingerprint it
carries forward each block the rule of :mod:`tieredstore.verifier.fleet.carry` proves
unchanged, reading only its consume-queue units and its first and last leaves' records,
and reads every other block whole. Its result is the fingerprint a full run would take
of the same store (docs/verification.md, "Incremental fingerprints").
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Final, Self

import numpy as np
import numpy.typing as npt

from tieredstore.clock import Clock
from tieredstore.cold.fingerprint import (
    LEAF_DIGEST_SIZE,
    UNIT_STREAM_BYTES,
    Block,
    BlockHasher,
    Fingerprint,
    QueuePrint,
    block_ranges,
    block_streams,
)
from tieredstore.errors import (
    OffsetOutOfRangeError,
    StoreError,
    StoreNotFoundError,
    TieredStoreError,
)
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE, Units
from tieredstore.formats.record import STORE_TIMESTAMP_AT_V4, STORE_TIMESTAMP_AT_V6, SysFlag
from tieredstore.formats.record import SYS_FLAG_AT as _SYS_FLAG_AT
from tieredstore.hot.commitlog import HotCommitlog
from tieredstore.hot.store import HotRange, HotStore, QueueKey
from tieredstore.ratelimit import TokenBucket
from tieredstore.verifier.fleet.carry import carries

__all__ = [
    "DEFAULT_BLOCK_OFFSETS",
    "DEFAULT_LEAF_OFFSETS",
    "DEFAULT_WINDOW_BYTES",
    "Taken",
    "take_carrying",
    "take_fingerprint",
]

#: Queue offsets per block: 256 blocks per million messages.
DEFAULT_BLOCK_OFFSETS: Final = 4096
#: Queue offsets per leaf: the unit of comparison (8 bytes of digest per leaf).
DEFAULT_LEAF_OFFSETS: Final = 64
#: Commit-log bytes read together before the pages behind them are released: about the
#: most of the hot store the run keeps mapped.
DEFAULT_WINDOW_BYTES: Final = 64 << 20
#: Records read in one gather, into one buffer (a group of a window's runs).
_GROUP_BYTES: Final = 1 << 20
#: Consume-queue units all queues' open blocks hold together, about (44 bytes each, with
#: their offsets, sizes and ends): a block's units are read a chunk of this over the
#: queue count at a time (at least :data:`_MIN_CHUNK`; a block of 4,096 offsets whole
#: up to 256 queues).
_UNITS_HELD: Final = 1 << 20
_MIN_CHUNK: Final = 256
#: Groups whose records are being hashed while the next is read (each holds its buffer).
_DIGESTS_QUEUED: Final = 1


def _store_time_at(buf: memoryview, pos: int) -> int:
    flag = int.from_bytes(buf[pos + _SYS_FLAG_AT : pos + _SYS_FLAG_AT + 4], "big")
    ts = STORE_TIMESTAMP_AT_V6 if flag & int(SysFlag.BORNHOST_V6) else STORE_TIMESTAMP_AT_V4
    return int.from_bytes(buf[pos + ts : pos + ts + 8], "big", signed=True)


def first_stored_at(
    records: bytes | bytearray | memoryview, sizes: npt.NDArray[np.int64], since_ms: int
) -> int:
    """The index among ``records`` (back to back) of the first stored at or after
    ``since_ms`` (``len(sizes)``: none); store times grow with queue offsets, so a
    binary search, as the verifier's hot reader does."""
    buf = memoryview(records)
    starts = np.zeros(sizes.size, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    lo, hi = 0, int(sizes.size)
    while lo < hi:
        mid = (lo + hi) // 2
        if _store_time_at(buf, int(starts[mid])) < since_ms:
            lo = mid + 1
        else:
            hi = mid
    return lo


def store_times(
    records: bytes | bytearray | memoryview, sizes: npt.NDArray[np.int64]
) -> tuple[int, int]:
    """The storeTimestamp of the first and of the last of ``records`` (back to back)."""
    buf = memoryview(records)
    return _store_time_at(buf, 0), _store_time_at(buf, int(sizes[:-1].sum()))


@dataclass(frozen=True, slots=True)
class Taken:
    """A fingerprint as taken: the fingerprint, the hot bytes read to take it (consume
    queue and records; a full run reads ``fingerprint.hot_bytes``) and its blocks carried
    forward from the previous fingerprint (0: a full run)."""

    fingerprint: Fingerprint
    read_bytes: int
    carried_blocks: int


async def take_fingerprint(
    hot: HotStore,
    *,
    cluster: str,
    broker: str,
    clock: Clock,
    bucket: TokenBucket | None = None,
    block_offsets: int = DEFAULT_BLOCK_OFFSETS,
    leaf_offsets: int = DEFAULT_LEAF_OFFSETS,
    since_ms: tuple[int, ...] = (),
    sequence: int = 0,
    window_bytes: int = DEFAULT_WINDOW_BYTES,
) -> Fingerprint:
    """Read every hot queue block by block and fingerprint it (module doc): per block its
    digest and its leaves' (of ``leaf_offsets``), ``stored_from`` for each of ``since_ms``
    (the tiering record's entry times), ``sequence`` as given (the caller allocates it).

    ``bucket`` paces the reads (bytes of consume queue and commit log); its waits are on
    ``clock``. A block the broker deletes while we read (the queue's oldest) moves the
    queue's hot min past it.

    Raises:
        StoreError: the store is not a broker store, or a file does not read.
    """
    taken = await take_carrying(
        hot, None, cluster=cluster, broker=broker, clock=clock, bucket=bucket,
        block_offsets=block_offsets, leaf_offsets=leaf_offsets, since_ms=since_ms,
        sequence=sequence, window_bytes=window_bytes,
    )  # fmt: skip
    return taken.fingerprint


async def take_carrying(
    hot: HotStore,
    previous: Fingerprint | None,
    *,
    cluster: str,
    broker: str,
    clock: Clock,
    bucket: TokenBucket | None = None,
    block_offsets: int = DEFAULT_BLOCK_OFFSETS,
    leaf_offsets: int = DEFAULT_LEAF_OFFSETS,
    since_ms: tuple[int, ...] = (),
    sequence: int = 0,
    window_bytes: int = DEFAULT_WINDOW_BYTES,
) -> Taken:
    """:func:`take_fingerprint`, carrying forward from ``previous`` (None: a full run)
    every block :func:`~tieredstore.verifier.fleet.carry.carries` allows; the others are
    read whole. The caller decides that ``previous`` is this broker's newest, of this
    format and of the same ``block_offsets`` and ``leaf_offsets``
    (:mod:`tieredstore.verifier.fleet.previous`).

    Raises:
        StoreError: the store is not a broker store, or a file does not read.
        ValueError: ``previous`` is of other block or leaf offsets.
    """
    if block_offsets <= 0 or leaf_offsets <= 0:
        raise ValueError(f"block and leaf offsets must be > 0, got {block_offsets}, {leaf_offsets}")
    if window_bytes <= 0:
        raise ValueError(f"window_bytes must be > 0, got {window_bytes}")
    if previous is not None and (previous.block_offsets, previous.leaf_offsets) != (
        block_offsets,
        leaf_offsets,
    ):
        raise ValueError("the previous fingerprint is of other block or leaf offsets")
    taken = clock.now_ms()
    with HotCommitlog(hot.commitlog_files()) as cl, _Digests(leaf_offsets) as digests:
        before = {(q.topic, q.queue_id): q for q in previous.queues} if previous else {}
        cursors = [
            _Cursor(key, hot.queue_range(key.topic, key.queue_id),
                    before.get((key.topic, key.queue_id)), block_offsets)
            for key in hot.queues() if hot.cq_files(key.topic, key.queue_id)
        ]  # fmt: skip
        reader = _Reader(cl, digests, bucket, since_ms, leaf_offsets, len(cursors))
        await reader.read(hot, cursors, window_bytes)
    queues = tuple(c.printed(since_ms, leaf_offsets) for c in cursors)
    fp = Fingerprint(
        cluster, broker, taken, block_offsets, reader.total, queues, sequence, leaf_offsets
    )
    return Taken(fp, reader.read_bytes, reader.carried)


class _Reader:
    """One run's reads of the hot store: the commit log, the digest worker, the pace, and
    what it read, covered (``total``: ``hot_bytes``) and carried so far."""

    def __init__(
        self,
        cl: HotCommitlog,
        digests: _Digests,
        bucket: TokenBucket | None,
        since_ms: tuple[int, ...],
        leaf_offsets: int,
        queues: int,
    ) -> None:
        self._cl, self._digests, self._bucket = cl, digests, bucket
        self._since, self._leaf = since_ms, leaf_offsets
        # Units an open block holds at a time: :data:`_UNITS_HELD` shared by ``queues``.
        self._chunk = max(_MIN_CHUNK, _UNITS_HELD // max(1, queues))
        self.total = 0
        self.read_bytes = 0
        self.carried = 0
        # A ring of buffers, a group's records read into one while the digest worker
        # hashes those of the one before: a new buffer for each group would be faulted in
        # afresh every time (the run twice as long on a 2 GiB store of 128 queues).
        self._buffers = [np.empty(0, np.uint8) for _ in range(_DIGESTS_QUEUED + 1)]
        self._next = 0

    async def read(self, hot: HotStore, cursors: list[_Cursor], window_bytes: int) -> None:
        """Read every queue's blocks, all queues together, window by window through the
        commit log (module doc), then release the pages behind the lowest record still
        to read."""
        waiting: list[tuple[int, int]] = []  # (next record's commit-log offset, cursor)
        for i, c in enumerate(cursors):
            await self._open(hot, c)
            if c.open is not None:
                heapq.heappush(waiting, (c.open.next_offset, i))
        while waiting:
            end = waiting[0][0] + window_bytes
            window: list[_Run] = []
            touched: dict[int, None] = {}  # the cursors read from, in order
            while waiting and waiting[0][0] < end:
                i = heapq.heappop(waiting)[1]
                run = _Run.below(i, cursors, end, _GROUP_BYTES)
                window.append(run)
                touched[i] = None
                o = run.block
                try:
                    o.load(hot, self._chunk)
                except (OffsetOutOfRangeError, StoreNotFoundError) as exc:
                    self._deleted(cursors[i], o.end, exc)
                    continue
                if not o.done and o.next_offset < end:
                    heapq.heappush(waiting, (o.next_offset, i))  # more of it here
            for group in _groups(window):
                await self._read_group(group, cursors)
            for i in touched:
                c = cursors[i]
                if c.open is not None and c.open.done:
                    self._close(c, c.open)
                if c.open is None:
                    await self._open(hot, c)
                if c.open is not None:
                    heapq.heappush(waiting, (c.open.next_offset, i))
            self._cl.release(waiting[0][0] if waiting else end)

    async def _read_group(self, group: list[_Run], cursors: list[_Cursor]) -> None:
        """Read a group of a window's runs in one gather, and feed them; a run whose
        records are gone (read again alone to tell) drops its block (:meth:`_deleted`)."""
        offsets = np.concatenate([r.offsets for r in group])
        sizes = np.concatenate([r.sizes for r in group])
        buffer = self._buffer(int(sizes.sum()))
        try:
            records = self._cl.gather_into(offsets, sizes, buffer)
        except (OffsetOutOfRangeError, StoreNotFoundError) as exc:
            if len(group) == 1:
                self._deleted(cursors[group[0].cursor], group[0].block.end, exc)
            else:  # which runs' records are gone: each read alone
                for run in group:
                    await self._read_group([run], cursors)
            return
        self._next = (self._next + 1) % len(self._buffers)  # the next group's buffer
        units = np.concatenate([r.units for r in group])
        stream, _ = block_streams(units, records)  # the physicalOffsets zeroed in place
        # Each record's end, and each run's first unit, in the group's buffer.
        ends = np.cumsum(sizes)
        bounds = np.cumsum([0] + [r.stop - r.pos for r in group]).tolist()
        fed = []
        for r, lo, hi in zip(group, bounds, bounds[1:], strict=False):
            first_at = int(ends[lo - 1]) if lo else 0
            part = records[first_at : int(ends[hi - 1])]
            o, c = r.block, cursors[r.cursor]
            first, last = store_times(part, r.sizes)
            if r.pos == 0:
                o.first = first
            o.last = last
            at = o.start + r.pos
            new = (t for t in self._since if t not in c.found and t not in o.found and last >= t)
            o.found |= {t: at + first_stored_at(part, r.sizes, t) for t in new}
            width = UNIT_STREAM_BYTES
            fed.append((o.digest, at, r.sizes, stream[lo * width : hi * width], part))
        self._digests.feed(fed)
        await self._pay(len(records))

    def _buffer(self, nbytes: int) -> npt.NDArray[np.uint8]:
        """The buffer to read the next group into, of at least ``nbytes``: none whose
        records the digest worker may still hash (the ring holds one more buffer than
        :data:`_DIGESTS_QUEUED`)."""
        if self._buffers[self._next].size < nbytes:  # not zeroed: the gather writes it
            self._buffers[self._next] = np.empty(nbytes, np.uint8)
        return self._buffers[self._next]

    def _close(self, c: _Cursor, o: _Open) -> None:
        """``o``, read whole, is one of ``c``'s blocks."""
        c.blocks.append(_ReadBlock(o.start, o.end, self._digests.finish(o.digest), o.first, o.last))
        c.found |= o.found
        self.total += o.size
        c.open = None

    async def _open(self, hot: HotStore, c: _Cursor) -> None:
        """Open ``c``'s next block to read: carry forward (or skip, deleted) the blocks
        before it that need no records read. ``c.open`` None: the queue is done."""
        while (block := next(c.ranges, None)) is not None:
            start, end = block
            try:
                opened = await self._block(hot, c, start, end)
            except (OffsetOutOfRangeError, StoreNotFoundError) as exc:
                self._deleted(c, end, exc)
                continue
            if opened is not None:
                c.open = opened
                return
        c.open = None

    async def _block(self, hot: HotStore, c: _Cursor, start: int, end: int) -> _Open | None:
        """The block ``[start, end)`` of ``c``: carried forward from the previous
        fingerprint if :func:`carries` allows (None), else opened to be read."""
        units = hot.read_units(c.key.topic, c.key.queue_id, start, end)
        sizes = units["size"].astype(np.int64)
        size = int(sizes.sum()) + CQ_UNIT_SIZE * units.shape[0]
        old = c.old_blocks.get(start)
        if old is not None and _searched(old, self._since, c.found):
            check = carries(old, end, units, self._cl, self._leaf)
            await self._pay(CQ_UNIT_SIZE * units.shape[0] + check.read_bytes)
            if check.unchanged:
                new = (t for t in self._since if t not in c.found and old.last_store_ms >= t)
                c.found |= dict.fromkeys(new, start)  # _searched: first >= t
                self.total += size
                self.carried += 1
                c.blocks.append(_ReadBlock.carried(old))
                return None
        else:
            await self._pay(CQ_UNIT_SIZE * units.shape[0])
        first = units if units.shape[0] <= self._chunk else units[: self._chunk].copy()
        return _Open(c.key, start, end, size, self._digests.start(start, end), first)

    def _deleted(self, c: _Cursor, end: int, exc: TieredStoreError) -> None:
        """A block of ``c`` up to ``end`` is gone: the broker's retention moved the hot
        min past it, if no block of the queue was read before it; else the queue changed
        under the run."""
        if c.blocks:
            raise StoreError(f"hot queue {c.key} changed under the fingerprint: {exc}") from exc
        c.low = end
        c.open = None

    async def _pay(self, nbytes: int) -> None:
        self.read_bytes += nbytes
        if self._bucket is not None:
            await self._bucket.acquire(nbytes)


def _groups(window: list[_Run]) -> Iterator[list[_Run]]:
    """The window's runs, in order, in groups of about :data:`_GROUP_BYTES` of records
    each (a larger run alone): each group is read into one buffer and hashed while the
    next is read."""
    group: list[_Run] = []
    nbytes = 0
    for run in window:
        group.append(run)
        nbytes += run.nbytes
        if nbytes >= _GROUP_BYTES:
            yield group
            group, nbytes = [], 0
    if group:
        yield group


def _searched(old: Block, since_ms: tuple[int, ...], found: dict[int, int]) -> bool:
    """Whether carrying ``old`` leaves no ``stored_from`` time to search inside it: each
    time not found before it is after its last record or at or before its first."""
    return all(t in found or t > old.last_store_ms or t <= old.first_store_ms for t in since_ms)


def _feed_all(runs: list[_Fed]) -> None:
    """Feed each run to its digest (its records are a view of the group's buffer, which
    the view keeps alive)."""
    for digest, at, sizes, units, part in runs:
        digest.feed(at, sizes, units, part)


class _BlockDigest:
    """One block's digest and leaf digests, fed run after run of its offsets in order
    (on the digest worker only)."""

    def __init__(self, start: int, end: int, leaf_offsets: int) -> None:
        self._end, self._leaf_offsets = end, leaf_offsets
        self._hasher = BlockHasher()
        self._leaf = BlockHasher(LEAF_DIGEST_SIZE)
        self._leaves = bytearray()

    def feed(
        self, at: int, sizes: npt.NDArray[np.int64], units: bytes, records: memoryview
    ) -> None:
        """Add the offsets ``[at, at + len(sizes))``, as :func:`block_streams` gives them."""
        self._hasher.feed(units, records)
        ends = np.cumsum(sizes).tolist()
        width, step = UNIT_STREAM_BYTES, self._leaf_offsets
        i, n = 0, len(ends)
        while i < n:
            leaf_end = min(self._end, ((at + i) // step + 1) * step)
            j = min(n, leaf_end - at)
            lo = ends[i - 1] if i else 0
            self._leaf.feed(units[i * width : j * width], records[lo : ends[j - 1]])
            if at + j == leaf_end:
                self._leaves += bytes.fromhex(self._leaf.hexdigest())
                self._leaf = BlockHasher(LEAF_DIGEST_SIZE)
            i = j

    def result(self) -> tuple[str, bytes]:
        return self._hasher.hexdigest(), bytes(self._leaves)


class _Digests:
    """Block digests taken on a worker thread (xxhash lets go of the GIL) while the
    caller reads on; at most ``_DIGESTS_QUEUED`` groups of records wait, each holding its
    buffer (a context manager: leaving it waits for them). One thread: each block's runs
    are fed in the order given."""

    def __init__(self, leaf_offsets: int) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="fingerprint-digest")
        self._queued: deque[Future[None]] = deque()
        self._leaf = leaf_offsets

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown()

    def start(self, start: int, end: int) -> _BlockDigest:
        """A new block's digest, ``[start, end)``."""
        return _BlockDigest(start, end, self._leaf)

    def feed(self, runs: list[_Fed]) -> None:
        """Feed each run to its block's digest: ``(digest, first offset, sizes, units
        stream, records)`` as :func:`block_streams` gives them, the records a view of the
        group's buffer."""
        if len(self._queued) == _DIGESTS_QUEUED:
            self._queued.popleft().result()  # bounds the records held
        self._queued.append(self._pool.submit(_feed_all, runs))

    def finish(self, digest: _BlockDigest) -> Future[tuple[str, bytes]]:
        """The digest of a block fed whole, and its leaf digests, once taken."""
        return self._pool.submit(digest.result)


@dataclass(frozen=True, slots=True)
class _Run:
    """The records ``[pos, stop)`` of a queue's open block (offsets from its start), read
    in one window: their units, commit-log offsets, sizes and bytes."""

    cursor: int
    block: _Open
    pos: int
    stop: int
    units: Units
    offsets: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]
    nbytes: int

    @classmethod
    def below(cls, cursor: int, cursors: list[_Cursor], end: int, most: int) -> _Run:
        """The open block's records from its next, up to the first at or after commit-log
        offset ``end``, to ``most`` bytes and to the end of its units' chunk (at least one
        record); the block moves past them."""
        o = cursors[cursor].open
        assert o is not None
        i = o.pos - o.lo  # in the chunk
        if o.ascending:
            stop = int(o.offsets.searchsorted(end, "left"))
        else:  # a consume queue pointing back: the records up to the first at or past end
            ahead = o.offsets[i:] >= end
            stop = i + (int(np.argmax(ahead)) if ahead.any() else int(ahead.size))
        before = int(o.ends[i - 1]) if i else 0
        if int(o.ends[stop - 1]) - before > most:  # (the window's end leaves one at least)
            stop = max(i + 1, int(o.ends.searchsorted(before + most, "right")))
        run = cls(cursor, o, o.pos, o.lo + stop, o.units[i:stop], o.offsets[i:stop],
                  o.sizes[i:stop], int(o.ends[stop - 1]) - before)  # fmt: skip
        o.pos = run.stop
        return run


#: One run to feed its block's digest (:meth:`_Digests.feed`).
_Fed = tuple["_BlockDigest", int, npt.NDArray[np.int64], bytes, memoryview]


@dataclass(slots=True)
class _Open:
    """A block being read: its units a chunk at a time (the offsets ``[lo, lo +
    len(units))`` from its start), how far its records are read (``pos``), what was found
    in them, and its digest being fed."""

    key: QueueKey
    start: int
    end: int
    size: int
    digest: _BlockDigest
    units: Units
    lo: int = 0
    pos: int = 0
    first: int = 0
    last: int = 0
    found: dict[int, int] = field(default_factory=dict)
    offsets: npt.NDArray[np.int64] = field(init=False)
    sizes: npt.NDArray[np.int64] = field(init=False)
    ends: npt.NDArray[np.int64] = field(init=False)  # each record's end among the chunk's
    ascending: bool = field(init=False)  # the chunk's records in commit-log order

    def __post_init__(self) -> None:
        self._chunk(self.units)

    def _chunk(self, units: Units) -> None:
        self.units = units
        self.offsets = units["commitlog_offset"].astype(np.int64)
        self.sizes = units["size"].astype(np.int64)
        self.ends = np.cumsum(self.sizes)
        self.ascending = bool(np.all(self.offsets[1:] >= self.offsets[:-1]))

    @property
    def done(self) -> bool:
        """Whether every record of the block is read."""
        return self.pos == self.end - self.start

    def load(self, hot: HotStore, chunk: int) -> None:
        """Read the next chunk of units once the records of this one are all read.

        Raises:
            OffsetOutOfRangeError, StoreNotFoundError: the consume queue no longer holds
                them (the broker deleted them).
        """
        if not self.done and self.pos == self.lo + self.units.shape[0]:
            self.lo = self.pos
            top = min(self.end, self.start + self.pos + chunk)
            self._chunk(
                hot.read_units(self.key.topic, self.key.queue_id, self.start + self.pos, top)
            )

    @property
    def next_offset(self) -> int:
        """The commit-log offset of the next record to read."""
        return int(self.offsets[self.pos - self.lo])


class _Cursor:
    """One queue's run: its blocks to come, the one open, those read or carried, the
    ``stored_from`` offsets found and its hot min (moved past blocks the broker deleted)."""

    def __init__(
        self, key: QueueKey, rng: HotRange, before: QueuePrint | None, block_offsets: int
    ) -> None:
        self.key = key
        self.low, self.high = rng.min, rng.max
        self.ranges = block_ranges(rng.min, rng.max, block_offsets)
        self.old_blocks = {b.start: b for b in before.blocks} if before is not None else {}
        self.blocks: list[_ReadBlock] = []
        self.found: dict[int, int] = {}
        self.open: _Open | None = None

    def printed(self, since_ms: tuple[int, ...], leaf_offsets: int) -> QueuePrint:
        """The queue's print, each block's digest waited for."""
        top = max(self.low, self.high)
        stored = tuple((t, self.found.get(t, top)) for t in sorted(set(since_ms)))
        return _ReadQueue(
            self.key.topic, self.key.queue_id, self.low, top, self.blocks, stored, leaf_offsets
        ).printed()


@dataclass(frozen=True, slots=True)
class _ReadBlock:
    """A block read, its digest being taken."""

    start: int
    end: int
    digest: Future[tuple[str, bytes]]
    first: int
    last: int

    @classmethod
    def carried(cls, old: Block) -> _ReadBlock:
        """A block carried forward: its digests are the previous fingerprint's."""
        done: Future[tuple[str, bytes]] = Future()
        done.set_result((old.digest, old.leaves))
        return cls(old.start, old.end, done, old.first_store_ms, old.last_store_ms)


@dataclass(frozen=True, slots=True)
class _ReadQueue:
    """A queue read: :class:`QueuePrint` once its blocks' digests are taken."""

    topic: str
    queue_id: int
    hot_min: int
    hot_max: int
    blocks: list[_ReadBlock]
    stored_from: tuple[tuple[int, int], ...]
    leaf_offsets: int

    def printed(self) -> QueuePrint:
        """The queue's print, each block's digest waited for."""
        blocks = []
        for b in self.blocks:
            digest, leaves = b.digest.result()
            blocks.append(Block(b.start, b.end, digest, b.first, b.last, leaves))
        return QueuePrint(
            self.topic,
            self.queue_id,
            self.hot_min,
            self.hot_max,
            tuple(blocks),
            self.stored_from,
            self.leaf_offsets,
        )
