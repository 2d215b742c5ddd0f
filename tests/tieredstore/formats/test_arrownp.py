"""Arrow arrays over numpy arrays (equal to pa.array, no pandas import), byte ranges
gathered by one take, and fields read at many byte offsets."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tieredstore.formats.arrownp import flat_binary, gather_ranges, primitive, ranges_in_order
from tieredstore.formats.vector import gather_be, values_at


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


@st.composite
def ascending_ranges(draw: st.DrawFn) -> tuple[bytes, list[int], list[int]]:
    """A buffer and ranges in it, ascending and not overlapping (empty ones too)."""
    data = draw(st.binary(min_size=0, max_size=200))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    pairs = list(zip(cuts[::2], cuts[1::2], strict=False))
    return data, [a for a, _ in pairs], [b - a for a, b in pairs]


@given(ascending_ranges(), st.randoms(use_true_random=False))
def test_gather_ranges_joins_the_ranges_in_the_order_asked(
    case: tuple[bytes, list[int], list[int]], rnd: object
) -> None:
    data, starts, lengths = case
    s, n = np.array(starts, np.int64), np.array(lengths, np.int64)
    assert ranges_in_order(s, n, len(data))
    joined = b"".join(data[a : a + k] for a, k in zip(starts, lengths, strict=True))
    assert gather_ranges(data, s, n).to_pybytes() == joined
    order = list(range(len(starts)))
    rnd.shuffle(order)  # type: ignore[attr-defined]
    picked = b"".join(data[starts[i] : starts[i] + lengths[i]] for i in order)
    assert gather_ranges(data, s, n, np.array(order, np.int64)).to_pybytes() == picked


def test_gather_ranges_refuses_ranges_out_of_order_or_outside() -> None:
    data = bytes(range(10))
    for starts, lengths in (([4, 0], [2, 2]), ([0, 1], [3, 3]), ([8], [3]), ([-1], [2])):
        s, n = np.array(starts, np.int64), np.array(lengths, np.int64)
        assert not ranges_in_order(s, n, len(data))
        with pytest.raises(ValueError, match="must ascend"):
            gather_ranges(data, s, n)
    empty = gather_ranges(data, np.array([3], np.int64), np.array([0], np.int64))
    assert empty.to_pybytes() == b""


def test_flat_binary_of_a_slice_starts_at_its_first_value() -> None:
    array = pa.array([b"ab", b"cde", b"", b"f"], pa.binary())[1:]
    values, offsets = flat_binary(array)
    assert values.tobytes() == b"cdef"
    assert offsets.tolist() == [0, 3, 3, 4]


def test_values_at_and_gather_be_read_fields_at_any_byte() -> None:
    buf = np.frombuffer(bytes(range(16)), np.uint8)
    at = np.array([0, 5, 12], np.int64)
    assert gather_be(buf, at, 4).tolist() == [0x00010203, 0x05060708, 0x0C0D0E0F]
    assert gather_be(buf, np.array([1], np.int64), 8).tolist() == [0x0102030405060708]
    pair = np.dtype([("a", ">i2"), ("b", "u1")])
    got = values_at(buf, np.array([3, 9], np.int64), pair)
    assert got["a"].tolist() == [0x0304, 0x090A] and got["b"].tolist() == [5, 11]
    with pytest.raises(IndexError):
        values_at(buf, np.array([13], np.int64), ">i4")  # past the end: refused
    with pytest.raises(IndexError):
        values_at(buf[:2], np.array([0], np.int64), ">i4")  # nothing fits
    assert len(values_at(buf[:2], np.array([], np.int64), ">i4")) == 0
