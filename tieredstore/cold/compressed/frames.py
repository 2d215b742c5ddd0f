"""Seekable compressed objects: a payload as independently decodable zstd frames.

A compressed cold object is the zstd **seekable format** (facebook/zstd
``contrib/seekable_format``), so ``zstd -d`` decompresses one whole and a reader can
decode any range of it alone:

* the payload cut into frames of ``frame_bytes`` uncompressed bytes (the last one
  shorter), each a normal zstd frame with its content size and its content checksum
  (XXH64, checked by zstd on decoding: a flipped byte fails that frame);
* then the **seek table**, a zstd skippable frame (magic ``0x184D2A5E``, which
  ``zstd -d`` skips): one entry per frame, its compressed size then its decompressed
  size (little-endian ``uint32`` each; no per-entry checksum), and a 9-byte footer:
  the number of frames (``uint32``), the descriptor byte (``0``: no entry checksums)
  and the seekable magic ``0x8F92EAB1``.

:func:`encode` builds one; :meth:`FrameIndex.parse` reads the seek table back from the
object's tail (:func:`tail_length` says how many bytes of it to read); :meth:`FrameIndex.frames`
says which compressed bytes a range ``[start, end)`` in *uncompressed* coordinates needs and
:func:`decode` decodes them. An empty payload is an object of no frames (a seek table
alone). Everything here is pure Python over ``zstandard`` and numpy, one Python step
per frame (never per record); I/O is :mod:`tieredstore.cold.compressed.framed`'s.

Damage is :class:`~tieredstore.errors.CorruptFrameError` (a kind of
:class:`~tieredstore.errors.DigestMismatchError`: a flipped byte in a compressed object
is the same finding as a flipped byte in a plain one), never a zstd exception.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import zstandard

from tieredstore.cold.digests import DigestAlgorithm, hasher
from tieredstore.errors import CorruptFrameError
from tieredstore.mapped import mapped_view

__all__ = [
    "FAST_HASH_LOG",
    "FOOTER_BYTES",
    "MAX_FRAME_BYTES",
    "Compression",
    "FrameIndex",
    "FrameSettings",
    "decode",
    "decode_whole",
    "encode",
    "encode_file",
    "seek_table_length",
    "stored_bound",
    "tail_length",
]

#: A frame's uncompressed size must fit the seek table's ``uint32`` (with room for zstd's
#: worst-case expansion of its compressed size).
MAX_FRAME_BYTES: Final = 1 << 30
FOOTER_BYTES: Final = 9
SEEKABLE_MAGIC: Final = 0x8F92EAB1
SKIPPABLE_MAGIC: Final = 0x184D2A5E
_SKIPPABLE_HEADER: Final = 8
_ENTRY: Final = np.dtype("<u4")
_FOOTER: Final = struct.Struct("<IBI")
_HEADER: Final = struct.Struct("<II")
#: The hash table of zstd's levels 1 and below (its fast strategy), as log2 of its entries:
#: 4,096 entries (16 KiB) stay in a core's first-level cache, where level 1's own 16,384
#: do not. Measured on 1 MiB frames of three synthesized stores (BENCHMARKS.md,
#: "A smaller hash table for zstd's fast levels"): 9-11 % less CPU per frame, stored
#: sizes within 1.5 % (smaller on JSON bodies).
FAST_HASH_LOG: Final = 12


class Compression(enum.Enum):
    """How new commit-log data is stored (``cold.compression``)."""

    NONE = "none"
    ZSTD = "zstd"


@dataclass(frozen=True, slots=True)
class FrameSettings:
    """How a writer compresses: frames of ``frame_bytes`` uncompressed bytes at zstd
    ``level`` (``cold.frame_size``, ``cold.compression_level``: their defaults are
    declared there)."""

    frame_bytes: int
    level: int

    def __post_init__(self) -> None:
        if not 1 <= self.frame_bytes <= MAX_FRAME_BYTES:
            raise ValueError(f"frame_bytes {self.frame_bytes} is not in [1, {MAX_FRAME_BYTES}]")

    def compressor(self) -> zstandard.ZstdCompressor:
        """A compressor for this level's frames, each with its content size and checksum.
        At levels 1 and below, zstd's parameters for a source of ``frame_bytes`` with a
        hash table of at most :data:`FAST_HASH_LOG`; at higher levels zstd's own choice
        for each frame, as ``zstd`` at that level writes it."""
        if self.level > 1:
            return zstandard.ZstdCompressor(
                level=self.level, write_checksum=True, write_content_size=True
            )
        params = zstandard.ZstdCompressionParameters.from_level(
            self.level, source_size=self.frame_bytes
        )
        return zstandard.ZstdCompressor(
            compression_params=zstandard.ZstdCompressionParameters.from_level(
                self.level,
                source_size=self.frame_bytes,
                hash_log=min(params.hash_log, FAST_HASH_LOG),
                write_checksum=1,
                write_content_size=1,
            )
        )


@dataclass(frozen=True, slots=True, eq=False)
class FrameIndex:
    """Where each frame of a seekable object is: ``starts[i]`` is frame ``i``'s first
    uncompressed byte, ``at[i]`` its first stored byte; both have one more entry than
    there are frames (the ends: :attr:`size` and the seek table's first byte)."""

    starts: npt.NDArray[np.int64]
    at: npt.NDArray[np.int64]
    #: The whole object's stored size, seek table included.
    stored_size: int

    @property
    def count(self) -> int:
        return len(self.starts) - 1

    @property
    def size(self) -> int:
        """The decompressed payload's size."""
        return int(self.starts[-1])

    @classmethod
    def parse(cls, tail: bytes | memoryview, stored_size: int, *, where: str) -> FrameIndex:
        """The index of an object of ``stored_size`` bytes whose last ``len(tail)`` bytes
        are ``tail`` (at least :func:`tail_length` of them; more is fine).

        Raises:
            CorruptFrameError: no seekable footer, a seek table that does not fit the
                object, or frames that do not tile it.
        """
        view = memoryview(tail).cast("B")
        if view.nbytes < FOOTER_BYTES:
            raise CorruptFrameError("too short for a seekable zstd footer", where=where)
        count, descriptor, magic = _FOOTER.unpack(view[-FOOTER_BYTES:])
        if magic != SEEKABLE_MAGIC or descriptor & 0x7F:
            raise CorruptFrameError("no seekable zstd footer", where=where)
        width = 12 if descriptor & 0x80 else 8
        table = _SKIPPABLE_HEADER + count * width + FOOTER_BYTES
        if table > min(view.nbytes, stored_size):
            raise CorruptFrameError(
                f"a seek table of {count} frames does not fit {min(view.nbytes, stored_size)} "
                "bytes",
                where=where,
            )
        magic, length = _HEADER.unpack(view[-table : -table + _SKIPPABLE_HEADER])
        if magic != SKIPPABLE_MAGIC or length != table - _SKIPPABLE_HEADER:
            raise CorruptFrameError("the seek table's skippable frame header is wrong", where=where)
        entries = np.frombuffer(view[-table + _SKIPPABLE_HEADER : -FOOTER_BYTES], dtype=_ENTRY)
        entries = entries.reshape(count, width // 4).astype(np.int64)
        at = np.zeros(count + 1, dtype=np.int64)
        starts = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(entries[:, 0], out=at[1:])
        np.cumsum(entries[:, 1], out=starts[1:])
        if int(at[-1]) + table != stored_size:
            raise CorruptFrameError(
                f"frames of {int(at[-1])} bytes and a seek table of {table} do not make "
                f"{stored_size} bytes",
                where=where,
            )
        return cls(starts, at, stored_size)

    def frames(self, start: int, end: int) -> tuple[int, int]:
        """Frames ``[first, last)`` that hold uncompressed bytes ``[start, end)``
        (``first == last`` for an empty range).

        Raises:
            ValueError: the range is not inside the payload.
        """
        if not 0 <= start <= end <= self.size:
            raise ValueError(f"[{start}, {end}) is outside a payload of {self.size} bytes")
        if start == end:
            return 0, 0
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        last = int(np.searchsorted(self.starts, end, side="left"))
        return first, last


def tail_length(frame_count_bound: int) -> int:
    """Bytes of an object's tail that hold its seek table when it has at most
    ``frame_count_bound`` frames (a reader reads that much and parses; a larger table
    is read again whole: :mod:`tieredstore.cold.compressed.framed`)."""
    return _SKIPPABLE_HEADER + 12 * frame_count_bound + FOOTER_BYTES


def seek_table_length(tail: bytes | memoryview) -> int:
    """The seek table's length from the footer in ``tail``'s last 9 bytes (0 when there is
    no seekable footer: :meth:`FrameIndex.parse` then says why)."""
    view = memoryview(tail).cast("B")
    if view.nbytes < FOOTER_BYTES:
        return 0
    footer: tuple[int, int, int] = _FOOTER.unpack(view[-FOOTER_BYTES:])
    count, descriptor, magic = footer
    if magic != SEEKABLE_MAGIC:
        return 0
    return _SKIPPABLE_HEADER + count * (12 if descriptor & 0x80 else 8) + FOOTER_BYTES


def stored_bound(size: int, settings: FrameSettings) -> int:
    """The most bytes :func:`encode` (or :func:`encode_file`) can make of ``size`` bytes
    at ``settings``: zstd's worst case for each frame (``ZSTD_COMPRESSBOUND``: bytes that
    do not compress are stored in raw blocks, a few bytes each more, frame header and
    checksum included) plus the seek table. What a writer reserves room for before it
    encodes."""
    if size < 0:
        raise ValueError(f"size must not be negative, got {size}")
    full, last = divmod(size, settings.frame_bytes)
    frames = full + (1 if last else 0)
    payload = full * _zstd_bound(settings.frame_bytes) + (_zstd_bound(last) if last else 0)
    return payload + _SKIPPABLE_HEADER + frames * _ENTRY.itemsize * 2 + FOOTER_BYTES


def _zstd_bound(size: int) -> int:
    """``ZSTD_COMPRESSBOUND(size)`` of zstd.h: one frame's worst case."""
    small = 128 << 10
    return size + (size >> 8) + ((small - size) >> 11 if size < small else 0)


def encode(data: bytes | memoryview, settings: FrameSettings) -> bytes:
    """``data`` as a seekable zstd object of frames of ``settings.frame_bytes`` (the last
    shorter; none for empty ``data``)."""
    return b"".join(_seekable(memoryview(data).cast("B"), settings))


def encode_file(src: Path, dst: Path, settings: FrameSettings) -> tuple[int, str]:
    """Write ``src`` compressed to ``dst`` as :func:`encode` would; return ``dst``'s size
    and the CRC-32C of its bytes (computed as they are written: ``dst`` is not read
    back). Blocking: run it in a thread.

    ``src`` is mapped, not read: each frame compresses straight from the page cache, where
    reading it allocated and filled a fresh frame-sized buffer per frame (18 % of the
    encode's CPU). ``src`` must not shrink meanwhile (a mapped page past its end would be
    a ``SIGBUS``): it is a finished spool file that nothing else writes."""
    crc = hasher(DigestAlgorithm.CRC32C)
    size = 0
    view = mapped_view(src)
    with dst.open("wb") as fout:
        for part in _seekable(view, settings):
            crc.update(part)
            size += fout.write(part)
    return size, crc.hexdigest()


def _seekable(view: memoryview, settings: FrameSettings) -> Iterator[bytes]:
    """Each ``settings.frame_bytes`` of ``view`` (bytes; the last shorter) compressed as
    one frame, in order, then their seek table."""
    compressor = settings.compressor()
    step = settings.frame_bytes
    sizes: list[int] = []
    for lo in range(0, view.nbytes, step):
        chunk = view[lo : lo + step]
        frame = compressor.compress(chunk)
        sizes += (len(frame), chunk.nbytes)
        yield frame
    yield _seek_table(sizes)


def _seek_table(sizes: list[int]) -> bytes:
    """The seek table of frames of (compressed, decompressed) ``sizes``, flattened."""
    entries = np.asarray(sizes, dtype=_ENTRY).tobytes()
    header = _HEADER.pack(SKIPPABLE_MAGIC, len(entries) + FOOTER_BYTES)
    return header + entries + _FOOTER.pack(len(sizes) // 2, 0, SEEKABLE_MAGIC)


def decode_whole(stored: bytes | memoryview, *, where: str) -> bytes:
    """A whole seekable object's payload (``stored``: every byte of it).

    Raises:
        CorruptFrameError: as :meth:`FrameIndex.parse` and :func:`decode`.
    """
    index = FrameIndex.parse(stored, len(stored), where=where)
    return decode(index, 0, index.count, memoryview(stored)[: int(index.at[-1])], where=where)


def decode(index: FrameIndex, first: int, last: int, stored: bytes | memoryview, *,
           where: str) -> bytes:  # fmt: skip
    """Frames ``[first, last)`` decoded and joined (uncompressed bytes from
    ``index.starts[first]`` to ``index.starts[last]``), from ``stored``: the object's
    bytes ``[index.at[first], index.at[last])``.

    Raises:
        CorruptFrameError: ``stored`` is not that long, or a frame does not decode, fails
            its checksum or does not have (or its header does not claim) the size the
            seek table says.
    """
    view = memoryview(stored).cast("B")
    base = int(index.at[first])
    if view.nbytes != int(index.at[last]) - base:
        raise CorruptFrameError(
            f"frames [{first}, {last}) are {int(index.at[last]) - base} bytes, got {view.nbytes}",
            where=where,
        )
    decompressor = zstandard.ZstdDecompressor()
    out: list[bytes] = []
    for i in range(first, last):
        lo, hi = int(index.at[i]) - base, int(index.at[i + 1]) - base
        want = int(index.starts[i + 1] - index.starts[i])
        try:
            # A damaged header may claim any content size, which decompress would
            # allocate (a MemoryError): the seek table's size is checked first.
            declared = zstandard.frame_content_size(view[lo:hi])
            if declared != want:
                raise CorruptFrameError(
                    f"frame {i}'s header says {declared} bytes, its seek table says {want}",
                    where=where,
                )
            got = decompressor.decompress(view[lo:hi], max_output_size=want)
        except (zstandard.ZstdError, MemoryError) as exc:  # a damaged header: a huge size
            raise CorruptFrameError(
                f"frame {i} does not decode: {exc or type(exc).__name__}", where=where
            ) from exc
        if len(got) != want:
            raise CorruptFrameError(
                f"frame {i} decodes to {len(got)} bytes, its seek table says {want}",
                where=where,
            )
        out.append(got)
    return out[0] if len(out) == 1 else b"".join(out)
