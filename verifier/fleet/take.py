"""Hot fingerprints: what a broker's hot store holds, small enough to ship to a cluster.

``tieredstore fingerprint`` runs on each broker host (no Spark, no JVM) and writes one
:class:`Fingerprint` into the cold store under the broker's prefix
(``_fingerprints/<taken_ms>.json``, create-if-absent). The fleet job
(:mod:`verifier.fleet.job`) then checks each broker's cold history against its newest
fingerprint without reading the hot store.

Per queue the fingerprint holds the hot ``[min, max)`` when it was taken and one
:class:`Block` per fixed run of ``block_offsets`` queue offsets (block ``k`` covers
``[k * B, (k + 1) * B)`` clipped to ``[min, max)``): its digest, and the store times of
its first and last record (the lag rule: a block holding a record younger than the
allowance may be untiered). The reference time of the lag rule is ``taken_ms``.

It also holds, per queue and for each ``since_ms`` of the broker's tiering record (read
from cold when the fingerprint is taken), ``stored_from[since_ms]``: the first hot
offset stored at or after it (``hot_max``: none), found in the hot records read for the
blocks — what :class:`verifier.scope.HotFacts` needs to decide, per message time, which
messages were stored while a rule tiered their topic. A check against a fingerprint
that lacks one of the tiering record's times proves nothing of it (the fleet job makes
that broker INCOMPLETE).

**The block digest** (:class:`BlockHasher`) is defined on what the verifier's content
level compares, so the cluster job computes it from cold records alone::

    digest = blake2b-128( blake2b-128(units) || blake2b-128(records) )
    units   = for each offset: the CQ unit's size (4 bytes) and tagsCode (8 bytes), big-endian
    records = for each offset: the commit-log record, its bytes [28, 36) set to zero

Bytes [28, 36) are the physicalOffset field, the only bytes a cold record may differ in
from its hot original (so the digest compares records outside them, as the content level
does); the unit's commit-log offset is left out for the same reason.
Both streams are fed record by record, so a block that spans two cold segments is
hashed piecewise and gives the same digest.

Its size grows with blocks, not messages: one block is about 80 bytes of JSON, so a
queue of ``n`` offsets costs ``80 * n / block_offsets`` bytes (docs/format.md).
Memory is bounded by three blocks' records: the one being read and the two before it,
whose digests a worker thread takes meanwhile (hashlib lets go of the GIL).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, Self

import numpy as np
import numpy.typing as npt

from tieredstore.clock import Clock
from tieredstore.errors import (
    CorruptProvenanceError,
    OffsetOutOfRangeError,
    StoreError,
    StoreNotFoundError,
)
from tieredstore.formats.consumequeue import Units
from tieredstore.formats.record import STORE_TIMESTAMP_AT_V4, STORE_TIMESTAMP_AT_V6, SysFlag
from tieredstore.formats.record import SYS_FLAG_AT as _SYS_FLAG_AT
from tieredstore.formats.vector import physical_offset_bytes
from tieredstore.hot.commitlog import HotCommitlog
from tieredstore.hot.store import HotStore
from tieredstore.ratelimit import TokenBucket
from verifier.vocabulary import LagAllowance, LagUnit

__all__ = [
    "DEFAULT_BLOCK_OFFSETS",
    "DEFAULT_LEAF_OFFSETS",
    "FINGERPRINT_FORMAT_VERSION",
    "Block",
    "BlockHasher",
    "Fingerprint",
    "Leaf",
    "QueuePrint",
    "block_ranges",
    "read_fingerprint",
    "take_fingerprint",
]

#: 3: a per-broker ``sequence`` and per block its **leaf** digests. 2: ``stored_from`` per
#: queue (format 1 had none; it is refused, never read as empty). A format-2 fingerprint
#: still reads: its blocks are its leaves, and it has no sequence.
FINGERPRINT_FORMAT_VERSION: Final = 3
_READABLE_VERSIONS: Final = (2, 3)
#: Queue offsets per block: 256 blocks per million messages.
DEFAULT_BLOCK_OFFSETS: Final = 4096
#: Queue offsets per leaf: the unit of comparison (8 bytes of digest per leaf).
DEFAULT_LEAF_OFFSETS: Final = 64
_DIGEST_SIZE: Final = 16
_LEAF_DIGEST_SIZE: Final = 8
#: Blocks whose digest is being taken while the next is read (each holds its records).
_DIGESTS_QUEUED: Final = 2
_UNIT_HEAD: Final = np.dtype([("size", ">i4"), ("tags_code", ">i8")])


class BlockHasher:
    """The block digest (module doc), fed one run of consecutive offsets at a time; a
    leaf digest is the same construction in ``digest_size`` 8 bytes."""

    def __init__(self, digest_size: int = _DIGEST_SIZE) -> None:
        self._size = digest_size
        self._units = hashlib.blake2b(digest_size=digest_size)
        self._records = hashlib.blake2b(digest_size=digest_size)

    def update(self, units: Units, records: bytes | bytearray | memoryview) -> None:
        """Add the offsets of ``units`` whose records are ``records``, back to back. A
        ``bytearray`` is changed in place (its physicalOffset fields zeroed): no copy."""
        self.feed(*block_streams(units, records))

    def feed(self, units: bytes, records: bytes | bytearray | memoryview) -> None:
        """Add one run's two streams as :func:`block_streams` gives them."""
        self._units.update(units)
        self._records.update(records)

    def hexdigest(self) -> str:
        outer = hashlib.blake2b(digest_size=self._size)
        outer.update(self._units.digest() + self._records.digest())
        return outer.hexdigest()


def block_streams(units: Units, records: bytes | bytearray | memoryview) -> tuple[bytes, bytearray]:
    """The two streams of the block digest (module doc) for one run of offsets: the units'
    size and tagsCode, and ``records`` with their physicalOffset fields zeroed (in place
    when ``records`` is a ``bytearray``, else in a copy)."""
    head = np.empty(units.shape[0], dtype=_UNIT_HEAD)
    head["size"] = units["size"]
    head["tags_code"] = units["tags_code"]
    buf = records if isinstance(records, bytearray) else bytearray(records)
    arr = np.frombuffer(buf, dtype=np.uint8)
    sizes = units["size"].astype(np.int64)
    starts = np.zeros(sizes.size, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    drop = physical_offset_bytes(starts)
    arr[drop[drop < arr.size]] = 0
    return head.tobytes(), buf


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


def block_ranges(lo: int, hi: int, block_offsets: int) -> Iterator[tuple[int, int]]:
    """The blocks of ``[lo, hi)``: ``[k * B, (k + 1) * B)`` clipped to it, in order."""
    start = lo
    while start < hi:
        end = min(hi, (start // block_offsets + 1) * block_offsets)
        yield start, end
        start = end


@dataclass(frozen=True, slots=True)
class Leaf:
    """One unit of comparison: ``[start, end)`` and its digest (hex: 8 bytes for a
    leaf of format 3, 16 for a format-2 block read as one leaf)."""

    start: int
    end: int
    digest: str

    def hasher(self) -> BlockHasher:
        """A hasher whose digest compares with this one's."""
        return BlockHasher(len(self.digest) // 2)


@dataclass(frozen=True, slots=True)
class Block:
    """One block of a queue: ``[start, end)``, its digest and first/last store times,
    and its leaf digests back to back (8 bytes each, format 3; empty in format 2): one per
    leaf of :func:`block_ranges` ``(start, end, leaf_offsets)``."""

    start: int
    end: int
    digest: str
    first_store_ms: int
    last_store_ms: int
    leaves: bytes = b""

    def leaf_list(self, leaf_offsets: int) -> list[Leaf]:
        """The block's leaves (itself as one, if it has no leaf digests)."""
        if not self.leaves or leaf_offsets <= 0:
            return [Leaf(self.start, self.end, self.digest)]
        size = _LEAF_DIGEST_SIZE
        ranges = list(block_ranges(self.start, self.end, leaf_offsets))
        if len(self.leaves) != size * len(ranges):
            raise ValueError(
                f"block [{self.start}, {self.end}) has {len(self.leaves)} bytes of leaf "
                f"digests, {size * len(ranges)} expected"
            )
        return [
            Leaf(s, e, self.leaves[i * size : (i + 1) * size].hex())
            for i, (s, e) in enumerate(ranges)
        ]


@dataclass(frozen=True, slots=True)
class QueuePrint:
    """One hot queue as the fingerprint saw it; ``stored_from`` pairs each tiering-record
    time ``since_ms`` with the first offset stored at or after it (``hot_max``: none)."""

    topic: str
    queue_id: int
    hot_min: int
    hot_max: int
    blocks: tuple[Block, ...]
    stored_from: tuple[tuple[int, int], ...] = ()
    #: Offsets per leaf (0: the blocks are the leaves, format 2).
    leaf_offsets: int = 0

    def leaves(self) -> list[Leaf]:
        """The units of comparison, in offset order: every block's leaves (format 2:
        the blocks themselves)."""
        return [leaf for b in self.blocks for leaf in b.leaf_list(self.leaf_offsets)]

    def lag_cutoff(self, allowance: LagAllowance, reference_ms: int) -> int:
        """The first offset allowed to be untiered (the verifier's lag rule, at block
        granularity for an allowance in seconds: a block holding any record younger
        than ``reference_ms - allowance`` may be untiered whole)."""
        if allowance.unit is LagUnit.MESSAGES:
            return max(self.hot_min, self.hot_max - int(allowance.value))
        oldest_allowed = reference_ms - int(allowance.value * 1000)
        young = (b.start for b in self.blocks if b.last_store_ms >= oldest_allowed)
        return next(young, self.hot_max)


@dataclass(frozen=True)
class Fingerprint:
    """A broker's hot store at ``taken_ms`` (the broker host's clock): the reference time
    of the lag rule for a check against it. ``sequence`` is its place among the broker's
    fingerprints (its key's; -1: format 2, none), ``leaf_offsets`` the leaf size (0:
    format 2, no leaves)."""

    cluster: str
    broker: str
    taken_ms: int
    block_offsets: int
    hot_bytes: int
    queues: tuple[QueuePrint, ...]
    sequence: int = -1
    leaf_offsets: int = 0

    def queue(self, topic: str, queue_id: int) -> QueuePrint | None:
        return next((q for q in self.queues if (q.topic, q.queue_id) == (topic, queue_id)), None)

    def to_bytes(self) -> bytes:
        """The stored form: compact JSON, blocks as ``[start, end, digest, first, last]``."""
        doc = {
            "format_version": FINGERPRINT_FORMAT_VERSION,
            "cluster": self.cluster,
            "broker": self.broker,
            "sequence": self.sequence,
            "taken_ms": self.taken_ms,
            "block_offsets": self.block_offsets,
            "leaf_offsets": self.leaf_offsets,
            "hot_bytes": self.hot_bytes,
            "queues": [
                {
                    "topic": q.topic,
                    "queue_id": q.queue_id,
                    "hot_min": q.hot_min,
                    "hot_max": q.hot_max,
                    "blocks": [
                        [
                            b.start,
                            b.end,
                            b.digest,
                            b.first_store_ms,
                            b.last_store_ms,
                            base64.b64encode(b.leaves).decode(),
                        ]
                        for b in q.blocks
                    ],
                    "stored_from": [[since, offset] for since, offset in q.stored_from],
                }
                for q in self.queues
            ],
        }
        return json.dumps(doc, separators=(",", ":")).encode()


def read_fingerprint(data: bytes, key: str) -> Fingerprint:
    """Parse a stored fingerprint: format 3, or format 2 (no sequence, -1; no leaves: its
    blocks are compared whole, as that format's reader did).

    Raises:
        CorruptProvenanceError: not a fingerprint of a format this version reads, or
            leaf digests that do not fit their blocks (naming ``key``).
    """
    try:
        doc: dict[str, Any] = json.loads(data)
        version = doc["format_version"]
        if version not in _READABLE_VERSIONS:
            raise CorruptProvenanceError(
                f"fingerprint format {version} is not one this version reads", where=key
            )
        leaf_offsets = int(doc["leaf_offsets"]) if version >= 3 else 0
        queues = tuple(
            QueuePrint(
                str(q["topic"]), int(q["queue_id"]), int(q["hot_min"]), int(q["hot_max"]),
                tuple(_block(b, version) for b in q["blocks"]),
                tuple((int(t), int(o)) for t, o in q["stored_from"]),
                leaf_offsets,
            )
            for q in doc["queues"]
        )  # fmt: skip
        for q in queues:
            q.leaves()  # leaf digests that do not fit their blocks raise ValueError
        return Fingerprint(
            str(doc["cluster"]),
            str(doc["broker"]),
            int(doc["taken_ms"]),
            int(doc["block_offsets"]),
            int(doc["hot_bytes"]),
            queues,
            int(doc["sequence"]) if version >= 3 else -1,
            leaf_offsets,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptProvenanceError(f"fingerprint does not read: {exc}", where=key) from exc


def _block(row: list[Any], version: int) -> Block:
    s, e, d, f, la = row[:5]
    leaves = base64.b64decode(str(row[5]), validate=True) if version >= 3 else b""
    return Block(int(s), int(e), str(d), int(f), int(la), leaves)


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
    if block_offsets <= 0 or leaf_offsets <= 0:
        raise ValueError(f"block and leaf offsets must be > 0, got {block_offsets}, {leaf_offsets}")
    taken = clock.now_ms()
    read: list[_ReadQueue] = []
    total = 0
    with HotCommitlog(hot.commitlog_files()) as cl, _Digests(leaf_offsets) as digests:
        for key in (k for k in hot.queues() if hot.cq_files(k.topic, k.queue_id)):
            rng = hot.queue_range(key.topic, key.queue_id)
            blocks: list[_ReadBlock] = []
            found: dict[int, int] = {}
            low = rng.min
            for start, end in block_ranges(rng.min, rng.max, block_offsets):
                try:
                    units = hot.read_units(key.topic, key.queue_id, start, end)
                    sizes = units["size"].astype(np.int64)
                    records = cl.gather(units["commitlog_offset"].astype(np.int64), sizes)
                except (OffsetOutOfRangeError, StoreNotFoundError) as exc:
                    if blocks:
                        raise StoreError(
                            f"hot queue {key} changed under the fingerprint: {exc}"
                        ) from exc
                    low = end  # deleted by the broker's retention while we read
                    continue
                first, last = store_times(records, sizes)
                new = (t for t in since_ms if t not in found and last >= t)
                found |= {t: start + first_stored_at(records, sizes, t) for t in new}
                taken_digests = digests.take(start, units, records)
                blocks.append(_ReadBlock(start, end, taken_digests, first, last))
                size = len(records) + 20 * units.shape[0]
                total += size
                if bucket is not None:
                    await bucket.acquire(size)
            top = max(low, rng.max)
            stored = tuple((t, found.get(t, top)) for t in sorted(set(since_ms)))
            read.append(_ReadQueue(key.topic, key.queue_id, low, top, blocks, stored, leaf_offsets))
    queues = tuple(q.printed() for q in read)
    return Fingerprint(cluster, broker, taken, block_offsets, total, queues, sequence, leaf_offsets)


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
    width = _UNIT_HEAD.itemsize
    view = memoryview(records)
    leaves = bytearray()
    for lo, hi in block_ranges(start, start + int(sizes.size), leaf_offsets):
        i, j = lo - start, hi - start
        leaf = BlockHasher(_LEAF_DIGEST_SIZE)
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
