"""Vectorised field access over many records packed in one buffer.

Tiering and verification touch a few fixed fields of every record (totalSize,
queueOffset, physicalOffset, storeTimestamp). Doing that with numpy fancy indexing over
the whole batch avoids a Python loop per record on the hot path.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from tieredstore.formats.record import (
    PHYSICAL_OFFSET_SLICE,
    STORE_TIMESTAMP_AT_V4,
    STORE_TIMESTAMP_AT_V6,
    SYS_FLAG_AT,
    SysFlag,
)

__all__ = [
    "differing_bytes",
    "gather_be",
    "physical_offset_bytes",
    "scatter_be_i64",
    "store_timestamps",
    "values_at",
]

I64 = npt.NDArray[np.int64]


def values_at(arr: npt.NDArray[np.uint8], at: I64, dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    """The ``dtype`` item (an int, or a structured record head) starting at each byte
    offset of ``at`` in ``arr`` (a contiguous byte array); a new array.

    Offsets must lie in ``[0, len(arr) - itemsize]`` (IndexError otherwise; a negative
    one counts from the end, as numpy indices do). ``arr`` is seen as overlapping items,
    one starting at every byte, so the gather is one numpy index over item rows:
    3 to 4 times faster than indexing every byte through a ``len(at) x itemsize``
    index matrix.
    """
    kind = np.dtype(dtype)
    items = _overlapping(arr, kind, len(at))
    return np.empty(0, kind) if items is None else items[at]


def _overlapping(arr: npt.NDArray[np.uint8], kind: np.dtype[Any], wanted: int) -> Any:
    """``arr`` seen as ``kind`` items, one starting at every byte (a view), or None when
    no item fits; IndexError then if ``wanted`` items were asked for."""
    count = arr.shape[0] - kind.itemsize + 1
    if count <= 0:
        if wanted:
            raise IndexError(f"no {kind.itemsize}-byte item fits {arr.shape[0]} bytes")
        return None
    return np.ndarray((count,), kind, arr, 0, (1,))


def gather_be(arr: npt.NDArray[np.uint8], at: I64, width: int) -> I64:
    """Return the big-endian signed ints of ``width`` (4 or 8) bytes at offsets ``at``."""
    out: I64 = values_at(arr, at, ">i8" if width == 8 else ">i4").astype(np.int64)
    return out


def scatter_be_i64(arr: npt.NDArray[np.uint8], at: I64, values: I64) -> None:
    """Write ``values`` as big-endian int64 at byte offsets ``at`` of ``arr`` (in place,
    through the overlapping-items view of :func:`values_at`). Offsets should be at
    least 8 apart: where two fields overlap, which bytes win is unspecified."""
    items = _overlapping(arr, np.dtype(">i8"), len(at))
    if items is not None:
        items[at] = values


def store_timestamps(arr: npt.NDArray[np.uint8], positions: I64) -> I64:
    """Return storeTimestamp of the records starting at ``positions``.

    The field follows the born host: byte 56, or 68 when it is IPv6 (sysFlag
    BORNHOST_V6).
    """
    sys_flag = gather_be(arr, positions + SYS_FLAG_AT, 4)
    v6 = sys_flag & int(SysFlag.BORNHOST_V6)
    return gather_be(arr, positions + np.where(v6, STORE_TIMESTAMP_AT_V6, STORE_TIMESTAMP_AT_V4), 8)


_PHYSICAL_OFFSET_BYTES = np.arange(PHYSICAL_OFFSET_SLICE.start, PHYSICAL_OFFSET_SLICE.stop)


def physical_offset_bytes(starts: I64) -> I64:
    """Flat byte indices of the physicalOffset field of the records starting at
    ``starts``: the only bytes a cold record may differ from its hot original in."""
    out: I64 = (starts[:, None] + _PHYSICAL_OFFSET_BYTES).reshape(-1).astype(np.int64)
    return out


def differing_bytes(a: npt.NDArray[np.uint8], b: npt.NDArray[np.uint8], starts: I64) -> I64:
    """Indices where two equally long runs of records (``starts`` in both) differ,
    outside every record's physicalOffset field: empty when each cold record is its hot
    original (the vectorised :func:`~tieredstore.formats.record.same_outside_physical_offset`)."""
    diff = a != b
    diff[physical_offset_bytes(starts)] = False
    found: I64 = np.flatnonzero(diff).astype(np.int64)
    return found
