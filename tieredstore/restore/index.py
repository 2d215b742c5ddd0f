"""Writing the broker's key index (``<store>/index/``) so ``queryMsgByKey`` finds restored
messages the moment a broker boots.

A broker that boots normally never rebuilds the index for records its consume queues
already cover (it re-dispatches only records past the consume queues' end, and only an
abnormal recovery replays the whole commitlog), so a restore writes it.

File layout (RocketMQ ``IndexFile``, big-endian)::

    header   40 bytes: beginTimestamp i64, endTimestamp i64, beginPhyOffset i64,
             endPhyOffset i64, hashSlotCount i32, indexCount i32
    slots    hash_slots x i32: the newest entry of each hash slot (0 = empty)
    entries  max_entries x 20 bytes: keyHash i32, phyOffset i64, timeDiff i32 (seconds
             since beginTimestamp), prevIndex i32 (the slot's previous entry, 0 = none)

Entry 0 is never used (``indexCount`` starts at 1), so a file holds ``max_entries - 1``
keys; the next file starts when it is full. The file size depends on the broker's
``maxHashSlotNum`` and ``maxIndexNum``: the restore must be told the broker's values.

Keys, as the broker's ``IndexService#buildIndex`` makes them: ``<topic>#<UNIQ_KEY>``
first, then ``<topic>#<key>`` for each space-separated key of ``KEYS``; the hash is
``abs(String.hashCode())`` (0 for ``Integer.MIN_VALUE``), its slot ``hash % hash_slots``.

Times: ``beginTimestamp`` is a lower bound of every entry's store time in the file: the
oldest store time of the segment being restored when the file was opened (segments are
restored in order of their oldest message, so nothing later in the file is older;
should a store time still be older, its timeDiff is 0, as the broker clamps it).
``endTimestamp`` is the newest store time in the file. Files are named like the broker's
(``yyyyMMddHHmmssSSS``, local time) from ``beginTimestamp``, strictly increasing.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from tieredstore.errors import StoreError
from tieredstore.formats.record import (
    BODY_LENGTH_AT_V4,
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    KEY_SEPARATOR,
    MAGIC_AT,
    MAGIC_CODE_V2,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_UNIQ_KEY,
    SYS_FLAG_AT,
    SysFlag,
)
from tieredstore.formats.vector import gather_be
from tieredstore.restore.files import fsync_dir

__all__ = ["IndexGeometry", "IndexWriter", "index_keys", "key_hashes"]

I64 = npt.NDArray[np.int64]
HEADER_SIZE: Final = 40
_SLOT_SIZE: Final = 4
_ENTRY_SIZE: Final = 20
_HEADER = struct.Struct(">qqqqii")
_ENTRY_DTYPE: Final = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
_MASK32: Final = 0xFFFFFFFF
_INT_MIN: Final = -(2**31)
_INT_MAX: Final = 2**31 - 1


@dataclass(frozen=True, slots=True)
class IndexGeometry:
    """The broker's ``maxHashSlotNum`` and ``maxIndexNum`` (defaults: RocketMQ's)."""

    hash_slots: int = 5_000_000
    max_entries: int = 20_000_000

    def __post_init__(self) -> None:
        if self.hash_slots < 1 or self.max_entries < 2:
            raise ValueError(
                f"index geometry needs hash_slots >= 1 and max_entries >= 2, got "
                f"{self.hash_slots} / {self.max_entries}"
            )
        if self.file_size > _INT_MAX:
            raise ValueError(f"an index file of {self.file_size} bytes exceeds 2 GiB")

    @property
    def file_size(self) -> int:
        return HEADER_SIZE + self.hash_slots * _SLOT_SIZE + self.max_entries * _ENTRY_SIZE


# -- keys ------------------------------------------------------------------------------
_NAME_VALUE: Final = ord(NAME_VALUE_SEPARATOR)
_PAIR_END: Final = ord(PROPERTY_SEPARATOR)
_SPACE: Final = ord(KEY_SEPARATOR)
_UNIQ_NAME: Final = np.frombuffer(PROPERTY_UNIQ_KEY.encode(), dtype=np.uint8)
_KEYS_NAME: Final = np.frombuffer(PROPERTY_KEYS.encode(), dtype=np.uint8)
_HASH_SIGN: Final = ord("#")


def _fields(arr: npt.NDArray[np.uint8], starts: I64) -> tuple[I64, I64, I64, I64]:
    """(topic start, topic length, properties start, properties length) of each record."""
    sys_flag = gather_be(arr, starts + SYS_FLAG_AT, 4)
    magic = gather_be(arr, starts + MAGIC_AT, 4)
    v6_hosts = ((sys_flag & int(SysFlag.BORNHOST_V6)) != 0).astype(np.int64) + (
        (sys_flag & int(SysFlag.STOREHOST_V6)) != 0
    )
    body_at = starts + BODY_LENGTH_AT_V4 + (HOST_V6_SIZE - HOST_V4_SIZE) * v6_hosts
    tlen_at = body_at + 4 + gather_be(arr, body_at, 4)
    v2 = magic == MAGIC_CODE_V2
    tlen = np.where(v2, gather_be(arr, tlen_at - 2, 4) & 0xFFFF, arr[tlen_at].astype(np.int8))
    topic_at = tlen_at + np.where(v2, 2, 1)
    plen_at = topic_at + tlen
    plen = (gather_be(arr, plen_at - 2, 4) & 0xFFFF).astype(np.int16).astype(np.int64)
    return topic_at, tlen.astype(np.int64), plen_at + 2, np.maximum(plen, 0)


def _named(
    arr: npt.NDArray[np.uint8], at: I64, length: I64, name: npt.NDArray[np.uint8]
) -> npt.NDArray[np.bool_]:
    """Whether the ``length`` bytes at ``at`` spell ``name``."""
    hit: npt.NDArray[np.bool_] = np.asarray(length == len(name), dtype=bool)
    idx = np.flatnonzero(hit)
    if idx.size:
        hit[idx] = (arr[at[idx, None] + np.arange(len(name))] == name).all(axis=1)
    return hit


def _pairs(arr: npt.NDArray[np.uint8], props_at: I64, props_len: I64) -> tuple[I64, I64, I64, I64]:
    """The UNIQ_KEY and KEYS values Java's ``string2messageProperties`` keeps:
    (record, kind 0 = UNIQ_KEY / 1 = KEYS, value start, value end), a name given twice in a
    record counted once (the later)."""
    seps = np.flatnonzero(arr == _NAME_VALUE)
    # Every \x02, and a sentinel past the data (no lookup below ever runs off the end).
    ends = np.append(np.flatnonzero(arr == _PAIR_END), len(arr))
    region_end = props_at + props_len
    rec = np.searchsorted(props_at, seps, side="right") - 1
    inside = (rec >= 0) & (seps < region_end[np.maximum(rec, 0)])
    seps, rec = seps[inside], rec[inside]
    if not len(seps):
        return seps, seps, seps, seps
    # A pair starts after the previous \x02 of its record (or at the record's first byte);
    # only its first \x01 separates the name (Java's indexOf from the pair start).
    prev_end = np.searchsorted(ends, seps) - 1
    pair_at = np.where(
        (prev_end >= 0) & (ends[np.maximum(prev_end, 0)] >= props_at[rec]),
        ends[np.maximum(prev_end, 0)] + 1,
        props_at[rec],
    )
    first = np.concatenate(([True], (pair_at[1:] != pair_at[:-1]) | (rec[1:] != rec[:-1])))
    seps, rec, pair_at = seps[first], rec[first], pair_at[first]
    value_end = np.minimum(ends[np.searchsorted(ends, seps)], region_end[rec])
    name_len = seps - pair_at
    uniq = _named(arr, pair_at, name_len, _UNIQ_NAME)
    keys = _named(arr, pair_at, name_len, _KEYS_NAME)
    keep = (uniq | keys) & (value_end > seps + 1)  # Java drops an empty value
    rec, kind = rec[keep], keys[keep].astype(np.int64)
    start, end = seps[keep] + 1, value_end[keep]
    # The later of two equal names wins: keep the last pair of each (record, kind).
    combo = rec * 2 + kind
    last = np.concatenate((combo[1:] != combo[:-1], [True])) if combo.size else combo.astype(bool)
    if not last.all():
        order = np.lexsort((np.arange(len(combo)), combo))
        c = combo[order]
        keep_sorted = np.concatenate((c[1:] != c[:-1], [True]))
        last = np.zeros(len(combo), dtype=bool)
        last[order[keep_sorted]] = True
    return rec[last], kind[last], start[last], end[last]


def _ranges(starts: I64, lengths: I64) -> I64:
    """The positions of every byte of the ranges ``[starts[i], starts[i] + lengths[i])``."""
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(
        int(ends[-1]) if len(ends) else 0
    )


def _tokens(arr: npt.NDArray[np.uint8], start: I64, end: I64) -> tuple[I64, I64, I64]:
    """Split each range on spaces: (range number, token start, token end), empty ones out."""
    if not len(start):
        return start, start, start
    spaces = np.flatnonzero(arr == _SPACE)
    lo, hi = np.searchsorted(spaces, start), np.searchsorted(spaces, end)
    count = hi - lo  # spaces inside each range; tokens = count + 1
    inner = spaces[_ranges(lo, count)] if count.sum() else np.zeros(0, dtype=np.int64)
    owner = np.repeat(np.arange(len(start)), count + 1)
    first = np.cumsum(np.concatenate(([0], count[:-1] + 1)))  # each range's first token
    t_start = np.empty(int((count + 1).sum()), dtype=np.int64)
    t_end = np.empty_like(t_start)
    is_first = np.zeros(len(t_start), dtype=bool)
    is_first[first] = True
    is_last = np.zeros(len(t_start), dtype=bool)
    is_last[first + count] = True
    t_start[is_first] = start
    t_start[~is_first] = inner + 1
    t_end[is_last] = end
    t_end[~is_last] = inner
    keep = t_end > t_start
    return owner[keep], t_start[keep], t_end[keep]


def index_keys(data: bytes | bytearray | memoryview, starts: I64) -> tuple[I64, list[bytes]]:
    """Each index key of the records at ``starts``: (record number, ``topic#key`` UTF-8).

    In the broker's order: per record, its ``UNIQ_KEY`` first, then each non-empty
    space-separated key of ``KEYS`` (a name given twice counts once, the later value, as
    Java's properties map keeps it). For tests and diagnostics; :class:`IndexWriter` uses
    :func:`index_hashes`, which never builds the strings.
    """
    arr = np.frombuffer(data, dtype=np.uint8)
    k = _key_ranges(arr, starts)
    raw, props = bytes(data), k.props.tobytes()
    keys = [
        raw[t : t + tl] + b"#" + props[a : a + n]
        for t, tl, a, n in zip(
            k.topic_at.tolist(),
            k.topic_len.tolist(),
            k.key_at.tolist(),
            k.key_len.tolist(),
            strict=True,
        )
    ]
    return k.rec, keys


@dataclass(frozen=True, slots=True)
class _Keys:
    """Index keys found in a batch: record, its topic in the batch, the key in ``props``
    (every record's properties back to back)."""

    rec: I64
    topic_at: I64
    topic_len: I64
    props: npt.NDArray[np.uint8]
    key_at: I64
    key_len: I64


def _key_ranges(arr: npt.NDArray[np.uint8], starts: I64) -> _Keys:
    """Where every index key of the records at ``starts`` is, in the broker's order."""
    topic_at, topic_len, props_at, props_len = _fields(arr, starts)
    # Only the properties are searched: gathered back to back, a small part of a batch.
    props = arr[_ranges(props_at, props_len)]
    at = np.cumsum(props_len) - props_len
    rec, kind, v_start, v_end = _pairs(props, at, props_len)
    is_keys = kind == 1
    owner, k_start, k_end = _tokens(props, v_start[is_keys], v_end[is_keys])
    uniq = ~is_keys
    all_rec = np.concatenate((rec[uniq], rec[is_keys][owner]))
    all_kind = np.concatenate((np.zeros(int(uniq.sum()), np.int64), np.ones(len(owner), np.int64)))
    all_start = np.concatenate((v_start[uniq], k_start))
    all_len = np.concatenate((v_end[uniq] - v_start[uniq], k_end - k_start))
    order = np.lexsort((all_start, all_kind, all_rec))
    r = all_rec[order]
    return _Keys(r, topic_at[r], topic_len[r], props, all_start[order], all_len[order])


class _Pow31:
    """31**k mod 2**32 for k up to the longest string seen."""

    def __init__(self) -> None:
        self.table = np.ones(1, dtype=np.uint64)

    def upto(self, n: int) -> npt.NDArray[np.uint64]:
        if n >= len(self.table):
            size = max(n + 1, 2 * len(self.table))
            table = np.empty(size, dtype=np.uint64)
            table[: len(self.table)] = self.table
            for k in range(len(self.table), size):
                table[k] = (int(table[k - 1]) * 31) & _MASK32
            self.table = table
        return self.table


_POW31 = _Pow31()


def _poly(units: npt.NDArray[np.uint64], lens: I64) -> npt.NDArray[np.uint64]:
    """sum(c[i] * 31**(n-1-i)) mod 2**32 of each run of ``lens`` code units (all > 0)."""
    pow31 = _POW31.upto(int(lens.max()))
    ends = np.cumsum(lens)
    starts = ends - lens
    seg = np.repeat(np.arange(len(lens)), lens)
    pos = np.arange(len(units), dtype=np.int64) - starts[seg]
    terms = (units * pow31[lens[seg] - 1 - pos]) & np.uint64(_MASK32)
    out: npt.NDArray[np.uint64] = np.add.reduceat(terms, starts) & np.uint64(_MASK32)
    return out


def _java_abs(h: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
    signed = h.astype(np.uint32).view(np.int32).astype(np.int64)
    return np.where(signed == _INT_MIN, 0, np.abs(signed))


def _utf16(keys: list[bytes]) -> tuple[npt.NDArray[np.uint64], I64]:
    encoded = [k.decode("utf-8", errors="replace").encode("utf-16-be") for k in keys]
    lens = np.fromiter((len(e) // 2 for e in encoded), dtype=np.int64, count=len(encoded))
    return np.frombuffer(b"".join(encoded), dtype=">u2").astype(np.uint64), lens


def _range_hashes(
    arr: npt.NDArray[np.uint8], at: I64, length: I64
) -> tuple[npt.NDArray[np.uint64], I64]:
    """(h, UTF-16 length) of the UTF-8 strings at ``arr[at : at + length]`` (Java's
    String.hashCode before abs). ASCII strings are hashed in place, others decoded."""
    h = np.zeros(len(at), dtype=np.uint64)
    n16 = length.copy()
    if not len(at):
        return h, n16
    idx = _ranges(at, length)
    high = np.add.reduceat((arr[idx] >= 0x80).astype(np.int64), np.cumsum(length) - length) > 0
    ascii_ = ~high
    if ascii_.any():
        sub = _ranges(at[ascii_], length[ascii_])
        h[ascii_] = _poly(arr[sub].astype(np.uint64), length[ascii_])
    if high.any():
        raw = arr.tobytes()
        strings = [
            raw[a : a + n] for a, n in zip(at[high].tolist(), length[high].tolist(), strict=True)
        ]
        units, lens = _utf16(strings)
        h[high] = _poly(units, lens)
        n16[high] = lens
    return h, n16


def index_hashes(
    data: bytes | bytearray | memoryview, starts: I64
) -> tuple[I64, npt.NDArray[np.int64]]:
    """(record number, key hash) of every index key of the records at ``starts``, in the
    broker's order (see :func:`index_keys`), computed over the bytes in place."""
    arr = np.frombuffer(data, dtype=np.uint8)
    k = _key_ranges(arr, starts)
    rec = k.rec
    if not len(rec):
        return rec, np.zeros(0, dtype=np.int64)
    # h(topic + "#" + key) = (h(topic) * 31 + '#') * 31**len16(key) + h(key), mod 2**32.
    first = np.concatenate(([True], rec[1:] != rec[:-1]))
    t_hash, _ = _range_hashes(arr, k.topic_at[first], k.topic_len[first])
    prefix = ((t_hash * 31 + _HASH_SIGN) & _MASK32)[np.cumsum(first) - 1]
    k_hash, k_len = _range_hashes(k.props, k.key_at, k.key_len)
    pow31 = _POW31.upto(int(k_len.max()))
    return rec, _java_abs((prefix * pow31[k_len] + k_hash) & _MASK32)


def key_hashes(keys: list[bytes]) -> npt.NDArray[np.int64]:
    """Java's ``abs(String.hashCode())`` (0 for Integer.MIN_VALUE) of each UTF-8 key."""
    if not keys:
        return np.zeros(0, dtype=np.int64)
    units, lens = _utf16(keys)
    if not lens.all():
        raise ValueError("an index key is never empty")
    return _java_abs(_poly(units, lens))


# -- files -----------------------------------------------------------------------------


def _name(ms: int) -> str:
    stamp = datetime.fromtimestamp(ms / 1000)  # local time, like the broker's names
    return stamp.strftime("%Y%m%d%H%M%S") + f"{ms % 1000:03d}"


class _IndexFile:
    """One index file being filled; the slot table lives in memory until :meth:`close`."""

    def __init__(self, path: Path, geometry: IndexGeometry, begin_ts: int) -> None:
        self.path = path
        self.geometry = geometry
        self.begin_ts = begin_ts
        self.end_ts = begin_ts
        self.begin_phy = -1
        self.end_phy = 0
        self.count = 1
        self.slot_count = 0
        self.slots = np.zeros(geometry.hash_slots, dtype=np.int32)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self.fd, geometry.file_size)

    @property
    def room(self) -> int:
        return self.geometry.max_entries - self.count

    def put(self, hashes: I64, phys: I64, stamps: I64) -> None:
        """Append entries (at most :attr:`room`), chaining each to its slot's previous."""
        n = len(hashes)
        slot = hashes % self.geometry.hash_slots
        idx = self.count + np.arange(n, dtype=np.int64)
        order = np.argsort(slot, kind="stable")
        ss, ii = slot[order], idx[order]
        first = np.concatenate(([True], ss[1:] != ss[:-1]))
        last = np.concatenate((ss[1:] != ss[:-1], [True]))
        prev = np.empty(n, dtype=np.int64)
        prev[order] = np.where(
            first, self.slots[ss].astype(np.int64), np.concatenate(([0], ii[:-1]))
        )
        self.slot_count += int(np.count_nonzero(self.slots[ss[first]] == 0))
        self.slots[ss[last]] = ii[last]
        entries = np.empty(n, dtype=_ENTRY_DTYPE)
        entries["hash"] = hashes
        entries["phy"] = phys
        entries["diff"] = np.clip((stamps - self.begin_ts) // 1000, 0, _INT_MAX)
        entries["prev"] = prev
        at = HEADER_SIZE + self.geometry.hash_slots * _SLOT_SIZE + self.count * _ENTRY_SIZE
        os.pwrite(self.fd, entries.tobytes(), at)
        if self.begin_phy < 0:
            self.begin_phy = int(phys[0])
        self.end_phy = int(phys[-1])
        self.end_ts = max(self.end_ts, int(stamps.max()))
        self.count += n

    def close(self) -> None:
        os.pwrite(self.fd, self.slots.astype(">i4").tobytes(), HEADER_SIZE)
        header = _HEADER.pack(
            self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count, self.count
        )
        os.pwrite(self.fd, header, 0)
        os.fsync(self.fd)
        os.close(self.fd)


class IndexWriter:
    """Builds the index files of a restored store, batch by batch, in commitlog order.

    ``floor_ts`` passed with each batch must not exceed the store time of any record
    added after it while the current file is open (see the module docstring).
    """

    def __init__(self, directory: Path, geometry: IndexGeometry) -> None:
        self.directory = directory
        self.geometry = geometry
        self.entries = 0
        self.files: list[Path] = []
        self._file: _IndexFile | None = None
        self._last_name = ""
        self.max_end_ts = 0
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create: {exc.strerror}", where=str(directory)) from exc

    def _open(self, begin_ts: int) -> _IndexFile:
        name, ms = _name(begin_ts), begin_ts
        while name <= self._last_name:  # strictly increasing names, like creation times
            ms += 1
            name = _name(ms)
        self._last_name = name
        path = self.directory / name
        self.files.append(path)
        return _IndexFile(path, self.geometry, begin_ts)

    def add(
        self,
        data: bytes | bytearray | memoryview,
        starts: I64,
        phys: I64,
        stamps: I64,
        *,
        floor_ts: int,
    ) -> None:
        """Index the records of ``data`` at ``starts``, stored at ``phys`` at ``stamps``."""
        rec, hashes = index_hashes(data, starts)
        if not len(rec):
            return
        entry_phys = phys[rec]
        entry_ts = stamps[rec]
        done = 0
        while done < len(rec):
            if self._file is None or self._file.room == 0:
                self._close_current()
                self._file = self._open(min(floor_ts, int(entry_ts[done])))
            n = min(self._file.room, len(rec) - done)
            sl = slice(done, done + n)
            self._file.put(hashes[sl], entry_phys[sl], entry_ts[sl])
            done += n
        self.entries += len(rec)

    def _close_current(self) -> None:
        if self._file is not None:
            self._file.close()
            self.max_end_ts = max(self.max_end_ts, self._file.end_ts)
            self._file = None

    def close(self) -> None:
        """Write the open file's slots and header; fsync the directory. Idempotent."""
        self._close_current()
        fsync_dir(self.directory)
