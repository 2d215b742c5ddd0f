"""The broker's key index (``index/``) read back as the broker reads it: what a restored
index must answer, checked independently of the writer."""

from __future__ import annotations

import struct
from pathlib import Path

from tieredstore.formats.tags import java_string_hashcode
from tieredstore.restore.index import IndexGeometry

__all__ = ["HEADER", "java_abs", "lookup"]

#: An index file's header: begin and end store times, begin and end physical offsets,
#: hash slot count, index count.
HEADER = struct.Struct(">qqqqii")


def java_abs(h: int) -> int:
    """The broker's non-negative key hash: ``Math.abs``, with ``Integer.MIN_VALUE`` as 0."""
    return 0 if h == -(2**31) else abs(h)


def lookup(
    directory: Path, geo: IndexGeometry, key: str, begin: int = 0, end: int = 2**63 - 1
) -> list[int]:
    """Physical offsets of ``key`` (``topic#key``), newest file first, as the broker."""
    found: list[int] = []
    h = java_abs(java_string_hashcode(key))
    for path in sorted(directory.iterdir(), reverse=True):
        data = path.read_bytes()
        b_ts, e_ts, _, _, _, count = HEADER.unpack_from(data, 0)
        if not ((begin < b_ts and end > e_ts) or b_ts <= begin <= e_ts or b_ts <= end <= e_ts):
            continue
        (slot,) = struct.unpack_from(">i", data, 40 + (h % geo.hash_slots) * 4)
        i = slot
        while 0 < i <= count and count > 1:
            at = 40 + geo.hash_slots * 4 + i * 20
            kh, phy, diff, prev = struct.unpack_from(">iqii", data, at)
            t = b_ts + diff * 1000
            if kh == h and begin <= t <= end:
                found.append(phy)
            if prev <= 0 or prev > count or prev == i or t < begin:
                break
            i = prev
    return found
