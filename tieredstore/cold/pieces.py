"""A byte range of an object held as views over the buffers it was read into, not copied.

The read service answers with records exactly as cold holds them. The read-ahead cache
(:mod:`tieredstore.cold.readahead`) already holds them, in fixed-size parts; a range of
an object is then one or more slices of those parts. :class:`Pieces` is such a range as
read-only ``memoryview`` slices, in order, so that the records can be checked against
their units (:meth:`Pieces.rows` reads their header fields) and written to a socket
without joining or slicing them into new ``bytes`` first.

A view keeps its whole part alive for as long as it is referenced, even after the cache
evicted that part: the memory of one answer is bounded by the parts it touches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["Pieces"]


@dataclass(frozen=True, slots=True)
class Pieces:
    """A contiguous byte range as read-only views, in order; positions are relative to
    the range's first byte.

    ``views`` never holds an empty view; an empty range has none. Build one with
    :meth:`of` (one buffer) or :meth:`of_parts` (slices of consecutive parts).
    """

    views: tuple[memoryview, ...]
    size: int

    @classmethod
    def of(cls, data: bytes | memoryview) -> Pieces:
        """All of ``data`` (no copy)."""
        view = memoryview(data).cast("B")
        return cls((view,) if view.nbytes else (), view.nbytes)

    @classmethod
    def of_parts(
        cls, parts: Sequence[bytes | memoryview], base: int, start: int, end: int
    ) -> Pieces:
        """Bytes ``[start, end)`` of consecutive ``parts``, the first of which starts at
        ``base`` (all in the same frame, e.g. object offsets).

        Raises:
            ValueError: the parts do not cover ``[start, end)``.
        """
        views: list[memoryview] = []
        lo = base
        for part in parts:
            hi = lo + len(part)
            a, b = max(start, lo), min(end, hi)
            if a < b:
                views.append(memoryview(part)[a - lo : b - lo])
            lo = hi
        got = sum(v.nbytes for v in views)
        if got != end - start or not base <= start:
            raise ValueError(f"parts from {base} to {lo} do not cover [{start}, {end})")
        return cls(tuple(views), got)

    def __len__(self) -> int:
        return self.size

    def tobytes(self) -> bytes:
        """The range as one ``bytes``: the buffer itself when one whole ``bytes`` object
        holds it, else one copy (for callers that decode; the read service never needs it)."""
        if len(self.views) == 1:
            view = self.views[0]
            if isinstance(view.obj, bytes) and view.nbytes == len(view.obj):
                return view.obj
        return b"".join(self.views)

    def rows(self, starts: npt.NDArray[np.int64], width: int) -> npt.NDArray[np.uint8]:
        """Bytes ``[start, start + width)`` for each of ``starts``, as an array of shape
        ``(len(starts), width)``: the header fields of many records, read without joining
        the views (numpy per view; Python only for a row that straddles two views).

        Raises:
            IndexError: a row that is not inside the range.
        """
        if starts.size and (starts.min() < 0 or starts.max() + width > self.size):
            raise IndexError(f"rows of {width} bytes outside a range of {self.size} bytes")
        cols = np.arange(width, dtype=np.int64)
        if len(self.views) == 1:
            picked: npt.NDArray[np.uint8] = np.frombuffer(self.views[0], dtype=np.uint8)[
                starts[:, None] + cols
            ]
            return picked
        sizes = np.fromiter((v.nbytes for v in self.views), dtype=np.int64, count=len(self.views))
        ends = np.cumsum(sizes)
        which = np.searchsorted(ends, starts, side="right")
        inside = starts + width <= ends[which]
        out = np.empty((len(starts), width), dtype=np.uint8)
        for i, view in enumerate(self.views):
            rows = inside & (which == i)
            if rows.any():
                at = starts[rows] - (ends[i] - sizes[i])
                out[rows] = np.frombuffer(view, dtype=np.uint8)[at[:, None] + cols]
        for r in np.flatnonzero(~inside).tolist():
            out[r] = np.frombuffer(self._bytes(int(starts[r]), int(starts[r]) + width), np.uint8)
        return out

    def _bytes(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the range, joined from the views they lie in."""
        return b"".join(Pieces.of_parts(self.views, 0, start, end).views)
