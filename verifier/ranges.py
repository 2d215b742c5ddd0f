"""Offset ranges from boolean masks, in bulk (numpy, no per-element Python work).

A verification finds *which* offsets are bad as a boolean mask over a segment; reports
carry half-open ranges ``[start, end)`` instead of one row per offset. When damage is
widespread the number of ranges is capped: the tail collapses into one summarising range,
so a badly damaged segment still yields a bounded report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["MAX_RANGES_PER_SEGMENT", "OffsetRange", "mask_to_ranges"]

#: At most this many ranges per (segment, fact kind); the rest become one range.
MAX_RANGES_PER_SEGMENT: Final = 1000


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    """Queue offsets ``[start, end)`` of which ``count`` are affected.

    ``count == end - start`` for an exact range; a summarising range (the capped tail)
    has ``count`` smaller than its span.
    """

    start: int
    end: int
    count: int


def mask_to_ranges(
    mask: npt.NDArray[np.bool_], base: int, *, limit: int = MAX_RANGES_PER_SEGMENT
) -> list[OffsetRange]:
    """Return the runs of True in ``mask`` as offset ranges, offset ``i`` being ``base + i``.

    At most ``limit`` ranges come back: when there are more, the last one spans from the
    start of run ``limit`` to the end of the last run, with ``count`` the number of True
    values inside it.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    m = np.asarray(mask, dtype=np.bool_)
    if not m.any():
        return []
    padded = np.concatenate(([False], m, [False]))
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    starts, ends = edges[0::2].tolist(), edges[1::2].tolist()
    exact = len(starts) if len(starts) <= limit else limit - 1
    pairs = zip(starts[:exact], ends[:exact], strict=True)
    out = [OffsetRange(base + s, base + e, e - s) for s, e in pairs]
    if exact < len(starts):
        rest_start, rest_end = starts[exact], ends[-1]
        rest_count = int(np.count_nonzero(m[rest_start:rest_end]))
        out.append(OffsetRange(base + rest_start, base + rest_end, rest_count))
    return out
