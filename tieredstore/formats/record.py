"""Commitlog records: decode, encode, and probe (docs/format.md).

Layout (big-endian; offsets for IPv4 hosts)::

    0  totalSize i32        28 physicalOffset i64    ..  reconsumeTimes i32
    4  magicCode i32        36 sysFlag i32           ..  preparedTransactionOffset i64
    8  bodyCRC i32          40 bornTimestamp i64     ..  bodyLength i32, body
    12 queueId i32          48 bornHost ip+port      ..  topicLength i8 (v1) / i16 (v2), topic
    16 flag i32             ..  storeTimestamp i64   ..  propertiesLength i16, properties
    20 queueOffset i64      ..  storeHost ip+port

A record is byte-exact: ``decode_record(b).encode() == b`` for every valid record.
Properties are kept as their raw bytes (``properties_raw``) so the encoding never changes
(order and trailing separator included); :attr:`MessageRecord.properties` parses them.
"""

from __future__ import annotations

import enum
import ipaddress
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

import numpy as np

from tieredstore.errors import CorruptRecordError, TruncatedDataError

__all__ = [
    "BLANK_MAGIC_CODE",
    "BODY_LENGTH_AT_V4",
    "END_FILE_MIN_BLANK_LENGTH",
    "HEAD_DTYPE",
    "HEAD_PROBE_SIZE",
    "HEAD_SIZE",
    "HOST_V4_SIZE",
    "HOST_V6_SIZE",
    "MAGIC_AT",
    "MAGIC_CODE_V1",
    "MAGIC_CODE_V2",
    "PHYSICAL_OFFSET_AT",
    "PHYSICAL_OFFSET_SLICE",
    "QUEUE_OFFSET_AT",
    "STORE_TIMESTAMP_AT_V4",
    "STORE_TIMESTAMP_AT_V6",
    "SYS_FLAG_AT",
    "TAIL_SIZE",
    "TOTAL_SIZE_AT",
    "CompressionType",
    "HostPort",
    "MagicCode",
    "MessageRecord",
    "Probe",
    "ProbeKind",
    "SysFlag",
    "TransactionType",
    "body_crc",
    "decode_properties",
    "decode_record",
    "encode_properties",
    "keys_of",
    "msg_id_of",
    "probe_record",
    "same_outside_physical_offset",
    "tags_of",
]

MAGIC_CODE_V1: Final = -626843481  # 0xDAA320A7
MAGIC_CODE_V2: Final = -626843477  # 0xDAA320AB
BLANK_MAGIC_CODE: Final = -875286124  # 0xCBD43194
#: The broker writes a record only if ``totalSize + 8`` fits; otherwise an 8-byte filler.
END_FILE_MIN_BLANK_LENGTH: Final = 8
#: The fixed head of every record, totalSize .. bornTimestamp: 48 bytes, big-endian. The
#: one description of the record layout's fixed fields; the offsets below come from it.
HEAD_DTYPE: Final = np.dtype(
    [("total_size", ">i4"), ("magic", ">i4"), ("body_crc", ">i4"), ("queue_id", ">i4"),
     ("flag", ">i4"), ("queue_offset", ">i8"), ("physical_offset", ">i8"),
     ("sys_flag", ">i4"), ("born_timestamp", ">i8")]
)  # fmt: skip
HEAD_SIZE: Final = HEAD_DTYPE.itemsize


def _at(field: str) -> int:
    offset: int = HEAD_DTYPE.fields[field][1]  # type: ignore[index]
    return offset


TOTAL_SIZE_AT: Final = _at("total_size")
MAGIC_AT: Final = _at("magic")
QUEUE_OFFSET_AT: Final = _at("queue_offset")
PHYSICAL_OFFSET_AT: Final = _at("physical_offset")
SYS_FLAG_AT: Final = _at("sys_flag")
#: The born host follows the head: IPv4 address + port, or IPv6 (sysFlag BORNHOST_V6).
HOST_V4_SIZE: Final = 8
HOST_V6_SIZE: Final = 20
STORE_TIMESTAMP_AT_V4: Final = HEAD_SIZE + HOST_V4_SIZE
STORE_TIMESTAMP_AT_V6: Final = HEAD_SIZE + HOST_V6_SIZE
#: Bytes from a record's start that hold every field up to its storeTimestamp in any
#: layout (76 with an IPv6 born host; every real record is longer).
HEAD_PROBE_SIZE: Final = 80
#: reconsumeTimes, preparedTransactionOffset, bodyLength: after the store host.
TAIL_SIZE: Final = 16
#: Where bodyLength sits when both hosts are IPv4; each IPv6 host moves it by
#: ``HOST_V6_SIZE - HOST_V4_SIZE``.
BODY_LENGTH_AT_V4: Final = STORE_TIMESTAMP_AT_V4 + 8 + HOST_V4_SIZE + TAIL_SIZE - 4
#: Bytes [28, 36): the only bytes a cold record may differ from its hot original in.
PHYSICAL_OFFSET_SLICE: Final = slice(PHYSICAL_OFFSET_AT, PHYSICAL_OFFSET_AT + 8)

#: Raw properties are ``name\x01value\x02`` pairs; ``KEYS`` holds keys split on spaces.
NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"
#: Properties the broker and clients give a meaning (MessageConst in RocketMQ).
PROPERTY_TAGS: Final = "TAGS"
PROPERTY_KEYS: Final = "KEYS"
PROPERTY_UNIQ_KEY: Final = "UNIQ_KEY"
KEY_SEPARATOR: Final = " "

_HEAD = struct.Struct(">iiiiiqqiq")  # HEAD_DTYPE, for one record at a time
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_TAIL = struct.Struct(">iqi")  # reconsumeTimes, preparedTransactionOffset, bodyLength
assert _HEAD.size == HEAD_SIZE and _TAIL.size == TAIL_SIZE


def same_outside_physical_offset(hot: bytes | memoryview, cold: bytes | memoryview) -> bool:
    """Whether a cold record is its hot original: same length, same bytes everywhere
    except the physicalOffset field (:data:`PHYSICAL_OFFSET_SLICE`), which tiering
    rewrites to the record's cold offset."""
    a, b, s = memoryview(hot), memoryview(cold), PHYSICAL_OFFSET_SLICE
    return len(a) == len(b) and a[: s.start] == b[: s.start] and a[s.stop :] == b[s.stop :]


class MagicCode(enum.IntEnum):
    """Record format version; v2 has a 2-byte topic length (topics > 127 bytes)."""

    V1 = MAGIC_CODE_V1
    V2 = MAGIC_CODE_V2


class SysFlag(enum.IntFlag):
    """Bits of ``sysFlag`` (transaction type and compression type are fields, see below)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80


_TRANSACTION_MASK: Final = 0xC
_COMPRESSION_MASK: Final = 0x700


class TransactionType(enum.IntEnum):
    """Bits 2–3 of ``sysFlag``."""

    NOT_TYPE = 0x0
    PREPARED = 0x4
    COMMIT = 0x8
    ROLLBACK = 0xC


class CompressionType(enum.IntEnum):
    """Bits 8–10 of ``sysFlag`` (meaningful only with ``COMPRESSED``); 0 means ZLIB."""

    LZ4 = 1
    ZSTD = 2
    ZLIB = 3


@dataclass(frozen=True, slots=True)
class HostPort:
    """A born/store host: IPv4 or IPv6 address and port."""

    ip: ipaddress.IPv4Address | ipaddress.IPv6Address
    port: int

    @property
    def is_v6(self) -> bool:
        return self.ip.version == 6

    def encode(self) -> bytes:
        return self.ip.packed + _I32.pack(self.port)

    def __str__(self) -> str:
        return f"[{self.ip}]:{self.port}" if self.is_v6 else f"{self.ip}:{self.port}"


def body_crc(body: bytes) -> int:
    """Return the bodyCRC the broker stores: CRC32 of the stored body, top bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


def encode_properties(props: Mapping[str, str]) -> bytes:
    """Encode properties as ``key\\x01value\\x02`` pairs, each pair terminated by ``\\x02``."""
    return "".join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items()
    ).encode()


def tags_of(properties: Mapping[str, str]) -> str | None:
    """The message's tags (property ``TAGS``), or None when the producer set none."""
    return properties.get(PROPERTY_TAGS)


def keys_of(properties: Mapping[str, str]) -> list[str]:
    """The message's keys: property ``KEYS`` split on spaces, empty parts dropped."""
    return [k for k in properties.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR) if k]


def msg_id_of(properties: Mapping[str, str]) -> str | None:
    """The client message id (property ``UNIQ_KEY``), or None when the producer set none."""
    return properties.get(PROPERTY_UNIQ_KEY)


def decode_properties(raw: bytes) -> dict[str, str]:
    """Decode raw property bytes; a pair without a value separator is ignored, as in Java."""
    out: dict[str, str] = {}
    for pair in raw.decode("utf-8", errors="replace").split(PROPERTY_SEPARATOR):
        name, sep, value = pair.partition(NAME_VALUE_SEPARATOR)
        if sep:
            out[name] = value
    return out


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """One decoded commitlog record, with every field the broker wrote.

    ``body`` is the body as stored (compressed when :attr:`compressed`); use
    :meth:`decompressed_body` for the producer's bytes.
    """

    magic: MagicCode
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: HostPort
    store_timestamp: int
    store_host: HostPort
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties_raw: bytes

    # -- derived views -------------------------------------------------------------
    @property
    def total_size(self) -> int:
        topic_len = len(self.topic.encode())
        return (
            4
            + 4
            + 4
            + 4
            + 4
            + 8
            + 8
            + 4
            + 8
            + len(self.born_host.encode())
            + 8
            + len(self.store_host.encode())
            + 4
            + 8
            + 4
            + len(self.body)
            + (1 if self.magic is MagicCode.V1 else 2)
            + topic_len
            + 2
            + len(self.properties_raw)
        )

    @property
    def properties(self) -> dict[str, str]:
        return decode_properties(self.properties_raw)

    @property
    def tags(self) -> str | None:
        return tags_of(self.properties)

    @property
    def keys(self) -> list[str]:
        return keys_of(self.properties)

    @property
    def transaction_type(self) -> TransactionType:
        return TransactionType(self.sys_flag & _TRANSACTION_MASK)

    @property
    def compressed(self) -> bool:
        return bool(self.sys_flag & SysFlag.COMPRESSED)

    @property
    def compression_type(self) -> CompressionType:
        value = (self.sys_flag & _COMPRESSION_MASK) >> 8
        # 0 predates the field: the 4.x client always compressed with ZLIB.
        return CompressionType.ZLIB if value == 0 else CompressionType(value)

    @property
    def has_cq_unit(self) -> bool:
        """Whether the broker builds a consume-queue unit for this record."""
        return self.transaction_type not in (TransactionType.PREPARED, TransactionType.ROLLBACK)

    def decompressed_body(self) -> bytes:
        """Return the producer's body, decompressing per the sysFlag compression type."""
        if not self.compressed:
            return self.body
        try:
            ctype = self.compression_type
        except ValueError:
            raise CorruptRecordError(
                f"unknown compression type {(self.sys_flag & _COMPRESSION_MASK) >> 8} in "
                f"sysFlag 0x{self.sys_flag & 0xFFFFFFFF:X}",
                where=f"queue offset {self.queue_offset}",
            ) from None
        try:
            if ctype is CompressionType.ZLIB:
                return zlib.decompress(self.body)
            if ctype is CompressionType.ZSTD:
                import zstandard

                return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(self.body))
            import lz4.frame

            return bytes(lz4.frame.decompress(self.body))
        except Exception as exc:  # each codec raises its own error type
            raise CorruptRecordError(
                f"body does not decompress as {ctype.name}: {exc}",
                where=f"queue offset {self.queue_offset}",
            ) from exc

    # -- encoding ------------------------------------------------------------------
    def encode(self) -> bytes:
        """Return the record's exact bytes."""
        topic = self.topic.encode()
        topic_len = (
            struct.pack(">b", len(topic)) if self.magic is MagicCode.V1 else _I16.pack(len(topic))
        )
        return b"".join(
            (
                _HEAD.pack(
                    self.total_size,
                    int(self.magic),
                    self.body_crc,
                    self.queue_id,
                    self.flag,
                    self.queue_offset,
                    self.physical_offset,
                    self.sys_flag,
                    self.born_timestamp,
                ),
                self.born_host.encode(),
                _I64.pack(self.store_timestamp),
                self.store_host.encode(),
                _TAIL.pack(self.reconsume_times, self.prepared_transaction_offset, len(self.body)),
                self.body,
                topic_len,
                topic,
                _I16.pack(len(self.properties_raw)),
                self.properties_raw,
            )
        )

    def with_offsets(self, *, queue_offset: int, physical_offset: int) -> MessageRecord:
        """Return a copy placed at other queue/physical offsets."""
        return replace(self, queue_offset=queue_offset, physical_offset=physical_offset)

    @classmethod
    def build(
        cls,
        *,
        topic: str,
        body: bytes,
        queue_id: int,
        queue_offset: int,
        physical_offset: int,
        store_timestamp: int,
        born_timestamp: int | None = None,
        properties: Mapping[str, str] | None = None,
        sys_flag: int = 0,
        flag: int = 0,
        born_host: HostPort | None = None,
        store_host: HostPort | None = None,
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
    ) -> MessageRecord:
        """Build a record as the broker would store it.

        The magic is chosen as the broker does (v2 when the topic is longer than 127
        bytes); the host IPv6 bits of ``sys_flag`` follow the hosts; bodyCRC is computed.
        """
        born = born_host or HostPort(ipaddress.IPv4Address("127.0.0.1"), 50000)
        store = store_host or HostPort(ipaddress.IPv4Address("127.0.0.1"), 10911)
        # Plain ints: ~ on an IntFlag would drop the bits that are not members.
        sys_flag = int(sys_flag) & ~int(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)
        if born.is_v6:
            sys_flag |= SysFlag.BORNHOST_V6
        if store.is_v6:
            sys_flag |= SysFlag.STOREHOST_V6
        return cls(
            magic=MagicCode.V2 if len(topic.encode()) > 127 else MagicCode.V1,
            body_crc=body_crc(body),
            queue_id=queue_id,
            flag=flag,
            queue_offset=queue_offset,
            physical_offset=physical_offset,
            sys_flag=int(sys_flag),
            born_timestamp=store_timestamp if born_timestamp is None else born_timestamp,
            born_host=born,
            store_timestamp=store_timestamp,
            store_host=store,
            reconsume_times=reconsume_times,
            prepared_transaction_offset=prepared_transaction_offset,
            body=body,
            topic=topic,
            properties_raw=encode_properties(properties or {}),
        )


# -- decoding ---------------------------------------------------------------------


#: Decoded hosts by their raw bytes: a store has few distinct hosts, and building the
#: address objects is a large part of decoding a record. HostPort is immutable.
_HOSTS: dict[bytes, HostPort] = {}
_HOSTS_MAX: Final = 4096
_BORNHOST_V6: Final = int(SysFlag.BORNHOST_V6)
_STOREHOST_V6: Final = int(SysFlag.STOREHOST_V6)
_MAGICS: Final = {int(m): m for m in MagicCode}


def _host(buf: memoryview, pos: int, v6: bool) -> tuple[HostPort, int]:
    n = 16 if v6 else 4
    end = pos + n + 4
    if end > len(buf):
        raise struct.error("host overruns the record")  # decode_record reports it
    raw = bytes(buf[pos:end])
    host = _HOSTS.get(raw)
    if host is None:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address = (
            ipaddress.IPv6Address(raw[:n]) if v6 else ipaddress.IPv4Address(raw[:n])
        )
        (port,) = _I32.unpack_from(raw, n)
        host = HostPort(ip, port)
        if len(_HOSTS) >= _HOSTS_MAX:
            _HOSTS.clear()
        _HOSTS[raw] = host
    return host, end


def _after_head(
    buf: memoryview, p: int, end: int, magic: int, sys_flag: int, at: str
) -> tuple[HostPort, int, HostPort, int, int, bytes, str, bytes, int]:
    """The fields after the fixed head: born host, storeTimestamp, store host,
    reconsumeTimes, preparedTransactionOffset, body, topic, properties, and the position
    after them. Raises struct.error / UnicodeDecodeError (translated by the caller) or
    CorruptRecordError for a length past ``end``."""
    born, p = _host(buf, p, bool(sys_flag & _BORNHOST_V6))
    (store_ts,) = _I64.unpack_from(buf, p)
    store, p = _host(buf, p + 8, bool(sys_flag & _STOREHOST_V6))
    reconsume, prepared, body_len = _TAIL.unpack_from(buf, p)
    body, p = _span(buf, p + _TAIL.size, body_len, end, f"bodyLength {body_len}", at)
    if magic == MAGIC_CODE_V1:
        (topic_len,) = struct.unpack_from(">b", buf, p)
        p += 1
    else:
        (topic_len,) = _I16.unpack_from(buf, p)
        p += 2
    topic, p = _span(buf, p, topic_len, end, f"topicLength {topic_len}", at)
    (props_len,) = _I16.unpack_from(buf, p)
    props, p = _span(buf, p + 2, props_len, end, f"propertiesLength {props_len}", at)
    return born, store_ts, store, reconsume, prepared, body, topic.decode("utf-8"), props, p


def _check_head(magic: int, total: int, avail: int, at: str) -> None:
    """CorruptRecordError / TruncatedDataError for a head no record can have."""
    if magic not in (MAGIC_CODE_V1, MAGIC_CODE_V2):
        raise CorruptRecordError(f"bad magic code 0x{magic & 0xFFFFFFFF:08X}", where=at)
    if total <= 0:
        raise CorruptRecordError(f"bad totalSize {total}", where=at)
    if total > avail:
        raise TruncatedDataError(f"record of {total} bytes but only {avail} left", where=at)


def _span(buf: memoryview, p: int, length: int, end: int, what: str, at: str) -> tuple[bytes, int]:
    """The ``length`` bytes at ``p`` and the position after them; CorruptRecordError
    when they do not fit before ``end`` (the record's totalSize)."""
    if length < 0 or p + length > end:
        raise CorruptRecordError(f"{what} overruns totalSize", where=at)
    return bytes(buf[p : p + length]), p + length


def decode_record(
    data: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    where: str = "record",
    check_crc: bool = True,
) -> MessageRecord:
    """Decode the record starting at byte ``pos`` of ``data``.

    ``where`` names the file or object; errors say ``<where>@<byte offset>``.

    Raises:
        TruncatedDataError: ``data`` ends before the record does.
        CorruptRecordError: unknown magic (including the BLANK filler — probe first
            when scanning), non-positive totalSize, lengths that disagree with
            totalSize, or (with ``check_crc``) a body whose CRC differs from bodyCRC.
    """
    buf = memoryview(data)
    at = f"{where}@{pos}"
    avail = len(buf) - pos
    if avail < _HEAD.size:
        raise TruncatedDataError(f"record header needs {_HEAD.size} bytes, {avail} left", where=at)
    (total, magic, crc, qid, flag, qoff, poff, sys_flag, born_ts) = _HEAD.unpack_from(buf, pos)
    _check_head(magic, total, avail, at)
    end = pos + total
    try:
        born, store_ts, store, reconsume, prepared, body, topic, props, p = _after_head(
            buf, pos + _HEAD.size, end, magic, sys_flag, at
        )
    except struct.error as exc:
        raise CorruptRecordError(f"fields overrun totalSize {total}", where=at) from exc
    except UnicodeDecodeError as exc:
        raise CorruptRecordError("topic is not valid UTF-8", where=at) from exc
    if p != end:
        raise CorruptRecordError(f"fields end at {p - pos}, totalSize says {total}", where=at)
    if check_crc and (actual := body_crc(body)) != crc:
        raise CorruptRecordError(f"body CRC 0x{actual:08X} != stored bodyCRC 0x{crc:08X}", where=at)
    return MessageRecord(
        magic=_MAGICS[magic],
        body_crc=crc,
        queue_id=qid,
        flag=flag,
        queue_offset=qoff,
        physical_offset=poff,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=born,
        store_timestamp=store_ts,
        store_host=store,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body=body,
        topic=topic,
        properties_raw=props,
    )


class ProbeKind(enum.Enum):
    """What a commitlog scan finds at a position."""

    RECORD = "record"  # a complete, valid record of ``size`` bytes
    BLANK = "blank"  # the end-of-file filler: the rest of this file is unused
    END = "end"  # no (complete) record here: end of data or a torn tail


@dataclass(frozen=True, slots=True)
class Probe:
    """Result of :func:`probe_record`. ``reason`` explains an END."""

    kind: ProbeKind
    size: int = 0
    reason: str = ""
    record: MessageRecord | None = None


def probe_record(data: bytes | bytearray | memoryview, pos: int, *, where: str) -> Probe:
    """Classify what lies at ``pos`` during a sequential commitlog scan.

    A scan stops (END) at the first position holding zeros (preallocated tail), an
    unknown magic, a record longer than what remains, a bad CRC or inconsistent lengths:
    that is the end of the broker's data or a record still being written. It never
    raises for such bytes — a torn tail is normal while the broker runs.
    """
    buf = memoryview(data)
    if len(buf) - pos < END_FILE_MIN_BLANK_LENGTH:
        return Probe(ProbeKind.END, reason="end of file")
    total, magic = struct.unpack_from(">ii", buf, pos)
    if magic == BLANK_MAGIC_CODE:
        return Probe(ProbeKind.BLANK, size=len(buf) - pos)
    if total == 0:
        return Probe(ProbeKind.END, reason="zero tail")
    try:
        record = decode_record(buf, pos, where=where)
    except (CorruptRecordError, TruncatedDataError) as exc:
        return Probe(ProbeKind.END, reason=str(exc))
    # A tail still being copied reads as zeros; the body CRC cannot catch zeros that
    # land after the body, but a topic is never empty and never holds NUL.
    if not record.topic or "\x00" in record.topic:
        return Probe(ProbeKind.END, reason=f"torn record: topic not written ({where}@{pos})")
    return Probe(ProbeKind.RECORD, size=total, record=record)
