"""Retention pressure: how close the broker's retention is to data not yet tiered.

The broker deletes its commitlog oldest file first (by age, ``fileReservedTime``, or when
the disk fills, ``diskMaxUsedSpaceRatio``), a whole file at a time. A queue's oldest
untiered message sits at some commitlog offset ``P``; everything the broker holds before
it — from the base of its oldest commitlog file up to ``P`` — is what retention must
delete before it deletes that message. That is the **headroom**, in bytes (``P - base of
the oldest file``) and in seconds of traffic (store time of the message at ``P`` minus
the store time of the first record of the oldest file).

Headroom shrinks when tiering falls behind and when the broker deletes files. Once it is
below one commitlog file (``mappedFileSizeCommitLog``, 1 GiB by default) the untiered
message is in the very next file the broker deletes; at zero it is gone (the queue goes
PAUSED). A queue with nothing untiered has infinite headroom.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tieredstore.errors import TieredStoreError
from tieredstore.hot.store import HotStore

__all__ = ["Headroom", "HotOldest", "hot_oldest"]


@dataclass(frozen=True, slots=True)
class HotOldest:
    """The broker's oldest commitlog file: its base offset and its first record's store
    time (the oldest data retention will delete next)."""

    base: int
    store_ms: int

    def headroom(self, cl_offset: int, store_ms: int) -> Headroom:
        """The headroom of a message at commitlog ``cl_offset`` stored at ``store_ms``."""
        return Headroom(max(cl_offset - self.base, 0), max(store_ms - self.store_ms, 0) / 1000)


@dataclass(frozen=True, slots=True)
class Headroom:
    """Bytes and seconds of traffic the broker holds before a queue's oldest untiered
    message; both infinite when nothing is untiered (:meth:`NONE_PENDING`)."""

    bytes: float
    seconds: float

    @classmethod
    def none_pending(cls) -> Headroom:
        return cls(math.inf, math.inf)

    @classmethod
    def lost(cls) -> Headroom:
        """The oldest untiered message is already deleted."""
        return cls(0, 0.0)

    @property
    def finite(self) -> bool:
        return math.isfinite(self.bytes)


def hot_oldest(hot: HotStore) -> HotOldest | None:
    """The oldest commitlog file and its first record's store time; None when the store
    has no commitlog file or the file went away (deleted) while we read it."""
    files = hot.commitlog_files()
    if not files:
        return None
    base = files.min_offset
    try:
        return HotOldest(base, hot.read_store_timestamp(base))
    except TieredStoreError:
        return None
