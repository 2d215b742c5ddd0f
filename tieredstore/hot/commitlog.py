"""The one hot-record reader: many records' bytes gathered into one buffer, a run at a time.

The broker's commitlog is read in two ways, both here. Records by (offset, size) — the
verifier's content check, :meth:`HotStore.read_records_bytes` (repair, restore's check,
cold continuity) — go through :class:`HotCommitlog`. Whole spans of one file into a
reusable buffer — the tiering pass's sequential windows
(:mod:`tieredstore.dispatcher.tiering.commitlog_pass`) — go
through :func:`read_span`.

A queue's records are contiguous in its cold commitlog object but interleaved with other
queues' records in the hot commitlog. Comparing them record by record in Python is too
slow for the content level, so both sides are laid out the same way — records in queue
offset order, back to back — and compared as two flat byte arrays. Adjacent records are
coalesced into runs first, so a contiguous span costs one copy, whatever its record
count. Interleaving makes thousands of runs a block; :func:`copy_parts` copies them in C
(``_gather.c``, one ``memcpy`` each, about ten times faster than a slice and a join step
per run in Python for 100-byte records) where the install built it, and in Python
(:func:`pure_copy_parts`, the reference the tests compare it with) where it did not.

The hot commitlog is read through read-only ``mmap`` of its files: only the pages that
hold this queue's records are touched, and a file the broker deletes while mapped stays
readable until it is unmapped.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Sequence
from typing import Self

import numpy as np
import numpy.typing as npt

from tieredstore.errors import OffsetOutOfRangeError, StoreNotFoundError, TruncatedDataError
from tieredstore.hot.files import MappedFile, MappedFileList

__all__ = [
    "NATIVE",
    "HotCommitlog",
    "Readable",
    "copy_parts",
    "copy_parts_into",
    "gather",
    "pure_copy_parts",
    "pure_copy_parts_into",
    "read_span",
    "runs",
]

Int64s = npt.NDArray[np.int64]
#: Anything exposing its bytes through the buffer protocol.
Readable = bytes | bytearray | memoryview | mmap.mmap
#: One source's runs: ``(source, starts, ends)``, the runs ``source[starts[i]:ends[i]]``.
Part = tuple[Readable, Int64s, Int64s]


_Gather = Callable[[Sequence[Part]], bytearray]
#: A writable buffer :func:`copy_parts_into` copies to.
Writable = bytearray | npt.NDArray[np.uint8]
_GatherInto = Callable[[Sequence[Part], Writable], int]


def _native_gather() -> tuple[_Gather, _GatherInto] | tuple[None, None]:
    """The native gather (``_gather.c``), Nones where the install found no C compiler."""
    try:
        from tieredstore.hot import _gather
    except ImportError:  # pragma: no cover - an install without a compiler
        return None, None
    return _gather.gather, _gather.gather_into


_NATIVE_GATHER, _NATIVE_GATHER_INTO = _native_gather()
#: Whether :func:`copy_parts` copies natively (False: :func:`pure_copy_parts` serves).
NATIVE = _NATIVE_GATHER is not None


def runs(starts: Int64s, sizes: Int64s) -> tuple[Int64s, Int64s]:
    """Coalesce ``(start, size)`` spans, in order, into maximal contiguous runs.

    Returns the runs' starts and ends. Spans are not reordered: a span that does not
    begin where the previous one ended starts a new run.
    """
    if starts.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    ends = starts + sizes
    breaks = np.flatnonzero(starts[1:] != ends[:-1]) + 1
    first = np.concatenate(([0], breaks))
    last = np.concatenate((breaks - 1, [starts.size - 1]))
    return starts[first], ends[last]


def gather(buf: Readable, starts: Int64s, sizes: Int64s) -> bytes | memoryview:
    """Return the spans ``buf[start:start+size]``, in order, back to back.

    A single run is returned as a zero-copy ``memoryview``. Spans must lie inside ``buf``
    (a span past its end is cut short, as a slice is: the caller compares the result).
    For cold objects, whose records are one run or few; the hot commit log's many runs go
    through :func:`copy_parts`.
    """
    view = memoryview(buf)
    run_starts, run_ends = runs(starts, sizes)
    parts = [view[s:e] for s, e in zip(run_starts.tolist(), run_ends.tolist(), strict=True)]
    if len(parts) == 1:
        return parts[0]
    return b"".join(parts)


def copy_parts(parts: Sequence[Part]) -> bytearray:
    """Each part's runs, in the order given (any order; they may overlap), part after
    part, back to back in one new ``bytearray``: copied by the native gather
    (:data:`NATIVE`, one ``memcpy`` per run into one allocation, the GIL released)
    where it was built, else by :func:`pure_copy_parts`, the reference it is tested
    against byte for byte.

    Raises:
        ValueError: a run outside its source or ending before it starts, or ``starts``
            and ``ends`` of different lengths.
    """
    if _NATIVE_GATHER is None:
        return pure_copy_parts(parts)
    return _NATIVE_GATHER(_native_parts(parts))


def copy_parts_into(parts: Sequence[Part], out: Writable) -> int:
    """:func:`copy_parts` into the start of ``out`` (not one of the sources), natively
    where built, else by :func:`pure_copy_parts_into`; returns the bytes copied. A reader
    that copies into one buffer again and again does not fault fresh memory in for each
    copy (a new ``bytearray`` of more than glibc's largest heap chunk, 32 MiB, is).

    Raises:
        ValueError: as :func:`copy_parts`, or the runs add up to more than ``out``
            holds (nothing is copied then).
    """
    if _NATIVE_GATHER_INTO is None:
        return pure_copy_parts_into(parts, out)
    return _NATIVE_GATHER_INTO(_native_parts(parts), out)


def _native_parts(parts: Sequence[Part]) -> list[Part]:
    """``parts`` as the native gather takes them: each part's starts and ends contiguous
    int64s."""
    return [(b, np.ascontiguousarray(s, np.int64), np.ascontiguousarray(e, np.int64))
            for b, s, e in parts]  # fmt: skip


def pure_copy_parts_into(parts: Sequence[Part], out: Writable) -> int:
    """:func:`copy_parts_into` in Python: each run's view assigned to its place."""
    total = 0
    for buf, starts, ends in parts:
        _check_runs(starts, ends, memoryview(buf).nbytes)
        total += int((ends - starts).sum())
    target = _byte_view(out)
    if total > target.nbytes:
        raise ValueError(
            f"the runs add up to {total} bytes, more than the {target.nbytes} of the buffer"
        )
    at = 0
    for buf, starts, ends in parts:
        with memoryview(buf) as view:
            for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
                target[at : at + hi - lo] = view[lo:hi]
                at += hi - lo
    return total


def _byte_view(out: Writable) -> memoryview:
    """``out`` as a flat view of bytes."""
    return (memoryview(out) if isinstance(out, bytearray) else out.data).cast("B")


def pure_copy_parts(parts: Sequence[Part]) -> bytearray:
    """:func:`copy_parts` in Python: a view per run, joined (about 0.25 µs a run)."""
    views: list[memoryview] = []
    try:
        for buf, starts, ends in parts:
            view = memoryview(buf)
            _check_runs(starts, ends, view.nbytes)
            views += [view[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]
        return bytearray().join(views)
    finally:
        views.clear()  # views into a mapping must not outlive this call


def _check_runs(starts: Int64s, ends: Int64s, size: int) -> None:
    if starts.shape != ends.shape:
        raise ValueError(f"{starts.size} starts but {ends.size} ends")
    bad = np.flatnonzero((starts < 0) | (ends < starts) | (ends > size))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"run {i} is [{int(starts[i])}, {int(ends[i])}), not inside a buffer of {size} bytes"
        )


class HotCommitlog:
    """Read-only, mmap-backed access to the hot commitlog files (a context manager).

    Built from one :class:`~tieredstore.hot.files.MappedFileList` snapshot; each file is
    mapped on first use and unmapped on :meth:`close`.
    """

    def __init__(self, files: MappedFileList) -> None:
        self._files = files.files
        self._bases = np.array([f.base for f in self._files], dtype=np.int64)
        self._maps: dict[int, mmap.mmap] = {}
        self._released: dict[int, int] = {}  # per mapped file: bytes released from its start

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Unmap every mapped file; safe to call twice."""
        maps, self._maps = self._maps, {}
        self._released = {}
        for m in maps.values():
            m.close()

    def _map(self, index: int) -> mmap.mmap:
        m = self._maps.get(index)
        if m is None:
            f = self._files[index]
            try:
                fd = os.open(f.path, os.O_RDONLY)
            except OSError as exc:
                raise StoreNotFoundError(
                    f"cannot open commitlog file: {exc.strerror}", where=str(f.path)
                ) from exc
            try:
                m = mmap.mmap(fd, f.size, prot=mmap.PROT_READ)
            except (OSError, ValueError) as exc:
                raise StoreNotFoundError(
                    f"cannot map commitlog file: {exc}", where=str(f.path)
                ) from exc
            finally:
                os.close(fd)
            self._maps[index] = m
        return m

    def release(self, below: int) -> None:
        """Drop this process's mappings of the pages of every mapped file that lie wholly
        below commitlog offset ``below`` (``madvise(MADV_DONTNEED)``): they leave the
        process's resident set, not the page cache, and a later :meth:`gather` there maps
        them again (and they stay mapped: a range is released once). A reader that moves
        forward through the log calls it behind itself, so what it keeps mapped is what it
        reads next, not the whole store.
        """
        for index, m in self._maps.items():
            f = self._files[index]
            upto = min(below - f.base, f.size) // mmap.PAGESIZE * mmap.PAGESIZE
            done = self._released.get(index, 0)
            if upto > done:
                m.madvise(mmap.MADV_DONTNEED, done, upto - done)
                self._released[index] = upto

    def gather(self, offsets: Int64s, sizes: Int64s) -> bytearray:
        """Return a private copy of the records at commitlog ``offsets``, back to back.

        Raises:
            OffsetOutOfRangeError: an offset in no commitlog file (the broker deleted it).
            TruncatedDataError: a record crossing the end of its file.
            StoreNotFoundError: a file vanished or cannot be mapped.
        """
        return copy_parts(self._parts(offsets, sizes))  # one copy of every run, the caller's

    def gather_into(self, offsets: Int64s, sizes: Int64s, out: Writable) -> memoryview:
        """:meth:`gather` into the start of ``out`` (:func:`copy_parts_into`), which must
        hold ``sizes.sum()`` bytes; returns the view of ``out`` copied to.

        Raises:
            as :meth:`gather`; ValueError: ``out`` is too small.
        """
        return _byte_view(out)[: copy_parts_into(self._parts(offsets, sizes), out)]

    def _parts(self, offsets: Int64s, sizes: Int64s) -> list[Part]:
        """Each file's runs of the records at ``offsets`` (checked as :meth:`gather`
        says)."""
        if offsets.size == 0:
            return []
        if sizes.min() < 0:
            bad = int(np.argmin(sizes))
            raise TruncatedDataError(
                f"record of {int(sizes[bad])} bytes", where=f"commitlog@{int(offsets[bad])}"
            )
        index = np.searchsorted(self._bases, offsets, side="right") - 1
        if index.min() < 0:
            bad = int(offsets[int(np.argmin(index))])
            raise OffsetOutOfRangeError(
                f"commitlog offset {bad} is in no commitlog file (below the oldest: the "
                "broker deleted it)",
                where="commitlog",
            )
        # Records of one queue move forward through the files: group consecutive
        # records living in the same file and take each group's runs from its mapping.
        breaks = np.flatnonzero(index[1:] != index[:-1]) + 1
        parts: list[Part] = []  # each file's runs (the mappings, not views into them)
        for lo, hi in zip(
            np.concatenate(([0], breaks)).tolist(),
            np.concatenate((breaks, [offsets.size])).tolist(),
            strict=True,
        ):
            i = int(index[lo])
            f = self._files[i]
            rel = offsets[lo:hi] - f.base
            size = sizes[lo:hi]
            over = np.flatnonzero(rel + size > f.size)
            if over.size:  # the first record in order that the file does not hold whole
                at = int(rel[int(over[0])])
                if at >= f.size:
                    raise OffsetOutOfRangeError(
                        f"commitlog offset {f.base + at} is in no commitlog file (past the newest)",
                        where=str(f.path),
                    )
                raise TruncatedDataError(
                    "record crosses the end of its file", where=f"{f.path}@{at}"
                )
            parts.append((self._map(i), *runs(rel, size)))
        return parts


def read_span(f: MappedFile, first: int, end: int, buffer: bytearray) -> bytearray:
    """Read commitlog bytes ``[first, end)`` (absolute offsets, inside file ``f``) into
    the start of ``buffer``, grown if it is too small; return the buffer.

    Raises:
        TruncatedDataError: the span crosses the file's end, or the file is shorter.
        OffsetOutOfRangeError: the file is gone (the broker deleted it).
    """
    if end > f.end:
        raise TruncatedDataError(
            f"record of {end - first} bytes crosses the end of its file",
            where=f"{f.path}@{first - f.base}",
        )
    if len(buffer) < end - first:
        buffer = bytearray(end - first)
    try:
        fd = os.open(f.path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise OffsetOutOfRangeError(
            f"commitlog file is gone: {exc.strerror}", where=str(f.path)
        ) from exc
    try:
        got = os.preadv(fd, [memoryview(buffer)[: end - first]], first - f.base)
    finally:
        os.close(fd)
    if got != end - first:
        raise TruncatedDataError(
            f"commitlog file ends early ({got} of {end - first} bytes)",
            where=f"{f.path}@{first - f.base}",
        )
    return buffer
