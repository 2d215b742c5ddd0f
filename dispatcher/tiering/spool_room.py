"""How much a tiering round may spool, so a round always fits the state dir's disk.

A round gathers its segments into spool files under ``<state.dir>/spool`` before it
uploads them (:mod:`tieredstore.dispatcher.tiering.commitlog_pass`); a round of a large backlog may
want gigabytes.
Each round is planned within :func:`spool_room`: the free space of the spool's
filesystem less :data:`SPOOL_RESERVE` (room for the catalogue's SQLite journal and
WAL), and at most ``tiering.spool_max_bytes`` when that is set. A backlog that does not
fit is taken in smaller rounds (:class:`RoundBudget`); a single segment that does not
fit alone cannot be tiered at all: its queue gets :class:`SpoolTooSmallError` each tick,
``tieredstore_spool_too_small`` is 1, and the ``TieredStoreSpoolTooSmall`` alert fires.
With ``cold.compression`` on, each segment's compressed copy is written beside its spool
file before it is uploaded, and a round's budget counts the most that copy can take.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tieredstore.cold.compressed.frames import FrameSettings, stored_bound
from tieredstore.dispatcher.tiering.planner import SegmentPlan
from tieredstore.errors import SpoolTooSmallError
from tieredstore.hot.store import QueueKey
from tieredstore.humanize import human_bytes

__all__ = ["SPOOL_RESERVE", "RoundBudget", "spool_room"]

#: Left free on the state dir's filesystem for the catalogue (SQLite journal and WAL).
SPOOL_RESERVE: Final = 64 << 20


def spool_room(spool_dir: Path | None, cap: int) -> int:
    """Bytes one round may spool now: free space less the reserve, at most ``cap`` (> 0).

    The spool directory may not exist yet: its nearest existing parent is measured.
    """
    probe = spool_dir if spool_dir is not None else Path(".")
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = max(shutil.disk_usage(probe).free - SPOOL_RESERVE, 0)
    return min(free, cap) if cap > 0 else free


@dataclass(slots=True)
class RoundBudget:
    """The records and spool bytes one round may still take.

    ``encoded``: the round's segments are also encoded beside their spool files
    (``cold.compression``, :class:`~tieredstore.dispatcher.tiering.uploader.Encodings`), so each
    counts its spool file and the most its encoded copy can take
    (:func:`~tieredstore.cold.compressed.frames.stored_bound`); None: the spool file
    alone."""

    max_records: int
    max_bytes: int
    encoded: FrameSettings | None = None
    records: int = 0
    bytes: int = 0

    def cost(self, plan: SegmentPlan) -> int:
        """The spool bytes ``plan`` takes in this round."""
        if self.encoded is None:
            return plan.nbytes
        return plan.nbytes + stored_bound(plan.nbytes, self.encoded)

    def full(self) -> bool:
        return self.records >= self.max_records or self.bytes >= self.max_bytes

    def admit(self, key: QueueKey, plan: SegmentPlan) -> SegmentPlan | SpoolTooSmallError | None:
        """The plan when it fits; None when it would overflow a round that already holds
        others (plan it again next round); an error when it alone does not fit."""
        cost = self.cost(plan)
        if self.bytes + cost > self.max_bytes:
            if self.bytes:
                return None
            copy = "" if self.encoded is None else " (with its compressed copy)"
            return SpoolTooSmallError(
                f"segment of {human_bytes(plan.nbytes)}{copy} does not fit the spool: "
                f"{human_bytes(self.max_bytes)} free (free space of the state dir less "
                f"{human_bytes(SPOOL_RESERVE)}, or tiering.spool_max_bytes)",
                where=f"{key}@{plan.start}",
            )
        self.records += plan.count
        self.bytes += cost
        return plan
