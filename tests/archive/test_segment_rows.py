"""Archive batches (decoded column by column) against ``read``'s per-record path, without
Spark: every row of every segment, of the synthetic stores and of the golden store the
real broker wrote, and the same error for a damaged record."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.cold.history import Committed, Span
from tieredstore.cold.reader import ColdMessage, decode_messages
from tieredstore.errors import CorruptDataError, CorruptRecordError
from tieredstore.export.rows import SegmentSlice, TimeWindow
from tieredstore.formats.record import (
    HEAD_DTYPE,
    STORE_TIMESTAMP_AT_V4,
    STORE_TIMESTAMP_AT_V6,
    SYS_FLAG_AT,
    SysFlag,
)

from .conftest import BROKER_B, Archive, Row, archive_row

BORN_TIMESTAMP_AT: int = HEAD_DTYPE.fields["born_timestamp"][1]  # type: ignore[index]


def _bytes(cold: Path, span: Span) -> bytes:
    """A span's bytes: a segment's whole object, or a batch slice's range of its batch."""
    return (cold / span.key).read_bytes()[span.at : span.end]


def _slice(cold: Path, m: Committed, commit_log: bytes | None = None) -> SegmentSlice:
    cq = _bytes(cold, m.consume_queue)
    if commit_log is None:
        return SegmentSlice.whole(m, _bytes(cold, m.commit_log), cq)
    # A damaged commit log would fail the digest check of whole(): check units only.
    units = SegmentSlice.whole(m, _bytes(cold, m.commit_log), cq).units
    return SegmentSlice.part(m, m.start_offset, units, commit_log)


def _reference(piece: SegmentSlice, broker: str) -> list[Row]:
    messages = decode_messages(piece.link, piece.offset, piece.units, piece.data,
                               piece.data_base)  # fmt: skip
    return [archive_row(m.to_json(), cluster=CLUSTER, broker=broker) for m in messages]


def _rows(piece: SegmentSlice, broker: str, **kwargs: object) -> list[Row]:
    batches = piece.batches(cluster=CLUSTER, broker=broker, **kwargs)  # type: ignore[arg-type]
    return [r | {"properties": dict(r["properties"])} for b in batches for r in b.to_pylist()]


@pytest.mark.slow
@pytest.mark.parametrize("broker", [BROKER, BROKER_B])
def test_synth_segments_equal_the_record_path(archive: Archive, broker: str) -> None:
    links = archive.links(broker)
    compressed = 0
    for m in links:
        piece = _slice(archive.cold, m)
        expected = _reference(piece, broker)
        assert _rows(piece, broker) == expected
        assert _rows(piece, broker, rows=7) == expected  # batch edges anywhere
        compressed += sum(
            bool(piece.units.size and r["sys_flag"] & SysFlag.COMPRESSED) for r in expected
        )
    assert compressed == 0  # the consumer's sysFlag: COMPRESSED cleared
    if broker == BROKER:  # the store that has them: zlib bodies, v6 hosts, long topics
        assert any(len(m.topic) > 127 for m in links)


def test_golden_segments_equal_the_record_path(golden: Archive) -> None:
    total = 0
    for m in golden.links():
        piece = _slice(golden.cold, m)
        expected = _reference(piece, BROKER)
        assert _rows(piece, BROKER) == expected
        total += len(expected)
    assert total > 600


def test_a_time_window_decodes_only_its_rows(archive: Archive) -> None:
    m = max(archive.links(), key=lambda m: m.message_count)
    piece = _slice(archive.cold, m)
    expected = _reference(piece, BROKER)
    stamps = sorted({r["store_timestamp"] for r in expected})
    lo, hi = stamps[len(stamps) // 3], stamps[2 * len(stamps) // 3]
    ms = [int(s.timestamp() * 1000) for s in (lo, hi)]
    got = _rows(piece, BROKER, window=TimeWindow(ms[0], ms[1]), rows=5)
    assert got == [r for r in expected if lo <= r["store_timestamp"] <= hi]
    assert 0 < len(got) < len(expected)


@pytest.mark.slow
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_a_damaged_record_gives_the_error_read_gives(archive: Archive, data: st.DataObject) -> None:
    links = sorted(archive.links(), key=lambda m: m.history_key)
    m = links[data.draw(st.integers(0, len(links) - 1))]
    commit_log = bytearray(_bytes(archive.cold, m.commit_log))
    at = data.draw(st.integers(0, len(commit_log) - 1))
    commit_log[at] ^= data.draw(st.integers(1, 255))
    piece = _slice(archive.cold, m, bytes(commit_log))
    try:
        messages = decode_messages(m, piece.offset, piece.units, piece.data, piece.data_base)
    except CorruptDataError as exc:
        error: CorruptDataError = exc
    else:
        if any(not _in_years(x) for x in messages):
            with pytest.raises(CorruptRecordError, match=r"Timestamp field -?\d+ ms lies outside"):
                _rows(piece, BROKER)
        else:
            _same_rows(piece, messages)
        return
    with pytest.raises(type(error)) as got:
        _rows(piece, BROKER)
    assert str(got.value) == str(error)
    assert "\n" not in str(got.value)


def _in_years(message: ColdMessage) -> bool:
    """Whether both times of ``message`` lie in years 1 to 9999 (what a column holds)."""
    lo, hi = -62_135_596_800_000, 253_402_300_799_999
    return all(lo <= t <= hi for t in (message.record.store_timestamp,
                                       message.record.born_timestamp))  # fmt: skip


def _same_rows(piece: SegmentSlice, messages: list[ColdMessage]) -> None:
    # A byte no check covers (a flag, a timestamp...): both paths give the same rows.
    # Times compared as epoch ms (a damaged one may lie in years datetime cannot hold).
    stamps = ("store_timestamp", "born_timestamp")
    batches = list(piece.batches(cluster=CLUSTER, broker=BROKER))
    for name, field in (
        ("store_timestamp", "store_timestamp"),
        ("born_timestamp", "born_timestamp"),
    ):
        got_ms = [v // 1000 for b in batches for v in b[name].cast(pa.int64()).to_pylist()]
        assert got_ms == [getattr(x.record, field) for x in messages]
    docs = [x.to_json() | {"storeTimestamp": 0, "bornTimestamp": 0} for x in messages]
    expected = [archive_row(d, cluster=CLUSTER, broker=BROKER) for d in docs]
    rows = [b.drop_columns(list(stamps)).to_pylist() for b in batches]
    got = [r | {"properties": dict(r["properties"])} for part in rows for r in part]
    assert got == [{k: v for k, v in r.items() if k not in stamps} for r in expected]


def test_a_record_that_is_not_its_units_is_refused(archive: Archive) -> None:
    m = max(archive.links(), key=lambda m: m.message_count)
    piece = _slice(archive.cold, m)
    # Swap in the queue offset of another record: queueOffset field != the unit's offset.
    commit_log = bytearray(piece.data)
    pos = int(piece.units["commitlog_offset"][3]) - piece.data_base
    commit_log[pos + 20 : pos + 28] = (10**9).to_bytes(8, "big")
    damaged = _slice(archive.cold, m, bytes(commit_log))
    with pytest.raises(CorruptDataError, match=r"queueOffset field 1000000000, expected"):
        _rows(damaged, BROKER)


@pytest.mark.parametrize("name", ["bornTimestamp", "storeTimestamp"])
def test_a_time_no_column_can_hold_is_refused_not_wrapped(archive: Archive, name: str) -> None:
    # The top byte of an 8-byte time flipped: 2^56 ms on, far beyond year 9999, where
    # microseconds overflow int64. read prints it; the archive must refuse it.
    m = max(archive.links(), key=lambda m: m.message_count)
    piece = _slice(archive.cold, m)
    commit_log = bytearray(piece.data)
    pos = int(piece.units["commitlog_offset"][2]) - piece.data_base
    v6 = int.from_bytes(commit_log[pos + SYS_FLAG_AT : pos + SYS_FLAG_AT + 4]) & SysFlag.BORNHOST_V6
    store_at = STORE_TIMESTAMP_AT_V6 if v6 else STORE_TIMESTAMP_AT_V4
    commit_log[pos + (store_at if name == "storeTimestamp" else BORN_TIMESTAMP_AT)] ^= 0x01
    damaged = _slice(archive.cold, m, bytes(commit_log))
    (message,) = decode_messages(m, m.start_offset + 2, damaged.units[2:3], damaged.data,
                                 damaged.data_base)  # fmt: skip
    assert not _in_years(message)
    at = int(piece.units["commitlog_offset"][2]) - m.cl_base
    with pytest.raises(CorruptRecordError) as got:
        _rows(damaged, BROKER)
    assert str(got.value).startswith(f"record of queue offset {m.start_offset + 2}: {name} field ")
    assert str(got.value).endswith(f" ms lies outside years 1 to 9999 ({m.commit_log_key}@{at})")
