"""Consume-queue units, checkpoint, topics.json and tagsCode."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tieredstore.errors import CorruptDataError, StoreNotFoundError, TruncatedDataError
from tieredstore.formats.checkpoint import Checkpoint, read_checkpoint
from tieredstore.formats.consumequeue import (
    FILLER_SIZE,
    decode_units,
    encode_units,
    filler_mask,
    make_units,
    zero_mask,
)
from tieredstore.formats.tags import java_string_hashcode, tags_code
from tieredstore.formats.topics import TopicConfig, decode_topics, encode_topics, read_topics

i64 = st.integers(-(2**63), 2**63 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)


@given(st.lists(st.tuples(i64, i32, i64), max_size=50))
def test_cq_units_round_trip(rows: list[tuple[int, int, int]]) -> None:
    raw = b"".join(struct.pack(">qiq", *r) for r in rows)
    units = decode_units(raw)
    assert [
        (int(u["commitlog_offset"]), int(u["size"]), int(u["tags_code"])) for u in units
    ] == rows
    assert encode_units(units) == raw
    offsets, sizes, codes = ([r[i] for r in rows] for i in range(3))
    assert encode_units(make_units(offsets, sizes, codes)) == raw


def test_cq_filler_and_zero_units() -> None:
    raw = struct.pack(">qiq", 0, FILLER_SIZE, 0) + bytes(20) + struct.pack(">qiq", 0, 91, 5)
    units = decode_units(raw)
    assert filler_mask(units).tolist() == [True, False, False]
    assert zero_mask(units).tolist() == [False, True, False]


@given(
    st.lists(
        st.tuples(
            st.sampled_from([0, 1, -1, 2**40]),
            st.sampled_from([0, 7, -1, FILLER_SIZE]),
            st.sampled_from([0, 3, -(2**63)]),
        ),
        max_size=40,
    ),
    st.integers(1, 3),
    st.booleans(),
)
def test_zero_and_filler_masks_follow_the_fields(
    rows: list[tuple[int, int, int]], step: int, native: bool
) -> None:
    """Whole-unit compares (contiguous units as decoded) and field compares (a strided
    view, or units in the machine's byte order) agree with the definitions."""
    units = decode_units(b"".join(struct.pack(">qiq", *r) for r in rows))
    if native:
        units = units.astype(units.dtype.newbyteorder("="))
    units = units[::step]
    kept = rows[::step]
    assert zero_mask(units).tolist() == [r == (0, 0, 0) for r in kept]
    assert filler_mask(units).tolist() == [r == (0, FILLER_SIZE, 0) for r in kept]


def test_cq_truncated() -> None:
    with pytest.raises(TruncatedDataError, match=r"not a multiple of 20 \(cq@40\)"):
        decode_units(bytes(45), where="cq")


@given(st.tuples(*[st.integers(0, 2**62)] * 5))
def test_checkpoint_round_trip(fields: tuple[int, int, int, int, int]) -> None:
    cp = Checkpoint(*fields)
    assert Checkpoint.decode(cp.encode() + bytes(4056)) == cp


def test_checkpoint_errors(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "checkpoint"  # type: ignore[operator]
    with pytest.raises(StoreNotFoundError, match="cannot read checkpoint"):
        read_checkpoint(path)
    path.write_bytes(bytes(16))
    with pytest.raises(TruncatedDataError, match=r"checkpoint is 16 bytes, needs 40"):
        read_checkpoint(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("a", 97), ("TagA", 2598919), ("hello", 99162322), ("\U0001f600", 1772899)],
)
def test_java_string_hashcode(text: str, expected: int) -> None:
    assert java_string_hashcode(text) == expected


def test_tags_code_wraps_to_signed_and_none_is_zero() -> None:
    assert tags_code(None) == 0 and tags_code("") == 0
    long = "TagWithAVeryLongNameThatOverflows"
    h = 0
    for ch in long:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    assert tags_code(long) == (h - 2**32 if h >= 2**31 else h)
    assert -(2**31) <= tags_code(long) < 2**31


def test_topics_round_trip_and_errors(tmp_path: pytest.TempPathFactory) -> None:
    table = {"A": TopicConfig("A", 4, 4), "%RETRY%g": TopicConfig("%RETRY%g", 1, 1, order=True)}
    assert decode_topics(encode_topics(table)) == table
    with pytest.raises(CorruptDataError, match="not valid JSON"):
        decode_topics(b"{", where="t.json")
    with pytest.raises(CorruptDataError, match="no topicConfigTable"):
        decode_topics(b"{}", where="t.json")
    with pytest.raises(CorruptDataError, match="topic 'A' has a bad field"):
        decode_topics(b'{"topicConfigTable": {"A": {"readQueueNums": "x"}}}')
    assert read_topics(tmp_path / "missing.json") == {}  # type: ignore[operator]


def test_units_are_a_zero_copy_view() -> None:
    raw = bytearray(struct.pack(">qiq", 1, 2, 3))
    units = decode_units(raw)
    raw[7] = 9
    assert int(units[0]["commitlog_offset"]) == 9
    assert isinstance(units, np.ndarray)
