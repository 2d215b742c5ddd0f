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
object gives, since digests cover the uncompressed bytes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from tieredstore.cold.compressed.frames import (
    FrameIndex,
    decode,
    decode_whole,
    seek_table_length,
    tail_length,
)
from tieredstore.errors import CorruptFrameError

if TYPE_CHECKING:
    from tieredstore.backends.base import Backend

__all__ = ["Framed", "decode_stored", "range_reads", "read_range", "read_range_with", "read_whole"]

#: Seek tables kept (a 64 MiB segment in 1 MiB frames: about 600 bytes each).
_CACHED_INDEXES: Final = 4096
#: Frames whose seek table the first tail read covers (larger tables: a second read).
_TAIL_FRAMES: Final = 256


@dataclass(frozen=True, slots=True)
class Framed:
    """An object stored as seekable zstd frames, ``stored_size`` bytes in all (the seek
    table included); its commit point records the uncompressed size and digest.

    ``at``: where the frames begin. Bytes ``[0, at)`` are stored plain and are the same
    in both coordinates (a compressed batch's header, :mod:`tieredstore.cold.batch`); the
    frames ``[at, stored_size)`` decode to uncompressed bytes ``[at, ...)``. A segment's
    COMMIT_LOG object is frames throughout (``at = 0``)."""

    stored_size: int
    at: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.at <= self.stored_size:
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
    cache_key = (store, key, framed.stored_size)
    index = _cached(cache_key)
    if index is None:
        size = framed.stored_size - base  # the frames and their seek table
        tail = yield (base + max(0, size - tail_length(_TAIL_FRAMES)), base + size)
        table = seek_table_length(tail)
        if len(tail) < table <= size:
            tail = yield (base + size - table, base + size)
        index = _keep(cache_key, FrameIndex.parse(tail, size, where=key))
    first, last = _frames(index, key, start - base, end - base)
    if first == last:
        return b""
    stored = yield (base + int(index.at[first]), base + int(index.at[last]))
    return _cut(index, first, last, stored, key, start - base, end - base)


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
    fetch: Callable[[int, int], bytes], key: str, start: int, end: int, framed: Framed | None
) -> bytes:
    """:func:`read_range` for blocking readers (the Spark executors' fsspec reads):
    ``fetch(a, b)`` returns stored bytes ``[a, b)`` of the object at ``key``, exactly
    (shorter only at the object's end). Seek tables are cached by ``key`` and stored size.

    Raises:
        CorruptFrameError: as :func:`read_range`; also a fetch that came back short.
    """
    if framed is None:
        return fetch(start, end)
    reads = range_reads("", key, start, end, framed)
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


async def read_whole(backend: Backend, key: str, framed: Framed | None) -> bytes:
    """The whole object at ``key``, decoded: its length is what it holds, so a size check
    against the commit point still sees an object longer or shorter than recorded.

    Raises:
        CorruptFrameError: a framed object that does not decode (a cut one included).
    """
    data = await backend.read(key)
    return data if framed is None else decode_stored(data, framed, where=key)


def decode_stored(data: bytes, framed: Framed, *, where: str) -> bytes:
    """A whole stored object ``data`` decoded: its plain bytes before ``framed.at`` as
    they are, then its frames decoded.

    Raises:
        CorruptFrameError: the frames do not decode (a cut object included).
    """
    if not framed.at:
        return decode_whole(data, where=where)
    if len(data) < framed.at:
        raise CorruptFrameError(
            f"{len(data)} bytes, cut before its frames at {framed.at}", where=where
        )
    return data[: framed.at] + decode_whole(memoryview(data)[framed.at :], where=where)
