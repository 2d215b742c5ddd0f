"""Hot fingerprints, the stored format: what a broker's hot store held, small enough to
ship to a cluster, and what its digests mean.

``tieredstore fingerprint`` takes one (:func:`tieredstore.verifier.fleet.take.take_fingerprint`, on
each broker host) and creates it under the broker's prefix at
:func:`~tieredstore.cold.layout.fingerprint_key`,
``_fingerprints/s<sequence:010d>-<taken_ms:013d>.json`` (a format-2 one is named
``<taken_ms:013d>.json`` and sorts below every sequenced one); the fleet job
(:mod:`tieredstore.verifier.fleet.job`) reads the newest with :func:`read_fingerprint` and checks
the broker's cold history against it without reading the hot store. docs/format.md
describes the JSON.

Per queue a :class:`Fingerprint` holds the hot ``[min, max)`` when it was taken and one
:class:`Block` per fixed run of ``block_offsets`` queue offsets (block ``k`` covers
``[k * B, (k + 1) * B)`` clipped to ``[min, max)``, :func:`block_ranges`): its digest, the
store times of its first and last record (for the lag rule, whose reference time is
``taken_ms``) and its **leaf** digests (format 3): the block cut the same way into runs of
``leaf_offsets``, each with the same digest in 8 bytes (:class:`Leaf`, the unit the fleet
job compares).

It also holds, per queue and for each ``since_ms`` of the broker's tiering record,
``stored_from[since_ms]``: the first hot offset stored at or after it (``hot_max``: none).
A check against a fingerprint that lacks one of the tiering record's times proves
nothing of it (the fleet job makes that broker INCOMPLETE).

**The block digest** (:class:`BlockHasher`) is defined on what the verifier's content
level compares, so the cluster job computes it from cold records alone::

    digest = xxh3-128( xxh3-128(units) || xxh3-128(records) )
    units   = for each offset: the CQ unit's size (4 bytes) and tagsCode (8 bytes), big-endian
    records = for each offset: the commit-log record, its bytes [28, 36) set to zero

Bytes [28, 36) are the physicalOffset field, the only bytes a cold record may differ in
from its hot original (so the digest compares records outside them, as the content level
does); the unit's commit-log offset is left out for the same reason.
Both streams are fed record by record, so a block that spans two cold segments is
hashed piecewise and gives the same digest. A leaf's digest is the same construction
with ``xxh3-64``. Formats 2 and 3 used ``blake2b-128`` and ``blake2b-64`` in the same
construction (:class:`PrintHash`); they still read, and their leaves are checked with it.
Each digest is the big-endian (canonical) bytes of the XXH3 value.

Its size grows with blocks, not messages: one block is about 80 bytes of JSON, so a
queue of ``n`` offsets costs ``80 * n / block_offsets`` bytes (docs/format.md).
"""

from __future__ import annotations

import base64
import enum
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Protocol

import numpy as np
import xxhash

from tieredstore.errors import CorruptProvenanceError
from tieredstore.formats.consumequeue import Units
from tieredstore.formats.vector import physical_offset_bytes

__all__ = [
    "BLOCK_DIGEST_SIZE",
    "FINGERPRINT_FORMAT_VERSION",
    "LEAF_DIGEST_SIZE",
    "UNIT_STREAM_BYTES",
    "Block",
    "BlockHasher",
    "Fingerprint",
    "Leaf",
    "PrintHash",
    "QueuePrint",
    "block_ranges",
    "block_streams",
    "read_fingerprint",
]

#: 4: the digests are XXH3 (:attr:`PrintHash.XXH3`), not blake2b. 3: a per-broker
#: ``sequence`` and per block its **leaf** digests. 2: ``stored_from`` per queue (format 1
#: had none; it is refused, never read as empty). Formats 2 and 3 still read (blake2b
#: digests); a format-2 fingerprint's blocks are its leaves, and it has no sequence.
FINGERPRINT_FORMAT_VERSION: Final = 4
_READABLE_VERSIONS: Final = (2, 3, 4)
#: Bytes of a block digest (128 bits).
BLOCK_DIGEST_SIZE: Final = 16
#: Bytes of a leaf digest (64 bits), stored back to back in a block's sixth field.
LEAF_DIGEST_SIZE: Final = 8
_UNITS_STREAM: Final = np.dtype([("size", ">i4"), ("tags_code", ">i8")])
#: Bytes per offset of the digest's units stream (size and tagsCode).
UNIT_STREAM_BYTES: Final = _UNITS_STREAM.itemsize


class PrintHash(enum.Enum):
    """The hash function of a fingerprint's digests: XXH3 from format 4, blake2b before."""

    XXH3 = "xxh3"
    BLAKE2B = "blake2b"

    @classmethod
    def of_version(cls, version: int) -> PrintHash:
        """The hash a fingerprint of format ``version`` was taken with."""
        return cls.XXH3 if version >= 4 else cls.BLAKE2B

    def new(self, digest_size: int) -> _Hash:
        """A fresh hasher of ``digest_size`` bytes (XXH3: 8 or 16)."""
        if self is PrintHash.BLAKE2B:
            return hashlib.blake2b(digest_size=digest_size)
        if digest_size == LEAF_DIGEST_SIZE:
            return xxhash.xxh3_64()
        if digest_size == BLOCK_DIGEST_SIZE:
            return xxhash.xxh3_128()
        raise ValueError(f"no XXH3 digest of {digest_size} bytes")


class _Hash(Protocol):
    def update(self, data: bytes | bytearray | memoryview, /) -> None: ...
    def digest(self) -> bytes: ...
    def hexdigest(self) -> str: ...


class BlockHasher:
    """The block digest (module doc), fed one run of consecutive offsets at a time; a
    leaf digest is the same construction in ``digest_size`` 8 bytes. ``algorithm`` is the
    fingerprint's (:meth:`PrintHash.of_version`): XXH3 for what is taken now."""

    def __init__(
        self, digest_size: int = BLOCK_DIGEST_SIZE, algorithm: PrintHash = PrintHash.XXH3
    ) -> None:
        self._size = digest_size
        self._algorithm = algorithm
        self._units = algorithm.new(digest_size)
        self._records = algorithm.new(digest_size)

    def update(self, units: Units, records: bytes | bytearray | memoryview) -> None:
        """Add the offsets of ``units`` whose records are ``records``, back to back. A
        ``bytearray`` is changed in place (its physicalOffset fields zeroed): no copy."""
        self.feed(*block_streams(units, records))

    def feed(self, units: bytes, records: bytes | bytearray | memoryview) -> None:
        """Add one run's two streams as :func:`block_streams` gives them."""
        self._units.update(units)
        self._records.update(records)

    def hexdigest(self) -> str:
        outer = self._algorithm.new(self._size)
        outer.update(self._units.digest() + self._records.digest())
        return outer.hexdigest()


def block_streams(
    units: Units, records: bytes | bytearray | memoryview
) -> tuple[bytes, bytearray | memoryview]:
    """The two streams of the block digest (module doc) for one run of offsets: the units'
    size and tagsCode, and ``records`` with their physicalOffset fields zeroed (in place
    when ``records`` is a ``bytearray`` or a writable ``memoryview``, else in a copy)."""
    head = np.empty(units.shape[0], dtype=_UNITS_STREAM)
    head["size"] = units["size"]
    head["tags_code"] = units["tags_code"]
    buf: bytearray | memoryview
    if isinstance(records, bytearray | memoryview) and not memoryview(records).readonly:
        buf = records
    else:
        buf = bytearray(records)
    arr = np.frombuffer(buf, dtype=np.uint8)
    sizes = units["size"].astype(np.int64)
    starts = np.zeros(sizes.size, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    drop = physical_offset_bytes(starts)
    arr[drop[drop < arr.size]] = 0
    return head.tobytes(), buf


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
    leaf of format 3 or 4, 16 for a format-2 block read as one leaf), taken with
    ``algorithm``."""

    start: int
    end: int
    digest: str
    algorithm: PrintHash = PrintHash.XXH3

    def hasher(self) -> BlockHasher:
        """A hasher whose digest compares with this one's."""
        return BlockHasher(len(self.digest) // 2, self.algorithm)


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

    def leaf_list(self, leaf_offsets: int, algorithm: PrintHash = PrintHash.XXH3) -> list[Leaf]:
        """The block's leaves (itself as one, if it has no leaf digests), whose digests
        were taken with ``algorithm``: one per range of :func:`block_ranges`
        ``(start, end, leaf_offsets)``."""
        if not self.leaves or leaf_offsets <= 0:
            return [Leaf(self.start, self.end, self.digest, algorithm)]
        count = self._leaf_count(leaf_offsets)
        return [self._leaf(i, leaf_offsets, algorithm) for i in range(count)]

    def edge_leaves(self, leaf_offsets: int, algorithm: PrintHash = PrintHash.XXH3) -> list[Leaf]:
        """The first and last of :meth:`leaf_list` (one, if the block has one leaf),
        without building the others (a block of 4,096 offsets has 64 leaves of 64)."""
        if not self.leaves or leaf_offsets <= 0:
            return [Leaf(self.start, self.end, self.digest, algorithm)]
        count = self._leaf_count(leaf_offsets)
        edges = (0,) if count == 1 else (0, count - 1)
        return [self._leaf(i, leaf_offsets, algorithm) for i in edges]

    def _leaf_count(self, leaf_offsets: int) -> int:
        """How many leaves of ``leaf_offsets`` the block has; ValueError when its leaf
        digests are not that many."""
        first = self.start // leaf_offsets
        count = (self.end - 1) // leaf_offsets - first + 1 if self.end > self.start else 0
        if len(self.leaves) != LEAF_DIGEST_SIZE * count:
            raise ValueError(
                f"block [{self.start}, {self.end}) has {len(self.leaves)} bytes of leaf "
                f"digests, {LEAF_DIGEST_SIZE * count} expected"
            )
        return count

    def _leaf(self, i: int, leaf_offsets: int, algorithm: PrintHash) -> Leaf:
        """Leaf ``i``: ``[k * L, (k + 1) * L)`` clipped to the block, as :func:`block_ranges`
        cuts it, with its digest."""
        k = self.start // leaf_offsets + i
        size = LEAF_DIGEST_SIZE
        return Leaf(
            max(self.start, k * leaf_offsets),
            min(self.end, (k + 1) * leaf_offsets),
            self.leaves[i * size : (i + 1) * size].hex(),
            algorithm,
        )


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
    #: The digests' hash (blake2b: read from a format 2 or 3 fingerprint).
    algorithm: PrintHash = PrintHash.XXH3

    def leaves(self) -> list[Leaf]:
        """The units of comparison, in offset order: every block's leaves (format 2:
        the blocks themselves)."""
        return [
            leaf for b in self.blocks for leaf in b.leaf_list(self.leaf_offsets, self.algorithm)
        ]


@dataclass(frozen=True)
class Fingerprint:
    """A broker's hot store at ``taken_ms`` (the broker host's clock): the reference time
    of the lag rule for a check against it. ``sequence`` is its place among the broker's
    fingerprints (its key's; -1: format 2, none), ``leaf_offsets`` the leaf size (0:
    format 2, no leaves), ``format_version`` the format it was read from."""

    cluster: str
    broker: str
    taken_ms: int
    block_offsets: int
    hot_bytes: int
    queues: tuple[QueuePrint, ...]
    sequence: int = -1
    leaf_offsets: int = 0
    #: The format it was read from (what is taken now: :data:`FINGERPRINT_FORMAT_VERSION`).
    format_version: int = FINGERPRINT_FORMAT_VERSION

    def queue(self, topic: str, queue_id: int) -> QueuePrint | None:
        return next((q for q in self.queues if (q.topic, q.queue_id) == (topic, queue_id)), None)

    def to_bytes(self) -> bytes:
        """The stored form (format :data:`FINGERPRINT_FORMAT_VERSION`, for a fingerprint
        taken by this version): compact JSON, blocks as ``[start, end, digest, first, last,
        leaves]``."""
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
    """Parse a stored fingerprint: format 4, 3 (blake2b digests) or 2 (blake2b, no
    sequence, -1; no leaves: its blocks are compared whole, as that format's reader did).

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
        algorithm = PrintHash.of_version(version)
        queues = tuple(
            QueuePrint(
                str(q["topic"]), int(q["queue_id"]), int(q["hot_min"]), int(q["hot_max"]),
                tuple(_block(b, version) for b in q["blocks"]),
                tuple((int(t), int(o)) for t, o in q["stored_from"]),
                leaf_offsets, algorithm,
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
            int(version),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptProvenanceError(f"fingerprint does not read: {exc}", where=key) from exc


def _block(row: list[Any], version: int) -> Block:
    s, e, d, f, la = row[:5]
    leaves = base64.b64decode(str(row[5]), validate=True) if version >= 3 else b""
    return Block(int(s), int(e), str(d), int(f), int(la), leaves)
