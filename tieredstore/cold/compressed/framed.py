"""The one decoder: bytes of a cold object in *uncompressed* coordinates, however stored.

Every reader of COMMIT_LOG data asks for a range of the bytes its commit point describes
(a manifest's sizes, a batch slice's span) and gets exactly those, whether the object is
stored plain or as seekable zstd frames (:mod:`tieredstore.cold.compressed.frames`). How an object
is stored comes from what the caller already read — the manifest or the batch head —
as a :class:`Framed` (``None``: plain), never from the object's first bytes.

A range of a framed object costs one read of its seek table (from the tail; cached per
object: committed objects never change, and a key names one upload attempt) and one read
of the compressed bytes of the frames the range overlaps, which are decoded, joined and
cut. A whole object (:func:`read_whole`) is read whole and decoded whole.

Damage in a framed object (a flipped byte, a cut object, a bad seek table) is
:class:`~tieredstore.errors.CorruptFrameError`, a kind of
:class:`~tieredstore.errors.DigestMismatchError`: the finding a flipped byte in a plain
object gives, since digests cover the uncompressed bytes. A few flipped bytes decode to
the very same payload (bits zstd never reads: about 3-5 % of single-byte flips), so a
whole object is also checked against the CRC-32C of its *stored* bytes its commit point
records (:attr:`Framed.stored_digest`, :func:`check_stored`) before it is decoded. A
range read cannot check it (it reads a part of the object): such damage is found by the
readers of whole objects, the nightly verifier's among them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from tieredstore.cold.compressed.frames import (
    FrameIndex,
    FrameSettings,
    decode,
    decode_whole,
    encode,
    seek_table_length,
    tail_length,
)
from tieredstore.cold.digests import DigestAlgorithm, digest
from tieredstore.errors import CorruptFrameError

if TYPE_CHECKING:
    from tieredstore.backends.base import Backend

__all__ = [
    "STORED_DIGEST",
    "Framed",
    "check_stored",
    "decode_stored",
    "encode_framed",
    "index_reads",
    "range_reads",
    "read_range",
    "read_range_with",
    "read_whole",
]

#: The algorithm of :attr:`Framed.stored_digest` (whatever the commit point's own).
STORED_DIGEST: Final = DigestAlgorithm.CRC32C

#: Seek tables kept (a 64 MiB segment in 1 MiB frames: about 600 bytes each).
_CACHED_INDEXES: Final = 4096
#: Frames whose seek table the first tail read covers (larger tables: a second read).
_TAIL_FRAMES: Final = 256


@dataclass(frozen=True, slots=True)
class Framed:
    """An object stored as seekable zstd frames, ``stored_size`` bytes in all (the seek
    table included); its commit point records the uncompressed size and digest.

    ``stored_digest``: the CRC-32C (:data:`STORED_DIGEST`, 8 lowercase hex digits) of the
    stored frames (bytes ``[at, stored_size)``), checked by every whole-object read
    (:func:`check_stored`); ``None`` where the commit point records none (then only
    decoding and the uncompressed digest check the object). A manifest (format 3) and a
    compressed batch (format 2) always record one.

    ``at``: where the frames begin. Bytes ``[0, at)`` are stored plain and are the same
    in both coordinates (a compressed batch's header, :mod:`tieredstore.cold.batch`); the
    frames ``[at, stored_size)`` decode to uncompressed bytes ``[at, ...)``. A segment's
    COMMIT_LOG object is frames throughout (``at = 0``)."""

    stored_size: int
    stored_digest: str | None = None
    at: int = 0

    def __post_init__(self) -> None:
        # a negative stored size is the commit point's to refuse (it names the field)
        if self.at < 0 or 0 <= self.stored_size < self.at:
            raise ValueError(f"frames at {self.at} of a {self.stored_size}-byte object")


_indexes: OrderedDict[tuple[str, str, int], FrameIndex] = OrderedDict()


def range_reads(
    store: str, key: str, start: int, end: int, framed: Framed
) -> Generator[tuple[int, int], bytes, bytes]:
    """The reads of uncompressed bytes ``[start, end)`` of the framed object at ``key``,
    without I/O: each step yields a range ``(a, b)`` of the object's stored bytes and is
    sent those bytes; it returns the range's bytes. Each reader drives it over its own I/O
    (:func:`read_range` on a backend, :func:`read_range_with` on a blocking fetch), as
    :func:`~tieredstore.cold.batch.head_reads` is driven, so both read alike: the seek
    table from the tail unless cached (by ``store``, ``key`` and stored size; a second
    read when the table is longer than the first covers), then the frames the range
    overlaps, in one read. Bytes before ``framed.at`` (plain) are not served here: the
    range must begin at or after it.

    Raises:
        ValueError: ``start`` before ``framed.at`` or after ``end``.
        CorruptFrameError: no valid seek table; fewer than ``end`` bytes; a frame that
            does not decode (a short read included).
    """
    base = framed.at
    if not base <= start <= end:
        raise ValueError(f"[{start}, {end}) of {key} is not a range after its frames at {base}")
    index = yield from index_reads(store, key, framed)
    first, last = _frames(index, key, start - base, end - base)
    if first == last:
        return b""
    stored = yield (base + int(index.at[first]), base + int(index.at[last]))
    return _cut(index, first, last, stored, key, start - base, end - base)


def index_reads(
    store: str, key: str, framed: Framed
) -> Generator[tuple[int, int], bytes, FrameIndex]:
    """The reads of the seek table of the framed object at ``key``, driven as
    :func:`range_reads` (none when cached; a second when the table is longer than the
    first read covers); it returns the object's :class:`FrameIndex`, whose frame offsets
    are relative to ``framed.at``.

    Raises:
        CorruptFrameError: no valid seek table.
    """
    base = framed.at
    cache_key = (store, key, framed.stored_size)
    index = _cached(cache_key)
    if index is None:
        size = framed.stored_size - base  # the frames and their seek table
        tail = yield (base + max(0, size - tail_length(_TAIL_FRAMES)), base + size)
        table = seek_table_length(tail)
        if len(tail) < table <= size:
            tail = yield (base + size - table, base + size)
        index = _keep(cache_key, FrameIndex.parse(tail, size, where=key))
    return index


async def read_range(
    backend: Backend, key: str, start: int, end: int, framed: Framed | None
) -> bytes:
    """Uncompressed bytes ``[start, end)`` of the object at ``key``; ``framed`` says how it
    is stored (``None``: plain, a range read as asked).

    Raises:
        ValueError: ``start`` negative or after ``end``.
        CorruptFrameError: a framed object that does not decode or holds fewer than
            ``end`` bytes.
        BackendError / ObjectNotFoundError: as ``backend.read_exact``.
    """
    if framed is None:
        return await backend.read_exact(key, start, end)
    reads = range_reads(backend.url, key, start, end, framed)
    try:
        a, b = next(reads)
        while True:
            a, b = reads.send(await backend.read_exact(key, a, b))
    except StopIteration as done:
        data: bytes = done.value
        return data


def read_range_with(
    fetch: Callable[[int, int], bytes],
    key: str,
    start: int,
    end: int,
    framed: Framed | None,
    *,
    store: str,
) -> bytes:
    """:func:`read_range` for blocking readers (the Spark executors' fsspec reads):
    ``fetch(a, b)`` returns stored bytes ``[a, b)`` of the object at ``key``, exactly
    (shorter only at the object's end). Seek tables are cached by ``store`` (the cold
    store's URL or root: one executor may read several stores, whose objects can share a
    key and a stored size), ``key`` and stored size.

    Raises:
        CorruptFrameError: as :func:`read_range`; also a fetch that came back short.
    """
    if framed is None:
        return fetch(start, end)
    reads = range_reads(store, key, start, end, framed)
    try:
        a, b = next(reads)
        while True:
            a, b = reads.send(fetch(a, b))
    except StopIteration as done:
        data: bytes = done.value
        return data


def _cached(cache_key: tuple[str, str, int]) -> FrameIndex | None:
    index = _indexes.get(cache_key)
    if index is not None:
        _indexes.move_to_end(cache_key)
    return index


def _keep(cache_key: tuple[str, str, int], index: FrameIndex) -> FrameIndex:
    _indexes[cache_key] = index
    if len(_indexes) > _CACHED_INDEXES:
        _indexes.popitem(last=False)
    return index


def _frames(index: FrameIndex, key: str, start: int, end: int) -> tuple[int, int]:
    if end > index.size:
        raise CorruptFrameError(
            f"holds {index.size} bytes decoded, the range read ends at {end}", where=key
        )
    return index.frames(start, end)


def _cut(
    index: FrameIndex, first: int, last: int, stored: bytes, key: str, start: int, end: int
) -> bytes:
    """Frames ``[first, last)`` decoded from ``stored``, cut to ``[start, end)``."""
    data = decode(index, first, last, stored, where=key)
    base = int(index.starts[first])
    if start == base and end - base == len(data):
        return data
    return bytes(memoryview(data)[start - base : end - base])


def encode_framed(data: bytes | memoryview, settings: FrameSettings) -> tuple[bytes, Framed]:
    """``data`` encoded as :func:`~tieredstore.cold.compressed.frames.encode` does, with
    its :class:`Framed` (stored size and digest, of the bytes in hand: nothing read back).
    Blocking: run it in a thread."""
    stored = encode(data, settings)
    return stored, Framed(len(stored), digest(stored, STORED_DIGEST))


def check_stored(stored: bytes | memoryview, framed: Framed, *, where: str) -> None:
    """Check ``stored`` (every stored byte of a framed object) against
    ``framed.stored_digest``, the digest of its frames (``stored[framed.at:]``); nothing
    to check when it is ``None``. An object of another length than ``framed.stored_size``
    is not checked here: it is cut or longer, which a size check or decoding reports as
    such.

    Raises:
        CorruptFrameError: the stored bytes' CRC-32C differs (naming both digests).
    """
    expected = framed.stored_digest
    if expected is None or memoryview(stored).nbytes != framed.stored_size:
        return
    actual = digest(memoryview(stored)[framed.at :], STORED_DIGEST)
    if actual != expected:
        raise CorruptFrameError(
            f"stored digest is {actual}, its commit point says {expected}", where=where
        )


async def read_whole(backend: Backend, key: str, framed: Framed | None) -> bytes:
    """The whole object at ``key``, decoded: its length is what it holds, so a size check
    against the commit point still sees an object longer or shorter than recorded. A
    framed object's stored bytes are checked against its stored digest first
    (:func:`check_stored`).

    Raises:
        CorruptFrameError: a framed object whose stored digest differs, or that does not
            decode (a cut one included).
    """
    data = await backend.read(key)
    return data if framed is None else decode_stored(data, framed, where=key)


def decode_stored(data: bytes, framed: Framed, *, where: str) -> bytes:
    """A whole stored object ``data`` decoded: its stored digest checked
    (:func:`check_stored`), its plain bytes before ``framed.at`` as they are, then its
    frames decoded.

    Raises:
        CorruptFrameError: the stored digest differs, or the frames do not decode (a cut
            object included).
    """
    check_stored(data, framed, where=where)
    if not framed.at:
        return decode_whole(data, where=where)
    if len(data) < framed.at:
        raise CorruptFrameError(
            f"{len(data)} bytes, cut before its frames at {framed.at}", where=where
        )
    return data[: framed.at] + decode_whole(memoryview(data)[framed.at :], where=where)
