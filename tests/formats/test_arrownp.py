"""Arrow arrays over numpy arrays: equal to pa.array, and no pandas import."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from tieredstore.formats.arrownp import primitive


def test_equals_pa_array_for_each_width() -> None:
    values = np.array([0, -1, 2**31 - 1, 7], dtype=np.int64)
    assert primitive(values, pa.int64()).equals(pa.array(values, pa.int64()))
    small = values.astype(np.int32)
    assert primitive(small, pa.int32()).equals(pa.array(small, pa.int32()))
    stamps = pa.timestamp("us", tz="UTC")
    assert primitive(values, stamps).equals(pa.array(values, stamps))
    strided = values[::2]  # not contiguous: copied first
    assert primitive(strided, pa.int64()).to_pylist() == [0, 2**31 - 1]


def test_a_width_mismatch_is_refused() -> None:
    with pytest.raises(ValueError, match="int32 items do not fit Arrow int64"):
        primitive(np.zeros(3, dtype=np.int32), pa.int64())


def test_pandas_is_not_imported() -> None:
    code = (
        "import sys, numpy as np, pyarrow as pa\n"
        "from tieredstore.formats.arrownp import primitive\n"
        "primitive(np.arange(5), pa.int64())\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
