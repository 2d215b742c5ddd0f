"""Batch objects built by hand from segments: the same bytes, committed as slices.

A :class:`~tieredstore.cold.segment.Segment` holds exactly what a slice of the same
offsets holds (its COMMIT_LOG and CONSUME_QUEUE bytes), so turning segments into one batch
is how tests build a cold store whose newest data sits in a batch object — and how they
compare a range read from a batch with the same range read from its (compacted) segment.
"""

from __future__ import annotations

from collections.abc import Sequence

from tests.support.stores.segments import T0, WRITER
from tieredstore.backends.base import Backend
from tieredstore.cold.batch import BatchIndex, SlicePart, build_batch
from tieredstore.cold.compressed.frames import FrameSettings
from tieredstore.cold.manifest import Manifest
from tieredstore.cold.segment import Segment


def slice_part(segment: Segment) -> SlicePart:
    """The slice that holds exactly ``segment``'s offsets and bytes."""
    m = segment.manifest
    return SlicePart(
        topic=m.topic,
        queue_id=m.queue_id,
        start_offset=m.start_offset,
        end_offset=m.end_offset,
        cl_base=m.cl_base,
        commit_log=segment.commit_log,
        consume_queue=segment.consume_queue,
        min_store_timestamp=m.min_store_timestamp,
        max_store_timestamp=m.max_store_timestamp,
    )


def batch_of(
    segments: Sequence[Segment],
    *,
    sequence: int,
    lease_epoch: int = 1,
    created_at_ms: int = T0 + 60_000,
    frames: FrameSettings | None = None,
) -> tuple[BatchIndex, bytes]:
    """One batch holding every segment of ``segments`` (one per queue) as a slice; with
    ``frames``, its data section stored compressed (batch format 2)."""
    first = segments[0].manifest
    return build_batch(
        cluster=first.cluster,
        broker=first.broker,
        sequence=sequence,
        writer_id=WRITER,
        lease_epoch=lease_epoch,
        created_at_ms=created_at_ms,
        parts=[slice_part(s) for s in segments],
        frames=frames,
    )


async def upload_batch(
    backend: Backend,
    segments: Sequence[Segment],
    *,
    sequence: int,
    frames: FrameSettings | None = None,
) -> str:
    """Write :func:`batch_of` ``segments`` at its batch key (create-if-absent); the key."""
    index, data = batch_of(segments, sequence=sequence, frames=frames)
    await backend.create(index.key, data)
    return index.key


async def rebatch(
    backend: Backend,
    manifests: Sequence[Manifest],
    *,
    sequence: int,
    frames: FrameSettings | None = None,
) -> str:
    """Move committed segments (one per queue, each the newest of its queue) into one
    batch (compressed: ``frames``): the batch is created first, then each segment's
    manifest and objects are deleted — as if they had been committed as slices and never
    compacted. The key."""
    segments = [
        Segment(m, await backend.read(m.commit_log_key), await backend.read(m.consume_queue_key))
        for m in manifests
    ]
    key = await upload_batch(backend, segments, sequence=sequence, frames=frames)
    for m in manifests:
        for k in (m.key, m.commit_log_key, m.consume_queue_key):
            await backend.delete(k)
    return key
