"""Commitlog record codec: round trips, field positions, and every corruption kind."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.strategies import V4, V6, records
from tieredstore.errors import CorruptRecordError, TruncatedDataError
from tieredstore.formats.msgid import decode_offset_msg_id, offset_msg_id
from tieredstore.formats.record import (
    BLANK_MAGIC_CODE,
    CompressionType,
    MagicCode,
    MessageRecord,
    ProbeKind,
    SysFlag,
    TransactionType,
    body_crc,
    decode_properties,
    decode_record,
    encode_properties,
    probe_record,
)


@given(records())
def test_round_trip_is_byte_exact(record: MessageRecord) -> None:
    data = record.encode()
    assert len(data) == record.total_size
    decoded = decode_record(data)
    assert decoded == record
    assert decoded.encode() == data


@given(records(), st.binary(max_size=50), st.binary(max_size=50))
def test_decodes_at_any_position_in_a_buffer(
    record: MessageRecord, head: bytes, tail: bytes
) -> None:
    data = head + record.encode() + tail
    assert decode_record(data, len(head)) == record


def test_field_offsets_match_the_documented_layout() -> None:
    rec = MessageRecord.build(
        topic="TopicA",
        body=b"hello",
        queue_id=3,
        queue_offset=42,
        physical_offset=4096,
        store_timestamp=1_700_000_000_123,
        born_timestamp=1_700_000_000_100,
        properties={"TAGS": "TagA"},
        born_host=V4,
        store_host=V4,
    )
    b = rec.encode()
    assert struct.unpack_from(">i", b, 0)[0] == len(b) == 91 + 5 + 6 + len(rec.properties_raw)
    assert struct.unpack_from(">I", b, 4)[0] == 0xDAA320A7
    assert struct.unpack_from(">i", b, 8)[0] == zlib.crc32(b"hello") & 0x7FFFFFFF
    assert struct.unpack_from(">i", b, 12)[0] == 3
    assert struct.unpack_from(">q", b, 20)[0] == 42
    assert struct.unpack_from(">q", b, 28)[0] == 4096
    assert struct.unpack_from(">q", b, 40)[0] == 1_700_000_000_100
    assert struct.unpack_from(">q", b, 56)[0] == 1_700_000_000_123
    assert struct.unpack_from(">i", b, 84)[0] == 5
    assert b[88:93] == b"hello"
    assert b[93] == 6 and b[94:100] == b"TopicA"


def test_ipv6_hosts_shift_store_timestamp_and_set_sysflag() -> None:
    rec = MessageRecord.build(
        topic="T",
        body=b"",
        queue_id=0,
        queue_offset=0,
        physical_offset=0,
        store_timestamp=77,
        born_host=V6,
        store_host=V6,
    )
    b = rec.encode()
    assert rec.sys_flag & SysFlag.BORNHOST_V6 and rec.sys_flag & SysFlag.STOREHOST_V6
    assert struct.unpack_from(">q", b, 56 + 12)[0] == 77
    assert decode_record(b).store_host == V6


def test_long_topic_uses_v2_magic_and_two_byte_length() -> None:
    topic = "x" * 128
    rec = MessageRecord.build(
        topic=topic, body=b"b", queue_id=0, queue_offset=0, physical_offset=0, store_timestamp=1
    )
    assert rec.magic is MagicCode.V2
    b = rec.encode()
    assert struct.unpack_from(">I", b, 4)[0] == 0xDAA320AB
    assert decode_record(b).topic == topic
    short = MessageRecord.build(
        topic="x" * 127, body=b"", queue_id=0, queue_offset=0, physical_offset=0, store_timestamp=1
    )
    assert short.magic is MagicCode.V1


def _with_flag(body: bytes, sys_flag: int) -> MessageRecord:
    return MessageRecord.build(
        topic="T",
        body=body,
        queue_id=0,
        queue_offset=0,
        physical_offset=0,
        store_timestamp=1,
        sys_flag=sys_flag,
    )


def test_sysflag_views() -> None:
    prepared = _with_flag(b"x", TransactionType.PREPARED)
    assert prepared.transaction_type is TransactionType.PREPARED
    assert not prepared.has_cq_unit
    assert not _with_flag(b"x", TransactionType.ROLLBACK).has_cq_unit
    assert _with_flag(b"x", TransactionType.COMMIT).has_cq_unit
    legacy = _with_flag(zlib.compress(b"z" * 5000), SysFlag.COMPRESSED)
    assert legacy.compression_type is CompressionType.ZLIB
    assert legacy.decompressed_body() == b"z" * 5000


@pytest.mark.parametrize("ctype", [CompressionType.ZLIB, CompressionType.ZSTD, CompressionType.LZ4])
def test_decompresses_every_compression_type(ctype: CompressionType) -> None:
    import lz4.frame
    import zstandard

    raw = b"payload " * 1000
    packed = {
        CompressionType.ZLIB: zlib.compress,
        CompressionType.ZSTD: zstandard.ZstdCompressor().compress,
        CompressionType.LZ4: lz4.frame.compress,
    }[ctype](raw)
    flag = SysFlag.COMPRESSED | (ctype << 8)
    rec = MessageRecord.build(
        topic="T",
        body=packed,
        queue_id=0,
        queue_offset=0,
        physical_offset=0,
        store_timestamp=1,
        sys_flag=flag,
    )
    assert decode_record(rec.encode()).decompressed_body() == raw


def test_an_unknown_compression_type_is_a_corrupt_record() -> None:
    rec = MessageRecord.build(topic="T", body=b"x", queue_id=0, queue_offset=7,
                              physical_offset=0, store_timestamp=1,
                              sys_flag=SysFlag.COMPRESSED | (4 << 8))  # fmt: skip
    with pytest.raises(CorruptRecordError, match=r"unknown compression type 4 .*queue offset 7"):
        decode_record(rec.encode()).decompressed_body()


def test_properties_codec() -> None:
    props = {"TAGS": "a", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"}
    raw = encode_properties(props)
    assert raw == b"TAGS\x01a\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC\x02"
    assert decode_properties(raw) == props
    assert decode_properties(raw.rstrip(b"\x02")) == props  # no trailing separator


def test_offset_msg_id() -> None:
    rec = MessageRecord.build(
        topic="T",
        body=b"",
        queue_id=0,
        queue_offset=0,
        physical_offset=0x1234,
        store_timestamp=1,
        store_host=V4,
    )
    mid = offset_msg_id(rec)
    assert mid == "C0A8000700002A9F0000000000001234"
    assert decode_offset_msg_id(mid) == ("192.168.0.7", 10911, 0x1234)


# -- corruption: each kind gives its exact error, naming where -------------------------


def _good() -> bytes:
    return MessageRecord.build(
        topic="T",
        body=b"hello world",
        queue_id=0,
        queue_offset=0,
        physical_offset=0,
        store_timestamp=1,
    ).encode()


def test_bad_magic() -> None:
    b = bytearray(_good())
    struct.pack_into(">i", b, 4, 0x12345678)
    with pytest.raises(CorruptRecordError, match=r"bad magic code 0x12345678 \(f@0\)"):
        decode_record(b, where="f")


def test_bad_crc() -> None:
    b = bytearray(_good())
    b[88] ^= 0xFF
    with pytest.raises(CorruptRecordError, match=r"body CRC .* != stored bodyCRC .* \(f@0\)"):
        decode_record(b, where="f")
    assert decode_record(b, check_crc=False).body[0] == b[88]


def test_length_mismatch() -> None:
    b = bytearray(_good() + b"\0\0\0\0")
    struct.pack_into(">i", b, 0, len(b))
    with pytest.raises(CorruptRecordError, match=r"fields end at .*, totalSize says .* \(f@0\)"):
        decode_record(b, where="f")


def test_body_length_overrun() -> None:
    b = bytearray(_good())
    struct.pack_into(">i", b, 84, 10_000)
    with pytest.raises(CorruptRecordError, match="bodyLength 10000 overruns"):
        decode_record(b, where="f")


def test_truncated_tail() -> None:
    b = _good()
    with pytest.raises(
        TruncatedDataError, match=rf"record of {len(b)} bytes but only 50 left \(f@0\)"
    ):
        decode_record(b[:50], where="f")
    with pytest.raises(TruncatedDataError, match=r"header needs 48 bytes, 10 left \(f@0\)"):
        decode_record(b[:10], where="f")


def test_probe_classifies_blank_zero_torn_and_record() -> None:
    good = _good()
    assert probe_record(good, 0, where="f").kind is ProbeKind.RECORD
    blank = struct.pack(">ii", 100, BLANK_MAGIC_CODE) + bytes(92)
    assert probe_record(blank, 0, where="f").kind is ProbeKind.BLANK
    assert probe_record(bytes(64), 0, where="f").kind is ProbeKind.END
    # A record whose last bytes are not copied yet (zeros): topic and properties unwritten.
    torn_tail = probe_record(good[:-3] + bytes(100), 0, where="f")
    assert torn_tail.kind is ProbeKind.END and "topic not written" in torn_tail.reason
    # Zeros inside the body: the body CRC catches it.
    torn_body = probe_record(good[:90] + bytes(3) + good[93:], 0, where="f")
    assert torn_body.kind is ProbeKind.END and "CRC" in torn_body.reason
    assert probe_record(good[:30], 0, where="f").kind is ProbeKind.END


@given(st.binary(max_size=300), st.integers(0, 50))
def test_decoder_never_raises_anything_but_our_errors(data: bytes, pos: int) -> None:
    try:
        decode_record(data, min(pos, len(data)), where="fuzz")
    except (CorruptRecordError, TruncatedDataError) as exc:
        assert "fuzz@" in str(exc)  # noqa: PT017 - any input, so raises is not certain


def test_body_crc_clears_top_bit() -> None:
    for body in (b"", b"a", b"\xff" * 100):
        assert body_crc(body) == zlib.crc32(body) & 0x7FFFFFFF
