"""Columnar decoding: many commitlog records at once, into numpy and Arrow arrays.

:func:`~tieredstore.formats.record.decode_record` is the reference: one record into a
:class:`~tieredstore.formats.record.MessageRecord`, about 10 µs of Python per record.
:func:`decode_columns` reads the same fields of a whole batch of records (their starts
and sizes known, e.g. from consume-queue units) with numpy: fixed fields gathered as
big-endian ints at computed offsets, variable fields (body, topic, properties) copied
into Arrow binary arrays through offsets buffers, with no Python object per record but
one ``zlib.crc32`` call for the body CRC.

It never raises for bad bytes. Instead :attr:`RecordColumns.bad` flags every record
``decode_record`` would refuse (bad magic, totalSize, lengths that overrun the record,
a topic that is not UTF-8, a body CRC mismatch); the values of a flagged record are
meaningless. A caller that needs the error decodes the first flagged record with
``decode_record``, which says what is wrong and where: one parser of record errors.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tieredstore.formats.arrownp import flat_binary, gather_ranges, ranges_in_order
from tieredstore.formats.record import (
    HEAD_DTYPE,
    HEAD_SIZE,
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    MAGIC_CODE_V1,
    MAGIC_CODE_V2,
    TAIL_SIZE,
    SysFlag,
)
from tieredstore.formats.vector import values_at

__all__ = [
    "RecordColumns",
    "decode_columns",
    "equal_each",
    "hex_strings",
    "offset_msg_ids",
    "repeat_string",
    "slices",
]

I64 = npt.NDArray[np.int64]
Buffer = bytes | bytearray | memoryview
U8 = npt.NDArray[np.uint8]
Mask = npt.NDArray[np.bool_]

#: Mean range length up to which :func:`slices` gathers with a numpy index.
_SHORT: Final = 128
#: The fields between the store host and the body (:data:`TAIL_SIZE` bytes).
_TAIL_DTYPE: Final = np.dtype(
    [("reconsume_times", ">i4"), ("prepared_transaction_offset", ">i8"), ("body_length", ">i4")]
)
#: Upper-case hex digits of every byte value, both in one 2-byte item.
_HEX: Final = np.frombuffer(bytes.hex(bytes(range(256))).upper().encode(), np.uint16)


@dataclass(frozen=True)
class RecordColumns:
    """The fields of ``n`` records, one array element per record, in input order.

    Ints are int64 whatever their width in the record. ``body`` is the body as stored
    (compressed when sysFlag has COMPRESSED); ``topic`` and ``properties`` are the raw
    bytes (``properties`` is :attr:`MessageRecord.properties_raw`). ``store_host`` is
    the raw store host (address + port, 8 or 20 bytes). Values of a :attr:`bad`
    record are meaningless (zeros or empty).
    """

    total_size: I64
    body_crc: I64
    queue_id: I64
    flag: I64
    queue_offset: I64
    physical_offset: I64
    sys_flag: I64
    born_timestamp: I64
    store_timestamp: I64
    reconsume_times: I64
    prepared_transaction_offset: I64
    store_host: pa.BinaryArray
    body: pa.BinaryArray
    topic: pa.BinaryArray
    properties: pa.BinaryArray
    bad: Mask

    def __len__(self) -> int:
        return len(self.bad)


class _Reader:
    """Fields at per-record offsets of one buffer; a field that does not lie inside the
    buffer reads as zero (its record is flagged bad by the caller)."""

    def __init__(self, buf: U8) -> None:
        self.buf = buf

    def block(self, at: I64, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
        """A ``dtype`` item (a record head, or an int) at each offset (all zeros for one
        that does not lie inside the buffer)."""
        if len(self.buf) < dtype.itemsize:  # nothing fits: every item reads as zero
            return np.zeros(len(at), dtype)
        inside = (at >= 0) & (at + dtype.itemsize <= len(self.buf))
        rows: npt.NDArray[Any] = values_at(self.buf, np.where(inside, at, 0), dtype)
        if not inside.all():
            rows[~inside] = np.zeros(1, dtype)
        return rows

    def read(self, at: I64, width: int) -> I64:
        """The big-endian signed int of ``width`` bytes at each offset (or zero)."""
        dtype = np.dtype({1: ">i1", 2: ">i2", 4: ">i4", 8: ">i8"}[width])
        values: I64 = self.block(at, dtype).astype(np.int64)
        return values


def decode_columns(data: Buffer, starts: I64, sizes: I64) -> RecordColumns:
    """Decode the records at byte offsets ``starts`` of ``data``, record ``i`` being
    the ``sizes[i]`` bytes from ``starts[i]`` on, as ``decode_record(data[s:s+size])``
    would (so a totalSize beyond ``size`` is flagged: truncated).

    Ranges must lie inside ``data``; they need not be contiguous or sorted.
    """
    buf = np.frombuffer(data, np.uint8)
    starts = np.asarray(starts, np.int64)
    sizes = np.asarray(sizes, np.int64)
    rd = _Reader(buf)
    ok = sizes >= HEAD_SIZE
    head = rd.block(starts, HEAD_DTYPE)
    total, magic = head["total_size"].astype(np.int64), head["magic"].astype(np.int64)
    ok &= ((magic == MAGIC_CODE_V1) | (magic == MAGIC_CODE_V2)) & (total > 0) & (total <= sizes)
    end = starts + np.where(ok, total, 0)
    sys_flag = head["sys_flag"].astype(np.int64)
    store_ts_at = starts + HEAD_SIZE + _host_width(sys_flag, SysFlag.BORNHOST_V6)
    host_at = store_ts_at + 8
    tail_at = host_at + _host_width(sys_flag, SysFlag.STOREHOST_V6)
    body_at = tail_at + TAIL_SIZE
    tail = rd.block(tail_at, _TAIL_DTYPE)
    body_len = tail["body_length"].astype(np.int64)
    ok &= (body_len >= 0) & (body_at + body_len <= end)
    topic_len_at = body_at + np.where(ok, body_len, 0)
    v1 = magic == MAGIC_CODE_V1
    # Two bytes read for both layouts: V1's one-byte (signed) length is the high one.
    two = rd.read(topic_len_at, 2)
    topic_len = np.where(v1, two >> 8, two)
    topic_at = topic_len_at + np.where(v1, 1, 2)
    ok &= (topic_len >= 0) & (topic_at + topic_len + 2 <= end)
    props_len_at = topic_at + np.where(ok, topic_len, 0)
    props_len = rd.read(props_len_at, 2)
    props_at = props_len_at + 2
    ok &= (props_len >= 0) & (props_at + props_len == end)
    crc = head["body_crc"].astype(np.int64)
    body, body_crcs = _bodies(data, body_at, np.where(ok, body_len, 0))
    ok &= (body_crcs & 0x7FFFFFFF) == crc
    topic = slices(data, topic_at, np.where(ok, topic_len, 0))
    ok &= _utf8(topic)
    return RecordColumns(
        total_size=total,
        body_crc=crc,
        queue_id=head["queue_id"].astype(np.int64),
        flag=head["flag"].astype(np.int64),
        queue_offset=head["queue_offset"].astype(np.int64),
        physical_offset=head["physical_offset"].astype(np.int64),
        sys_flag=sys_flag,
        born_timestamp=head["born_timestamp"].astype(np.int64),
        store_timestamp=rd.read(store_ts_at, 8),
        reconsume_times=tail["reconsume_times"].astype(np.int64),
        prepared_transaction_offset=tail["prepared_transaction_offset"].astype(np.int64),
        store_host=slices(data, host_at, np.where(ok, tail_at - host_at, 0)),
        body=body,
        topic=topic,
        properties=slices(data, props_at, np.where(ok, props_len, 0)),
        bad=~ok,
    )


def _host_width(sys_flag: I64, v6_bit: SysFlag) -> I64:
    widths: I64 = np.where(sys_flag & int(v6_bit), HOST_V6_SIZE, HOST_V4_SIZE).astype(np.int64)
    return widths


def slices(data: Buffer, starts: I64, lengths: I64) -> pa.BinaryArray:
    """The byte ranges ``[starts[i], starts[i] + lengths[i])`` of ``data`` as one binary
    array: the values copied once into one buffer, the offsets a cumulative sum.

    Ranges must lie inside ``data``. Ranges in ascending order (a batch's records, in
    commitlog order) are copied by one Arrow ``take``
    (:func:`~tieredstore.formats.arrownp.gather_ranges`); others (a broken store's
    overlapping records) short ones with one numpy index, long ones joined from slices.
    """
    return _binary(_gathered(data, starts, lengths), lengths)


def _gathered(data: Buffer, starts: I64, lengths: I64) -> Buffer | U8 | pa.Buffer:
    """The ranges' bytes, concatenated (see :func:`slices`)."""
    if ranges_in_order(starts, lengths, len(data)):
        return gather_ranges(data, starts, lengths)
    if int(lengths.sum()) > _SHORT * len(lengths):
        source = data if isinstance(data, bytes) else bytes(data)
        ranges = map(slice, starts.tolist(), (starts + lengths).tolist())
        return b"".join(map(source.__getitem__, ranges))
    index = np.repeat(starts - _offsets(lengths)[:-1], lengths) + np.arange(lengths.sum())
    values: U8 = np.frombuffer(data, np.uint8)[index]
    return values


def _offsets(lengths: I64) -> I64:
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _binary(values: Buffer | U8 | pa.Buffer, lengths: I64) -> pa.BinaryArray:
    """A binary array of the concatenated ``values`` and their ``lengths``."""
    return pa.Array.from_buffers(
        pa.binary(),
        len(lengths),
        [None, pa.py_buffer(_int32(_offsets(lengths))), pa.py_buffer(values)],
    )


def _int32(offsets: I64) -> npt.NDArray[np.int32]:
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError(f"{offsets[-1]} bytes do not fit one Arrow binary array")
    return offsets.astype(np.int32)


def _bodies(data: Buffer, starts: I64, lengths: I64) -> tuple[pa.BinaryArray, I64]:
    """:func:`slices` of the bodies, and each one's CRC32 (over views of the copy:
    builtins only, no Python frame per body)."""
    values = _gathered(data, starts, lengths)
    offsets = _offsets(lengths)
    view = memoryview(values)  # type: ignore[arg-type]
    ranges = map(slice, offsets[:-1].tolist(), offsets[1:].tolist())
    crcs: I64 = np.fromiter(map(zlib.crc32, map(view.__getitem__, ranges)), np.int64, len(lengths))
    return _binary(values, lengths), crcs


def _utf8(raw: pa.BinaryArray) -> Mask:
    """Whether each value is valid UTF-8 (one validation pass; per value only if one
    is not)."""
    try:
        raw.cast(pa.string())
    except pa.ArrowInvalid:
        return np.array([_is_utf8(v) for v in raw.to_pylist()], np.bool_)
    return np.ones(len(raw), np.bool_)


def _is_utf8(value: bytes | None) -> bool:
    try:
        (value or b"").decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def hex_strings(raw: pa.BinaryArray) -> pa.StringArray:
    """Each value as upper-case hex (``bytes.hex().upper()``), vectorised."""
    n = len(raw)
    data, offsets = flat_binary(raw)
    digits = _hex_digits(data)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(_int32(offsets * 2)), pa.py_buffer(digits)]
    )


def _hex_digits(data: U8) -> U8:
    """Each byte's two upper-case hex digits, in order (one 2-byte table lookup per
    byte)."""
    digits: U8 = _HEX[data].view(np.uint8).reshape(-1)
    return digits


def offset_msg_ids(store_hosts: pa.BinaryArray, physical_offsets: I64) -> pa.StringArray:
    """:func:`~tieredstore.formats.msgid.offset_msg_id_for` of many records at once:
    ``store_hosts`` their raw store hosts (:attr:`RecordColumns.store_host`)."""
    n = len(physical_offsets)
    offsets_be = np.asarray(physical_offsets, ">i8").view(np.uint8).reshape(n, 8)
    hosts, bounds = flat_binary(store_hosts)
    if n and bool(np.all(np.diff(bounds) == HOST_V4_SIZE)):  # all IPv4: fixed-width rows
        raw = np.concatenate((hosts.reshape(n, HOST_V4_SIZE), offsets_be), axis=1)
        digits = _hex_digits(raw)
        width = 2 * (HOST_V4_SIZE + 8)
        at = np.arange(0, width * n + 1, width, dtype=np.int64)
        return pa.Array.from_buffers(
            pa.string(), n, [None, pa.py_buffer(_int32(at)), pa.py_buffer(digits)]
        )
    raw_offsets = pa.Array.from_buffers(
        pa.binary(), n,
        [None, pa.py_buffer(np.arange(0, 8 * n + 1, 8, dtype=np.int32)),
         pa.py_buffer(offsets_be.tobytes())],
    )  # fmt: skip
    return hex_strings(pc.binary_join_element_wise(store_hosts, raw_offsets, b""))


def equal_each(raw: pa.BinaryArray, value: bytes) -> Mask:
    """Whether each value of ``raw`` is ``value`` (compared as numpy bytes rows)."""
    data, offsets = flat_binary(raw)
    width = len(value)
    same: Mask = np.diff(offsets) == width
    if width and same.all():
        return np.asarray((data.reshape(-1, width) == np.frombuffer(value, np.uint8)).all(axis=1))
    at = np.flatnonzero(same)
    same[at] = [bytes(data[offsets[i] : offsets[i] + width]) == value for i in at.tolist()]
    return same


def repeat_string(value: str, n: int) -> pa.StringArray:
    """``value`` ``n`` times, as a string array."""
    raw = value.encode()
    offsets = np.arange(0, len(raw) * n + 1, max(len(raw), 1), dtype=np.int64)[: n + 1]
    if not raw:
        offsets = np.zeros(n + 1, np.int64)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(_int32(offsets)), pa.py_buffer(raw * n)]
    )
