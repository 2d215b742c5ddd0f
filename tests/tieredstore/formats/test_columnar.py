"""The columnar decoder equals the reference decoder (``decode_record``, the property
functions, ``offset_msg_id_for``) on generated records, and flags exactly the records
the reference refuses."""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.strategies import names, records
from tieredstore.errors import CorruptRecordError, TruncatedDataError
from tieredstore.formats.columnar import (
    RecordColumns,
    decode_columns,
    equal_each,
    hex_strings,
    offset_msg_ids,
    repeat_string,
)
from tieredstore.formats.msgid import offset_msg_id_for
from tieredstore.formats.propcolumns import property_columns
from tieredstore.formats.record import (
    MessageRecord,
    SysFlag,
    decode_properties,
    decode_record,
    keys_of,
    msg_id_of,
    tags_of,
)

# Names that mean something, so lists of pairs repeat them and give them values.
known = st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "a"])
pair = st.tuples(st.one_of(known, names), st.sampled_from(["\x01", ""]), names)
raw_properties = st.one_of(
    st.lists(pair, max_size=6).map(
        lambda ps: "\x02".join(f"{n}{sep}{v}" for n, sep, v in ps).encode()
    ),
    st.lists(st.tuples(known, st.text(alphabet=" ab\t", max_size=8)), max_size=4).map(
        lambda ps: "".join(f"{n}\x01{v}\x02" for n, v in ps).encode()
    ),
    st.binary(max_size=40),  # invalid UTF-8 too
)


@st.composite
def varied_records(draw: st.DrawFn) -> MessageRecord:
    """Records of every shape: hosts v4/v6, any sysFlag, zlib bodies, odd properties."""
    record = draw(records())
    if draw(st.booleans()):
        record = _replace(record, properties_raw=draw(raw_properties))
    if draw(st.booleans()):
        body = zlib.compress(record.body)
        record = _replace(record, body=body, sys_flag=record.sys_flag | SysFlag.COMPRESSED,
                          body_crc=zlib.crc32(body) & 0x7FFFFFFF)  # fmt: skip
    return record


def _replace(record: MessageRecord, **changes: object) -> MessageRecord:
    from dataclasses import replace

    return replace(record, **changes)  # type: ignore[arg-type]


@st.composite
def packed(draw: st.DrawFn) -> tuple[bytes, list[int], list[int]]:
    """Records laid out in one buffer with gaps: (buffer, starts, sizes)."""
    out, starts, sizes = bytearray(), [], []
    for record in draw(st.lists(varied_records(), min_size=1, max_size=6)):
        out += draw(st.binary(max_size=7))
        raw = record.encode()
        starts.append(len(out))
        sizes.append(len(raw))
        out += raw
    out += draw(st.binary(max_size=7))
    return bytes(out), starts, sizes


def _row(cols: RecordColumns, i: int) -> dict[str, object]:
    return {
        "total_size": int(cols.total_size[i]),
        "body_crc": int(cols.body_crc[i]),
        "queue_id": int(cols.queue_id[i]),
        "flag": int(cols.flag[i]),
        "queue_offset": int(cols.queue_offset[i]),
        "physical_offset": int(cols.physical_offset[i]),
        "sys_flag": int(cols.sys_flag[i]),
        "born_timestamp": int(cols.born_timestamp[i]),
        "store_timestamp": int(cols.store_timestamp[i]),
        "reconsume_times": int(cols.reconsume_times[i]),
        "prepared_transaction_offset": int(cols.prepared_transaction_offset[i]),
        "store_host": cols.store_host[i].as_py(),
        "body": cols.body[i].as_py(),
        "topic": cols.topic[i].as_py(),
        "properties": cols.properties[i].as_py(),
    }


def _expected(r: MessageRecord) -> dict[str, object]:
    return {
        "total_size": r.total_size,
        "body_crc": r.body_crc,
        "queue_id": r.queue_id,
        "flag": r.flag,
        "queue_offset": r.queue_offset,
        "physical_offset": r.physical_offset,
        "sys_flag": r.sys_flag,
        "born_timestamp": r.born_timestamp,
        "store_timestamp": r.store_timestamp,
        "reconsume_times": r.reconsume_times,
        "prepared_transaction_offset": r.prepared_transaction_offset,
        "store_host": r.store_host.encode(),
        "body": r.body,
        "topic": r.topic.encode(),
        "properties": r.properties_raw,
    }


def _reference(data: bytes, start: int, size: int) -> MessageRecord | None:
    try:
        return decode_record(data[start : start + size], where="x")
    except (CorruptRecordError, TruncatedDataError):
        return None


def _columns(data: bytes, starts: list[int], sizes: list[int]) -> RecordColumns:
    return decode_columns(data, np.array(starts, np.int64), np.array(sizes, np.int64))


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(packed())
def test_every_field_equals_decode_record(layout: tuple[bytes, list[int], list[int]]) -> None:
    data, starts, sizes = layout
    cols = _columns(data, starts, sizes)
    assert not cols.bad.any()
    refs = [decode_record(data, s, where="x") for s in starts]
    assert [_row(cols, i) for i in range(len(refs))] == [_expected(r) for r in refs]
    ids = offset_msg_ids(cols.store_host, cols.physical_offset).to_pylist()
    assert ids == [offset_msg_id_for(r.store_host, r.physical_offset) for r in refs]


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.lists(raw_properties, max_size=8))
def test_properties_equal_the_reference_functions(raws: list[bytes]) -> None:
    got = property_columns(pa.array(raws, pa.binary()))
    props = [decode_properties(r) for r in raws]
    assert [list(p.items()) for p in props] == got.properties.to_pylist()
    assert [keys_of(p) for p in props] == got.keys.to_pylist()
    assert [tags_of(p) for p in props] == got.tags.to_pylist()
    assert [msg_id_of(p) for p in props] == got.msg_id.to_pylist()


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    packed(),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=3),
    st.lists(st.integers(0, 12), max_size=6),
)
def test_flags_exactly_the_records_decode_record_refuses(
    layout: tuple[bytes, list[int], list[int]],
    flips: list[tuple[int, int]],
    cuts: list[int],
) -> None:
    data, starts, sizes = layout
    damaged = bytearray(data)
    for at, xor in flips:
        damaged[at % len(damaged)] ^= xor
    # Shorter ranges than the records: their totalSize overruns (truncated).
    sizes = [max(0, s - (cuts[i] if i < len(cuts) else 0)) for i, s in enumerate(sizes)]
    cols = _columns(bytes(damaged), starts, sizes)
    for i, (start, size) in enumerate(zip(starts, sizes, strict=True)):
        ref = _reference(bytes(damaged), start, size)
        assert bool(cols.bad[i]) == (ref is None)
        if ref is not None:
            assert _row(cols, i) == _expected(ref)


def test_ranges_need_not_be_in_buffer_order() -> None:
    a = MessageRecord.build(topic="T", body=b"first", queue_id=0, queue_offset=0,
                            physical_offset=0, store_timestamp=1).encode()  # fmt: skip
    b = MessageRecord.build(topic="U", body=b"second", queue_id=1, queue_offset=1,
                            physical_offset=0, store_timestamp=2).encode()  # fmt: skip
    cols = _columns(a + b, [len(a), 0], [len(b), len(a)])
    assert cols.body.to_pylist() == [b"second", b"first"]
    assert cols.topic.to_pylist() == [b"U", b"T"]


def test_hex_strings_are_upper_case_hex() -> None:
    values = [b"", b"\x00\xff", bytes(range(256))]
    assert hex_strings(pa.array(values, pa.binary())).to_pylist() == [
        v.hex().upper() for v in values
    ]
    assert hex_strings(pa.array(values, pa.binary())[1:]).to_pylist() == [
        v.hex().upper() for v in values[1:]
    ]


@given(st.lists(st.binary(max_size=6), max_size=8), st.binary(max_size=6))
def test_equal_each_compares_every_value(values: list[bytes], value: bytes) -> None:
    raw = pa.array(values, pa.binary())
    assert equal_each(raw, value).tolist() == [v == value for v in values]
    assert equal_each(raw[1:], value).tolist() == [v == value for v in values[1:]]


@given(st.text(max_size=5), st.integers(0, 6))
def test_repeat_string_repeats(value: str, n: int) -> None:
    assert repeat_string(value, n).to_pylist() == [value] * n
