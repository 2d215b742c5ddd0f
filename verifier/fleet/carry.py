"""The rule by which an incremental fingerprint carries a block forward from the broker's
previous fingerprint instead of reading it (:func:`carries`; docs/verification.md,
"Incremental fingerprints").

A block of the previous fingerprint is carried forward, digest, store times and leaf
digests as they were, only when all of these hold:

* the block has the same ``[start, end)`` now (a hot min that moved past it drops it: it
  is not among the blocks of the hot range; one that moved inside it, or a hot max that
  moved inside it, gives another range, read whole);
* the consume queue holds every unit of it now (read: 20 bytes per offset);
* its **first and last leaves** hash now, from the units and commit-log records the
  broker holds, to the leaf digests stored: so the block's first and last units and
  records, the store times of both included, are what they were. A tail the broker
  truncated and wrote again after an unclean restart, or a consume-queue or commit-log
  file replaced under the block's edges, changes them;
* no ``stored_from`` time must be searched inside it (the caller's check).

What this cannot see (a byte changed inside a block, away from its edges, with no change
of range) the periodic full run does (``--full-every``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tieredstore.cold.fingerprint import Block
from tieredstore.formats.consumequeue import Units
from tieredstore.hot.commitlog import HotCommitlog

__all__ = ["CarryCheck", "carries"]


@dataclass(frozen=True, slots=True)
class CarryCheck:
    """Whether a previous block is unchanged (:func:`carries`) and the record bytes read
    to decide it."""

    unchanged: bool
    read_bytes: int


def carries(
    old: Block, end: int, units: Units, commitlog: HotCommitlog, leaf_offsets: int
) -> CarryCheck:
    """Whether ``old`` (a block of the previous fingerprint, of ``leaf_offsets`` per leaf)
    may be carried forward as the block ``[old.start, end)`` whose units the consume
    queue holds now are ``units`` (module doc). Reads its first and last leaves' records.

    Raises:
        OffsetOutOfRangeError, StoreNotFoundError: a record is no longer in the commit log.
    """
    if old.end != end or not old.leaves or units.shape[0] != end - old.start:
        return CarryCheck(unchanged=False, read_bytes=0)
    edges = old.edge_leaves(leaf_offsets)
    read = 0
    for leaf in edges:
        part = units[leaf.start - old.start : leaf.end - old.start]
        sizes = part["size"].astype(np.int64)
        records = commitlog.gather(part["commitlog_offset"].astype(np.int64), sizes)
        read += len(records)
        hasher = leaf.hasher()
        hasher.update(part, records)
        if hasher.hexdigest() != leaf.digest:
            return CarryCheck(unchanged=False, read_bytes=read)
    return CarryCheck(unchanged=True, read_bytes=read)
