"""Arrow arrays over numpy arrays, zero-copy, without pyarrow's pandas probe.

``pa.array(ndarray)`` first asks whether its input is a pandas object, which imports
pandas (about 0.3 s, and ~1 s in a fresh Spark Python worker) the first time: a
tiering process pays it in its first window. :func:`primitive` builds the array from the
numpy buffer directly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["primitive"]


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
