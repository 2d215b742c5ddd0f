"""Uploading one gathered segment: its COMMIT_LOG and CONSUME_QUEUE objects, at once.

The COMMIT_LOG bytes were already read from the hot store, checked against their CQ
units, rewritten (bytes [28, 36) = cold offset) and hashed by the commitlog-order pass
(:mod:`tieredstore.dispatcher.tiering.commitlog_pass`), which left them in a local spool file. Here
that file is handed to :meth:`Backend.write_file`: streamed in chunks of ``batch_bytes`` with the
lease checked before every chunk (S3: multipart parts), or on POSIX hard-linked into place, so
memory per upload is one chunk whatever the segment size, and a retried upload writes
the same spool file again.

With ``cold.compression = "zstd"`` (``frames`` given) the spool file is first encoded
beside itself (``<spool>.zst``, seekable zstd frames: :mod:`tieredstore.cold.compressed.frames`, in
a thread, one frame in memory) and that file is uploaded; size and digest stay those of
the uncompressed bytes, the stored size goes to the manifest (format 3).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from tieredstore.backends.base import Backend
from tieredstore.cold.compressed.framed import Framed
from tieredstore.cold.compressed.frames import FrameSettings, encode_file
from tieredstore.cold.digests import digest
from tieredstore.dispatcher.tiering.commitlog_pass import Spooled
from tieredstore.dispatcher.tiering.planner import SegmentPlan
from tieredstore.errors import StoreError
from tieredstore.formats.consumequeue import encode_units, make_units

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
    #: How the COMMIT_LOG object is stored (None: plain).
    cl_framed: Framed | None = None


async def _commit_log_source(
    spooled: Spooled, frames: FrameSettings | None
) -> tuple[Path, int, Framed | None]:
    """The file to upload as the COMMIT_LOG object, its size and how it is stored: the
    spool file itself (plain), or it encoded beside it (``.zst``; the caller deletes it),
    its stored digest computed as it is written, never read back."""
    if frames is None:
        return spooled.path, spooled.size, None
    source = spooled.path.with_name(spooled.path.name + ".zst")
    size, crc = await asyncio.to_thread(encode_file, spooled.path, source, frames)
    return source, size, Framed(size, crc)


async def upload_objects(
    plan: SegmentPlan,
    spooled: Spooled,
    *,
    backend: Backend,
    cl_key: str,
    cq_key: str,
    cl_base: int,
    batch_bytes: int,
    check: Callable[[], None],
    frames: FrameSettings | None = None,
) -> UploadedObjects:
    """Write the segment's COMMIT_LOG (from its spool file) and CONSUME_QUEUE objects
    concurrently.

    The caller gives names unique to this upload attempt; the objects count only once a
    manifest names them. ``check`` runs before each chunk and before the CONSUME_QUEUE
    write; whatever it raises (the lease is lost) aborts the upload and no object of
    this attempt is published past that point. ``frames``: compress the COMMIT_LOG
    object (None: upload it plain).
    """
    sizes = plan.units["size"].astype(np.int64)
    cold = cl_base + np.cumsum(sizes) - sizes
    cq = encode_units(make_units(cold, sizes, plan.units["tags_code"]))

    async def write_cq() -> None:
        check()
        await backend.write(cq_key, cq)

    # Both objects at once: neither counts before the manifest, which the caller writes
    # only after both returned. If one fails, the other finishes (or fails) before the
    # error is raised, so nothing of this attempt is written afterwards.
    source, stored, framed = await _commit_log_source(spooled, frames)
    try:
        written = await asyncio.gather(
            backend.write_file(cl_key, source, chunk_bytes=batch_bytes, check=check),
            write_cq(),
            return_exceptions=True,
        )
    finally:
        if frames is not None:
            source.unlink(missing_ok=True)
    for outcome in written:
        if isinstance(outcome, BaseException):
            raise outcome
    cl_size = cast(int, written[0])
    if cl_size != stored:
        raise StoreError(f"wrote {cl_size} bytes from a file of {stored}", where=str(source))
    return UploadedObjects(
        cl_size=spooled.size,
        cl_framed=framed,
        cl_digest=spooled.digest,
        cq_size=len(cq),
        cq_digest=digest(cq),
        min_store_timestamp=spooled.min_store_timestamp,
        max_store_timestamp=spooled.max_store_timestamp,
    )
