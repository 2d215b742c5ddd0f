"""Test helper: make a frozen broker's store look as a power cut would leave it.

Only what the broker had flushed survives. Which position that is, seen from outside, is
what the checkpoint vouches for: every record stored strictly before its
``physicMsgTimestamp`` (``MappedFileQueue.flush`` records a file's last store time before
flushing it; see dispatcher/tiering/durability.py). That is a lower bound — the broker's 500 ms
flushes, the kernel's writeback and the sidecar's own ``fdatasync`` make more durable —
so this cut is the *worst* power cut the broker's own guarantee allows.

:func:`cut_power` zeroes every commitlog byte from that position on (whole later files
included) and every consume-queue unit that points there; the ``abort`` file the killed
broker leaves makes its next start run ``CommitLog.recoverAbnormally``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tieredstore.formats.consumequeue import CQ_UNIT_SIZE, decode_units
from tieredstore.hot.store import HotStore

__all__ = ["PowerCut", "cut_at", "cut_power", "flushed_position"]


@dataclass(frozen=True, slots=True)
class PowerCut:
    """Where the cut fell: the checkpoint's time, the commitlog offset from which data
    was lost, and the commitlog end before the cut."""

    checkpoint_ms: int
    position: int
    written_end: int

    @property
    def lost_bytes(self) -> int:
        return self.written_end - self.position


def flushed_position(hot: HotStore) -> PowerCut:
    """The first commitlog offset the checkpoint does not vouch for, and the data end."""
    ts = hot.checkpoint().physic_msg_timestamp
    position = end = None
    for scan in hot.scan_commitlog():
        end = scan.offset + scan.record.total_size
        if position is None and scan.record.store_timestamp >= ts:
            position = scan.offset
    if end is None:
        raise AssertionError("the commitlog holds no record")
    return PowerCut(ts, end if position is None else position, end)


def _zero(path: Path, start: int) -> None:
    size = path.stat().st_size
    if start >= size:
        return
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, bytes(size - start), start)
        os.fsync(fd)
    finally:
        os.close(fd)


def cut_at(root: Path, position: int) -> None:
    """Zero every commitlog byte of the store at ``root`` from ``position`` on and every
    consume-queue unit that points there: the store as a replica that received only the
    bytes below ``position`` holds it (a lagging slave), or as a power cut leaves it."""
    hot = HotStore(root)
    for f in hot.commitlog_files().files:
        if f.end > position:
            _zero(f.path, max(position - f.base, 0))
    for q in hot.queues():
        for f in hot.cq_files(q.topic, q.queue_id).files:
            units = decode_units(f.path.read_bytes()[: f.size // CQ_UNIT_SIZE * CQ_UNIT_SIZE])
            beyond = np.flatnonzero(units["commitlog_offset"] >= position)
            if beyond.size:
                _zero(f.path, int(beyond[0]) * CQ_UNIT_SIZE)


def cut_power(root: Path) -> PowerCut:
    """Zero what a worst-case power cut loses in the store at ``root`` (broker stopped)."""
    cut = flushed_position(HotStore(root))
    cut_at(root, cut.position)
    return cut
