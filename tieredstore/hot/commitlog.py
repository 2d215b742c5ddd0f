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
coalesced into runs first, so a contiguous span costs one slice, whatever its record
count; only interleaving costs Python work, one slice per run.

The hot commitlog is read through read-only ``mmap`` of its files: only the pages that
hold this queue's records are touched, and a file the broker deletes while mapped stays
readable until it is unmapped.
"""

from __future__ import annotations

import mmap
import os
from typing import Self

import numpy as np
import numpy.typing as npt

from tieredstore.errors import OffsetOutOfRangeError, StoreNotFoundError, TruncatedDataError
from tieredstore.hot.files import MappedFile, MappedFileList

__all__ = ["HotCommitlog", "Readable", "gather", "read_span", "runs"]

Int64s = npt.NDArray[np.int64]
#: Anything exposing its bytes through the buffer protocol.
Readable = bytes | bytearray | memoryview | mmap.mmap


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

    A single run is returned as a zero-copy ``memoryview``. Spans must lie inside ``buf``.
    """
    parts = _run_views(memoryview(buf), starts, sizes)
    if len(parts) == 1:
        return parts[0]
    return b"".join(parts)


def _run_views(view: memoryview, starts: Int64s, sizes: Int64s) -> list[memoryview]:
    """The spans' maximal contiguous runs as views into ``view``, in order (no copy)."""
    run_starts, run_ends = runs(starts, sizes)
    return [view[s:e] for s, e in zip(run_starts.tolist(), run_ends.tolist(), strict=True)]


class HotCommitlog:
    """Read-only, mmap-backed access to the hot commitlog files (a context manager).

    Built from one :class:`~tieredstore.hot.files.MappedFileList` snapshot; each file is
    mapped on first use and unmapped on :meth:`close`.
    """

    def __init__(self, files: MappedFileList) -> None:
        self._files = files.files
        self._bases = np.array([f.base for f in self._files], dtype=np.int64)
        self._maps: dict[int, mmap.mmap] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Unmap every mapped file; safe to call twice."""
        maps, self._maps = self._maps, {}
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

    def gather(self, offsets: Int64s, sizes: Int64s) -> bytearray:
        """Return a private copy of the records at commitlog ``offsets``, back to back.

        Raises:
            OffsetOutOfRangeError: an offset in no commitlog file (the broker deleted it).
            TruncatedDataError: a record crossing the end of its file.
            StoreNotFoundError: a file vanished or cannot be mapped.
        """
        if offsets.size == 0:
            return bytearray()
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
        parts: list[memoryview] = []
        try:
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
                            f"commitlog offset {f.base + at} is in no commitlog file (past "
                            "the newest)",
                            where=str(f.path),
                        )
                    raise TruncatedDataError(
                        "record crosses the end of its file", where=f"{f.path}@{at}"
                    )
                parts += _run_views(memoryview(self._map(i)), rel, size)
            # One copy of every run of every file, owned by the caller.
            return bytearray().join(parts)
        finally:
            parts.clear()  # views into the mappings must not outlive this call


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
