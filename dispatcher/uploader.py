"""Uploading one planned segment: COMMIT_LOG object, then CONSUME_QUEUE object.

The COMMIT_LOG object is streamed in batches of about ``batch_bytes``: each batch of hot
records is read, checked against its CQ units, has bytes [28, 36) rewritten to the
records' cold offsets, is hashed, and is handed to the backend's streaming write. Memory
per upload is therefore about one batch, whatever the segment size.

Hot records are checked as they pass (:func:`tieredstore.segment.rewrite_records`,
vectorised): totalSize equals the unit's size and the queueOffset field equals the queue
offset. A mismatch means the broker's store no longer matches its own consume queue at
that point — a :class:`~tieredstore.errors.CorruptRecordError` naming the queue offset,
and nothing is committed.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from dispatcher.planner import SegmentPlan
from tieredstore.backends.base import Backend
from tieredstore.formats.consumequeue import encode_units, make_units
from tieredstore.hotstore import HotStore
from tieredstore.segment import rewrite_records

__all__ = ["UploadedObjects", "upload_objects"]


@dataclass(frozen=True, slots=True)
class UploadedObjects:
    """What was written for one segment, for its manifest."""

    cl_size: int
    cl_digest: str
    cq_size: int
    cq_digest: str
    min_store_timestamp: int
    max_store_timestamp: int


def _batches(sizes: np.ndarray, batch_bytes: int) -> list[tuple[int, int]]:
    """Split record indexes into consecutive runs of about ``batch_bytes`` (>= 1 record)."""
    ends = np.cumsum(sizes.astype(np.int64))
    out: list[tuple[int, int]] = []
    i, n, consumed = 0, int(sizes.shape[0]), 0
    while i < n:
        j = int(np.searchsorted(ends, consumed + batch_bytes, side="right"))
        j = max(j, i + 1)
        out.append((i, j))
        consumed = int(ends[j - 1])
        i = j
    return out


async def upload_objects(
    plan: SegmentPlan,
    *,
    hot: HotStore,
    backend: Backend,
    cl_key: str,
    cq_key: str,
    cl_base: int,
    batch_bytes: int,
) -> UploadedObjects:
    """Write the segment's COMMIT_LOG then CONSUME_QUEUE object; return sizes and digests.

    Both names are deterministic (from ``cl_base`` and ``plan.start``), so a retry after
    a crash rewrites the same objects; they count only once a manifest names them.
    """
    sizes = plan.units["size"].astype(np.int64)
    cold = cl_base + np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    queue = plan.queue
    cl_hash = hashlib.sha256()
    ts_min: list[int] = []
    ts_max: list[int] = []

    async def chunks() -> AsyncIterator[bytes]:
        offsets = plan.units["commitlog_offset"]
        for lo, hi in _batches(sizes, batch_bytes):
            pieces = await asyncio.to_thread(hot.read_records_bytes, offsets[lo:hi], sizes[lo:hi])
            batch = rewrite_records(
                pieces,
                sizes[lo:hi],
                start_offset=plan.start + lo,
                cold_base=int(cold[lo]),
                where=lambda q: f"hot record of {queue} at queue offset {q}",
            )
            ts_min.append(batch.min_store_timestamp)
            ts_max.append(batch.max_store_timestamp)
            cl_hash.update(batch.data)
            yield batch.data

    cl_size = await backend.write_chunks(cl_key, chunks())
    cq = encode_units(make_units(cold, sizes, plan.units["tags_code"]))
    await backend.write(cq_key, cq)
    return UploadedObjects(
        cl_size=cl_size,
        cl_digest=cl_hash.hexdigest(),
        cq_size=len(cq),
        cq_digest=hashlib.sha256(cq).hexdigest(),
        min_store_timestamp=min(ts_min),
        max_store_timestamp=max(ts_max),
    )
