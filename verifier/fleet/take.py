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

Memory is bounded by three blocks' records: the one being read and the two before it,
whose digests a worker thread takes meanwhile (xxhash and hashlib let go of the GIL).

:func:`take_carrying` is the incremental form: given the broker's previous fingerprint it
carries forward each block the rule of :mod:`tieredstore.verifier.fleet.carry` proves
unchanged, reading only its consume-queue units and its first and last leaves' records,
and reads every other block whole. Its result is the fingerprint a full run would take
of the same store (docs/verification.md, "Incremental fingerprints").
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
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
from tieredstore.errors import OffsetOutOfRangeError, StoreError, StoreNotFoundError
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE, Units
from tieredstore.formats.record import STORE_TIMESTAMP_AT_V4, STORE_TIMESTAMP_AT_V6, SysFlag
from tieredstore.formats.record import SYS_FLAG_AT as _SYS_FLAG_AT
from tieredstore.hot.commitlog import HotCommitlog
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.ratelimit import TokenBucket
from tieredstore.verifier.fleet.carry import carries

__all__ = [
    "DEFAULT_BLOCK_OFFSETS",
    "DEFAULT_LEAF_OFFSETS",
    "Taken",
    "take_carrying",
    "take_fingerprint",
]

#: Queue offsets per block: 256 blocks per million messages.
DEFAULT_BLOCK_OFFSETS: Final = 4096
#: Queue offsets per leaf: the unit of comparison (8 bytes of digest per leaf).
DEFAULT_LEAF_OFFSETS: Final = 64
#: Blocks whose digest is being taken while the next is read (each holds its records).
_DIGESTS_QUEUED: Final = 2


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
        sequence=sequence,
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
    if previous is not None and (previous.block_offsets, previous.leaf_offsets) != (
        block_offsets,
        leaf_offsets,
    ):
        raise ValueError("the previous fingerprint is of other block or leaf offsets")
    taken = clock.now_ms()
    with HotCommitlog(hot.commitlog_files()) as cl, _Digests(leaf_offsets) as digests:
        reader = _Reader(cl, digests, bucket, since_ms, leaf_offsets)
        before = {(q.topic, q.queue_id): q for q in previous.queues} if previous else {}
        read = []
        for key in (k for k in hot.queues() if hot.cq_files(k.topic, k.queue_id)):
            old = before.get((key.topic, key.queue_id))
            read.append(await reader.queue(hot, key, old, block_offsets))
    queues = tuple(q.printed() for q in read)
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
    ) -> None:
        self._cl, self._digests, self._bucket = cl, digests, bucket
        self._since, self._leaf = since_ms, leaf_offsets
        self.total = 0
        self.read_bytes = 0
        self.carried = 0

    async def queue(
        self, hot: HotStore, key: QueueKey, before: QueuePrint | None, block_offsets: int
    ) -> _ReadQueue:
        """Read (or carry from ``before``) every block of one hot queue."""
        rng = hot.queue_range(key.topic, key.queue_id)
        old_blocks = {b.start: b for b in before.blocks} if before is not None else {}
        blocks: list[_ReadBlock] = []
        found: dict[int, int] = {}
        low = rng.min
        for start, end in block_ranges(rng.min, rng.max, block_offsets):
            try:
                block = await self._block(hot, key, start, end, old_blocks.get(start), found)
            except (OffsetOutOfRangeError, StoreNotFoundError) as exc:
                if blocks:
                    raise StoreError(
                        f"hot queue {key} changed under the fingerprint: {exc}"
                    ) from exc
                low = end  # deleted by the broker's retention while we read
                continue
            blocks.append(block)
        top = max(low, rng.max)
        stored = tuple((t, found.get(t, top)) for t in sorted(set(self._since)))
        return _ReadQueue(key.topic, key.queue_id, low, top, blocks, stored, self._leaf)

    async def _block(
        self,
        hot: HotStore,
        key: QueueKey,
        start: int,
        end: int,
        old: Block | None,
        found: dict[int, int],
    ) -> _ReadBlock:
        """One block: carried forward from ``old`` if :func:`carries` allows, else read
        whole; ``found`` gains the ``stored_from`` offsets found in it."""
        units = hot.read_units(key.topic, key.queue_id, start, end)
        sizes = units["size"].astype(np.int64)
        size = int(sizes.sum()) + CQ_UNIT_SIZE * units.shape[0]
        if old is not None and _searched(old, self._since, found):
            check = carries(old, end, units, self._cl, self._leaf)
            await self._pay(CQ_UNIT_SIZE * units.shape[0] + check.read_bytes)
            if check.unchanged:
                new = (t for t in self._since if t not in found and old.last_store_ms >= t)
                found |= dict.fromkeys(new, start)  # _searched: first >= t
                self.total += size
                self.carried += 1
                return _ReadBlock.carried(old)
        records = self._cl.gather(units["commitlog_offset"].astype(np.int64), sizes)
        first, last = store_times(records, sizes)
        new = (t for t in self._since if t not in found and last >= t)
        found |= {t: start + first_stored_at(records, sizes, t) for t in new}
        digest = self._digests.take(start, units, records)
        self.total += size
        await self._pay(size)
        return _ReadBlock(start, end, digest, first, last)

    async def _pay(self, nbytes: int) -> None:
        self.read_bytes += nbytes
        if self._bucket is not None:
            await self._bucket.acquire(nbytes)


def _searched(old: Block, since_ms: tuple[int, ...], found: dict[int, int]) -> bool:
    """Whether carrying ``old`` leaves no ``stored_from`` time to search inside it: each
    time not found before it is after its last record or at or before its first."""
    return all(t in found or t > old.last_store_ms or t <= old.first_store_ms for t in since_ms)


class _Digests:
    """Block digests taken on a worker thread (hashlib lets go of the GIL) while the
    caller reads the next blocks; at most ``_DIGESTS_QUEUED`` wait, each holding its
    records (a context manager: leaving it waits for them)."""

    def __init__(self, leaf_offsets: int) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="fingerprint-digest")
        self._queued: deque[Future[tuple[str, bytes]]] = deque()
        self._leaf = leaf_offsets

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown()

    def take(self, start: int, units: Units, records: bytearray) -> Future[tuple[str, bytes]]:
        """The digest of one whole block from ``start`` and its leaf digests (its
        ``records`` are zeroed in place)."""
        if len(self._queued) == _DIGESTS_QUEUED:
            self._queued.popleft().result()  # bounds the records held
        sizes = units["size"].astype(np.int64)
        streams = block_streams(units, records)
        self._queued.append(self._pool.submit(_block_digest, start, sizes, self._leaf, *streams))
        return self._queued[-1]


def _block_digest(
    start: int, sizes: npt.NDArray[np.int64], leaf_offsets: int, units: bytes, records: bytearray
) -> tuple[str, bytes]:
    hasher = BlockHasher()
    hasher.feed(units, records)
    ends = np.cumsum(sizes)
    width = UNIT_STREAM_BYTES
    view = memoryview(records)
    leaves = bytearray()
    for lo, hi in block_ranges(start, start + int(sizes.size), leaf_offsets):
        i, j = lo - start, hi - start
        leaf = BlockHasher(LEAF_DIGEST_SIZE)
        first = int(ends[i - 1]) if i else 0
        leaf.feed(units[i * width : j * width], view[first : int(ends[j - 1])])
        leaves += bytes.fromhex(leaf.hexdigest())
    return hasher.hexdigest(), bytes(leaves)


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
