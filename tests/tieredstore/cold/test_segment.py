"""Segment codec: building COMMIT_LOG / CONSUME_QUEUE objects and verifying them."""

from __future__ import annotations

import ipaddress
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.stores.oracle import SegmentBuilder, build_segment
from tests.support.stores.segments import (
    ATTEMPT,
    T0,
    WRITER,
    HotBatch,
    chain,
    hot_batch,
    segment_of,
)
from tieredstore.cold.digests import digest
from tieredstore.cold.layout import QueuePath
from tieredstore.cold.segment import (
    Segment,
    parse_cq_object,
    verify_objects,
    verify_record_pointers,
    verify_segment,
)
from tieredstore.errors import (
    CorruptRecordError,
    CorruptUnitError,
    DigestMismatchError,
    SizeMismatchError,
    TruncatedDataError,
)
from tieredstore.formats.consumequeue import decode_units, encode_units, make_units
from tieredstore.formats.record import HostPort, MessageRecord, decode_record

QUEUE = QueuePath("DefaultCluster", "broker-a", "TopicTest", 2)


def _positions(sizes: list[int]) -> list[int]:
    return [sum(sizes[:i]) for i in range(len(sizes))]


def test_commit_log_is_hot_records_with_cold_physical_offsets() -> None:
    batch = hot_batch(QUEUE.topic, QUEUE.queue_id, 10, 6)
    seg = segment_of(QUEUE, batch, cl_base=5000)
    cl = seg.commit_log
    sizes = [len(r) for r in batch.records]
    assert len(cl) == sum(sizes)
    for pos, hot in zip(_positions(sizes), batch.records, strict=True):
        cold = cl[pos : pos + len(hot)]
        assert cold[:28] == hot[:28]
        assert cold[36:] == hot[36:]
        assert struct.unpack(">q", cold[28:36])[0] == 5000 + pos
        record = decode_record(cold)  # still a valid record, CRC included
        assert record.physical_offset == 5000 + pos


def test_consume_queue_units_point_at_cold_records() -> None:
    batch = hot_batch(QUEUE.topic, QUEUE.queue_id, 10, 6)
    seg = segment_of(QUEUE, batch, cl_base=5000)
    units = decode_units(seg.consume_queue)
    sizes = [len(r) for r in batch.records]
    assert units["commitlog_offset"].tolist() == [5000 + p for p in _positions(sizes)]
    assert units["size"].tolist() == batch.units["size"].tolist()
    assert units["tags_code"].tolist() == batch.units["tags_code"].tolist()


def test_manifest_describes_the_objects() -> None:
    batch = hot_batch(QUEUE.topic, QUEUE.queue_id, 10, 6, step_ms=7)
    seg = segment_of(QUEUE, batch, cl_base=5000, lease_epoch=3, created_at_ms=99)
    m = seg.manifest
    assert (m.start_offset, m.end_offset, m.message_count) == (10, 16, 6)
    assert (m.cl_base, m.cl_end) == (5000, 5000 + len(seg.commit_log))
    assert (m.min_store_timestamp, m.max_store_timestamp) == (T0 + 70, T0 + 15 * 7)
    assert m.commit_log.size == len(seg.commit_log)
    assert m.commit_log.digest == digest(seg.commit_log)
    assert m.consume_queue.size == 120
    assert m.consume_queue.digest == digest(seg.consume_queue)
    assert (m.writer_id, m.lease_epoch, m.created_at_ms) == (WRITER, 3, 99)
    assert (m.cluster, m.broker, m.topic, m.queue_id) == (
        "DefaultCluster", "broker-a", "TopicTest", 2,
    )  # fmt: skip


def test_next_segment_continues_both_address_spaces() -> None:
    first, second = chain(QUEUE, [3, 4])
    assert second.manifest.start_offset == first.manifest.end_offset
    assert second.manifest.cl_base == first.manifest.cl_end
    assert decode_units(second.consume_queue)["commitlog_offset"][0] == first.manifest.cl_end
    verify_segment(second.manifest, second.commit_log, second.consume_queue)


def test_add_one_by_one_equals_extend() -> None:
    batch = hot_batch(QUEUE.topic, QUEUE.queue_id, 0, 5)
    builder = SegmentBuilder(QUEUE, start_offset=0, cl_base=0)
    for i, (rec, unit) in enumerate(zip(batch.records, batch.units, strict=True)):
        builder.add(i, rec, int(unit["size"]), int(unit["tags_code"]), batch.timestamps[i])
    one_by_one = builder.seal(
        writer_id=WRITER, lease_epoch=1, created_at_ms=T0 + 60_000, attempt=ATTEMPT
    )
    assert one_by_one == segment_of(QUEUE, batch, cl_base=0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=6), st.booleans())
def test_any_split_into_batches_builds_the_same_segment(cuts: list[int], single: bool) -> None:
    n = sum(cuts)
    batch = hot_batch(QUEUE.topic, QUEUE.queue_id, 100, n)
    builder = SegmentBuilder(QUEUE, start_offset=100, cl_base=77)
    at = 0
    for k in cuts:
        part = slice(at, at + k)
        if single and k == 1:
            u = batch.units[at]
            builder.add(100 + at, batch.records[at], int(u["size"]), int(u["tags_code"]),
                        batch.timestamps[at])  # fmt: skip
        else:
            builder.extend(batch.records[part], batch.units[part])
        at += k
        assert builder.count == at
        assert builder.next_offset == 100 + at
        assert builder.nbytes == sum(len(r) for r in batch.records[:at])
        assert builder.cl_end == 77 + builder.nbytes
    assert builder.min_store_timestamp == min(batch.timestamps)
    assert builder.max_store_timestamp == max(batch.timestamps)
    seg = builder.seal(writer_id=WRITER, lease_epoch=1, created_at_ms=T0 + 60_000, attempt=ATTEMPT)
    assert seg == segment_of(QUEUE, batch, cl_base=77)


def test_ipv6_born_host_store_timestamp_is_read_at_68() -> None:
    v6 = HostPort(ipaddress.IPv6Address("fd00::1"), 1234)
    recs = [
        MessageRecord.build(topic="T", body=b"abc", queue_id=0, queue_offset=q,
                            physical_offset=q * 500, store_timestamp=T0 + 1000 * q,
                            born_host=v6).encode()
        for q in range(3)
    ]  # fmt: skip
    units = make_units([q * 500 for q in range(3)], [len(r) for r in recs], [0, 0, 0])
    seg = build_segment(QueuePath("c", "b", "T", 0), start_offset=0, cl_base=0, records=recs,
                        units=units, writer_id="w", lease_epoch=1, created_at_ms=0)  # fmt: skip
    assert (seg.manifest.min_store_timestamp, seg.manifest.max_store_timestamp) == (T0, T0 + 2000)


# -- what the builder refuses ------------------------------------------------------------


def _builder(start: int = 0) -> SegmentBuilder:
    return SegmentBuilder(QUEUE, start_offset=start, cl_base=0)


def test_empty_builder_has_no_segment_and_no_timestamps() -> None:
    builder = _builder()
    assert (builder.count, builder.nbytes) == (0, 0)
    with pytest.raises(ValueError, match="no store timestamps"):
        _ = builder.min_store_timestamp
    with pytest.raises(ValueError, match="no store timestamps"):
        builder.seal(writer_id="w", lease_epoch=1, created_at_ms=0)


def test_sealed_builder_is_spent() -> None:
    batch = hot_batch(QUEUE.topic, QUEUE.queue_id, 0, 2)
    builder = _builder()
    builder.extend(batch.records, batch.units)
    builder.seal(writer_id="w", lease_epoch=1, created_at_ms=0)
    with pytest.raises(ValueError, match="sealed"):
        builder.extend(batch.records, batch.units)
    with pytest.raises(ValueError, match="sealed"):
        builder.seal(writer_id="w", lease_epoch=1, created_at_ms=0)


def test_records_must_be_contiguous() -> None:
    batch = hot_batch(QUEUE.topic, QUEUE.queue_id, 0, 2)
    builder = _builder()
    u = batch.units[1]
    with pytest.raises(ValueError, match="queue offset 1 added, expected 0"):
        builder.add(1, batch.records[1], int(u["size"]), 0, batch.timestamps[1])
    with pytest.raises(ValueError, match="2 records but 1 CQ units"):
        builder.extend(batch.records, batch.units[:1])


def _patched(record: bytes, at: int, fmt: str, value: int) -> bytes:
    buf = bytearray(record)
    struct.pack_into(fmt, buf, at, value)
    return bytes(buf)


@pytest.mark.parametrize(
    ("patch", "complaint"),
    [
        ((20, ">q", 99), "queueOffset field 99, expected 1"),
        ((0, ">i", 1), "totalSize field 1"),
        ((4, ">i", 0x12345678), "bad magic code 0x12345678"),
    ],
)
def test_hot_record_disagreeing_with_its_unit_is_refused(
    patch: tuple[int, str, int], complaint: str
) -> None:
    batch = hot_batch(QUEUE.topic, QUEUE.queue_id, 0, 3)
    records = list(batch.records)
    records[1] = _patched(records[1], *patch)
    builder = _builder()
    with pytest.raises(CorruptRecordError, match=complaint) as info:
        builder.extend(records, batch.units)
    assert info.value.where == "hot record of TopicTest/2 at queue offset 1"
    assert builder.count == 0 and builder.nbytes == 0  # nothing half-appended
    builder.add(0, batch.records[0], int(batch.units[0]["size"]), 0, batch.timestamps[0])
    with pytest.raises(CorruptRecordError, match=complaint):
        builder.add(1, records[1], int(batch.units[1]["size"]), 0, batch.timestamps[1])
    assert builder.count == 1


def test_size_must_match_the_unit_and_the_minimum() -> None:
    batch = hot_batch(QUEUE.topic, QUEUE.queue_id, 0, 2)
    units = batch.units.copy()
    units["size"][1] += 1
    with pytest.raises(CorruptRecordError, match="its CQ unit says"):
        _builder().extend(batch.records, units)
    with pytest.raises(CorruptRecordError, match="minimum 91"):
        _builder().add(0, b"\x00" * 50, 50, 0, 0)


def test_add_checks_the_store_timestamp() -> None:
    batch = hot_batch(QUEUE.topic, QUEUE.queue_id, 0, 1)
    size = len(batch.records[0])
    with pytest.raises(CorruptRecordError, match="storeTimestamp field"):
        _builder().add(0, batch.records[0], size, 0, batch.timestamps[0] + 1)


# -- verification --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seg() -> Segment:
    return chain(QUEUE, [2, 5])[1]


def test_verify_accepts_what_the_builder_wrote(seg: Segment) -> None:
    units = verify_segment(seg.manifest, seg.commit_log, seg.consume_queue)
    assert len(units) == 5


def test_size_mismatch_names_the_object(seg: Segment) -> None:
    m = seg.manifest
    with pytest.raises(SizeMismatchError, match="is 10 bytes, its manifest says") as info:
        verify_objects(m, seg.commit_log[:10], seg.consume_queue, where="")
    assert info.value.where == m.commit_log_key
    with pytest.raises(SizeMismatchError) as info:
        verify_objects(m, seg.commit_log, seg.consume_queue + b"x", where="s3://bucket/root/")
    assert info.value.where == f"s3://bucket/root/{m.consume_queue_key}"


def test_digest_mismatch_names_the_object(seg: Segment) -> None:
    m = seg.manifest
    flipped = bytearray(seg.commit_log)
    flipped[100] ^= 1
    with pytest.raises(DigestMismatchError, match="object crc32c is ") as info:
        verify_objects(m, bytes(flipped), seg.consume_queue, where="")
    assert info.value.where == m.commit_log_key
    cq = bytearray(seg.consume_queue)
    cq[-1] ^= 1
    with pytest.raises(DigestMismatchError) as info:
        verify_segment(m, seg.commit_log, bytes(cq))
    assert info.value.where == m.consume_queue_key


def test_partial_cq_unit_is_truncated_data() -> None:
    with pytest.raises(TruncatedDataError) as info:
        parse_cq_object(b"\x00" * 45, where="k")
    assert info.value.where == "k@40"


def _units(seg: Segment) -> np.ndarray:
    return decode_units(seg.consume_queue).copy()


def test_unit_pointing_elsewhere_is_corrupt_unit(seg: Segment) -> None:
    units = _units(seg)
    units["commitlog_offset"][3] += 1
    with pytest.raises(CorruptUnitError, match="queue offset 5 points at cold offset") as info:
        verify_record_pointers(seg.manifest, units, seg.commit_log)
    assert info.value.where == f"{seg.manifest.consume_queue_key}@60"


def test_unit_sizes_must_cover_the_commit_log(seg: Segment) -> None:
    with pytest.raises(CorruptUnitError, match="units cover"):
        verify_record_pointers(seg.manifest, _units(seg), seg.commit_log + b"\x00" * 8)
    with pytest.raises(CorruptUnitError, match="4 units, manifest says 5"):
        verify_record_pointers(seg.manifest, _units(seg)[:4], seg.commit_log)


@pytest.mark.parametrize(
    ("at", "fmt", "value", "complaint"),
    [
        (20, ">q", 1234, "queueOffset field 1234, expected 5"),
        (28, ">q", 0, "physicalOffset field 0, expected"),
        (0, ">i", 7, "totalSize field 7"),
        (4, ">i", 0, "queue offset 5: bad magic code 0x00000000"),
    ],
)
def test_record_disagreeing_with_its_unit_is_corrupt_record(
    seg: Segment, at: int, fmt: str, value: int, complaint: str
) -> None:
    units = _units(seg)
    pos = int(units["commitlog_offset"][3]) - seg.manifest.cl_base
    cl = bytearray(seg.commit_log)
    struct.pack_into(fmt, cl, pos + at, value)
    with pytest.raises(CorruptRecordError, match=complaint) as info:
        verify_record_pointers(seg.manifest, units, bytes(cl), where="memory://x")
    assert info.value.where == f"memory://x/{seg.manifest.commit_log_key}@{pos}"


def test_cq_encoding_is_twenty_byte_big_endian_units(seg: Segment) -> None:
    first = seg.consume_queue[:20]
    offset, size, tags = struct.unpack(">qiq", first)
    assert offset == seg.manifest.cl_base
    assert encode_units(decode_units(seg.consume_queue)) == seg.consume_queue
    assert size == len(hot_batch(QUEUE.topic, QUEUE.queue_id, 2, 1).records[0])
    assert tags == int(hot_batch(QUEUE.topic, QUEUE.queue_id, 2, 1).units["tags_code"][0])


def test_hot_batch_helper_is_consistent() -> None:
    batch: HotBatch = hot_batch("T", 0, 3, 4)
    for q, rec in enumerate(batch.records, start=3):
        r = decode_record(rec)
        assert (r.queue_offset, r.store_timestamp, r.total_size) == (q, T0 + 10 * q, len(rec))
