"""Arrow arrays over numpy arrays, zero-copy, without pyarrow's pandas probe; and byte
ranges gathered by one Arrow ``take``.

``pa.array(ndarray)`` first asks whether its input is a pandas object, which imports
pandas (about 0.3 s, and ~1 s in a fresh Spark Python worker) the first time: a
tiering process pays it in its first window. :func:`primitive` builds the array from the
numpy buffer directly.

:func:`gather_ranges` copies many byte ranges of one buffer into one new buffer: the
buffer is seen as a binary array whose elements are the ranges and the gaps between
them, and one ``take`` of the range elements copies each range with a ``memcpy`` in C
(no Python object per range; the GIL is released while it copies).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["flat_binary", "gather_ranges", "primitive", "ranges_in_order"]

I64 = npt.NDArray[np.int64]


def primitive(values: np.ndarray[Any, Any], arrow_type: pa.DataType) -> pa.Array:
    """A null-free Arrow array of ``arrow_type`` over ``values`` (copied only if not
    contiguous), e.g. ``primitive(order, pa.int64())``.

    Raises:
        ValueError: ``values``' item size is not ``arrow_type``'s width.
    """
    data = np.ascontiguousarray(values)
    if data.dtype.itemsize * 8 != arrow_type.bit_width:
        raise ValueError(f"{data.dtype} items do not fit Arrow {arrow_type}")
    return pa.Array.from_buffers(arrow_type, data.shape[0], [None, pa.py_buffer(data)])


def _bounds(starts: I64, lengths: I64) -> I64:
    """``[0, s0, e0, s1, e1, ...]``: the offsets of the ranges-and-gaps binary array."""
    bounds = np.empty(2 * len(starts) + 1, np.int64)
    bounds[0] = 0
    bounds[1::2] = starts
    bounds[2::2] = starts + lengths
    return bounds


def ranges_in_order(starts: I64, lengths: I64, size: int) -> bool:
    """Whether the ranges ``[starts[i], starts[i] + lengths[i])`` lie inside a buffer of
    ``size`` bytes, in ascending order, none overlapping the next (what
    :func:`gather_ranges` needs). Empty ranges count too: each must lie between its
    neighbours."""
    if len(starts) == 0:
        return True
    bounds = _bounds(starts, lengths)
    return bool(bounds[-1] <= size and np.all(bounds[1:] >= bounds[:-1]))


def gather_ranges(
    data: Any,
    starts: I64,
    lengths: I64,
    order: I64 | None = None,
    *,
    memory_pool: pa.MemoryPool | None = None,
) -> pa.Buffer:
    """The byte ranges ``[starts[i], starts[i] + lengths[i])`` of ``data`` (any buffer),
    concatenated in ``order`` (a permutation of their indices; default: as given) into
    one new buffer of exactly their total size.

    Raises:
        ValueError: the ranges are not :func:`ranges_in_order` in ``data`` (the caller
            copies such ranges another way; a binary array's offsets must ascend).
    """
    starts = np.asarray(starts, np.int64)
    lengths = np.asarray(lengths, np.int64)
    source = pa.py_buffer(data)
    if not ranges_in_order(starts, lengths, source.size):
        raise ValueError("byte ranges must ascend, not overlap and lie inside the buffer")
    k = len(starts)
    total = int(lengths.sum())
    if total == 0:
        return pa.py_buffer(b"")
    array = pa.Array.from_buffers(
        pa.large_binary(), 2 * k, [None, pa.py_buffer(_bounds(starts, lengths)), source]
    )
    index = np.arange(1, 2 * k, 2, dtype=np.int64) if order is None else 2 * order + 1
    taken = pc.take(array, primitive(index, pa.int64()), memory_pool=memory_pool)
    values: pa.Buffer = taken.buffers()[2]
    return values.slice(0, total)


def flat_binary(raw: pa.Array) -> tuple[npt.NDArray[np.uint8], I64]:
    """A binary or string array's values (one numpy view, no copy) and its offsets,
    rebased to start at 0 (``raw`` may be a slice of a larger array)."""
    bounds = np.frombuffer(raw.buffers()[1], np.int32, len(raw) + 1, raw.offset * 4)
    offsets = bounds.astype(np.int64) - bounds[0]
    values = np.frombuffer(raw.buffers()[2] or b"", np.uint8)[bounds[0] : bounds[-1]]
    return values, offsets
