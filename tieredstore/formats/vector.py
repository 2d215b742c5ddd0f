"""Vectorised field access over many records packed in one buffer.

Tiering and verification touch a few fixed fields of every record (totalSize,
queueOffset, physicalOffset, storeTimestamp). Doing that with numpy fancy indexing over
the whole batch avoids a Python loop per record on the hot path.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["gather_be", "scatter_be_i64", "store_timestamps"]

I64 = npt.NDArray[np.int64]


def gather_be(arr: npt.NDArray[np.uint8], at: I64, width: int) -> I64:
    """Return the big-endian signed ints of ``width`` (4 or 8) bytes at offsets ``at``."""
    idx = at[:, None] + np.arange(width)
    raw = np.ascontiguousarray(arr[idx])
    out: I64 = raw.view(">i8" if width == 8 else ">i4").reshape(-1).astype(np.int64)
    return out


def scatter_be_i64(arr: npt.NDArray[np.uint8], at: I64, values: I64) -> None:
    """Write ``values`` as big-endian int64 at byte offsets ``at`` of ``arr`` (in place)."""
    idx = at[:, None] + np.arange(8)
    arr[idx] = values.astype(">i8").view(np.uint8).reshape(-1, 8)


def store_timestamps(arr: npt.NDArray[np.uint8], positions: I64) -> I64:
    """Return storeTimestamp of the records starting at ``positions``.

    The field sits at byte 56, or 68 when the born host is IPv6 (sysFlag bit 0x10).
    """
    sys_flag = gather_be(arr, positions + 36, 4)
    return gather_be(arr, positions + np.where(sys_flag & 0x10, 68, 56), 8)
