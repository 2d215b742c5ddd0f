"""Consume-queue tagsCode: Java ``String.hashCode`` of the TAGS property."""

from __future__ import annotations

import struct

__all__ = ["java_string_hashcode", "tags_code"]

_MASK32 = 0xFFFFFFFF


def java_string_hashcode(text: str) -> int:
    """Return Java's ``String.hashCode()`` of ``text`` as a signed 32-bit int.

    Java hashes UTF-16 code units (``h = 31*h + c`` with 32-bit wrap), so characters
    outside the BMP count as two surrogate units, exactly as the broker computes it.
    """
    units = text.encode("utf-16-be")
    h = 0
    for (unit,) in struct.iter_unpack(">H", units):
        h = (31 * h + unit) & _MASK32
    return h - (1 << 32) if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """Return the tagsCode the broker stores in a CQ unit for a message's TAGS.

    No tags (``None`` or the empty string) gives 0, as in RocketMQ. The value is the
    signed int32 hash sign-extended to int64 (which Python ints already are).
    """
    if not tags:
        return 0
    return java_string_hashcode(tags)
