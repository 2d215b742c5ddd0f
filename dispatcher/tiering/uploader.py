"""Uploading one gathered segment: its COMMIT_LOG and CONSUME_QUEUE objects, at once.

The COMMIT_LOG bytes were already read from the hot store, checked against their CQ
units, rewritten (bytes [28, 36) = cold offset) and hashed by the commitlog-order pass
(:mod:`tieredstore.dispatcher.tiering.commitlog_pass`), which left them in a local spool file. Here
that file is handed to :meth:`Backend.write_file`: streamed in chunks of ``batch_bytes`` with the
lease checked before every chunk (S3: multipart parts), or on POSIX hard-linked into place, so
memory per upload is one chunk whatever the segment size, and a retried upload writes
the same spool file again.

With ``cold.compression = "zstd"`` (``encodings`` given) the spool file's encoded copy
is uploaded instead (``<spool file>.zst``, seekable zstd frames,
:func:`~tieredstore.cold.compressed.frames.encode_file`) and deleted after the attempt;
size and digest stay those of the uncompressed bytes, the stored size and digest go to
the manifest (format 3).

**Encoded ahead** (:class:`Encodings`, :func:`encoding_ahead`). Encoded inside its
upload slot, each segment's zstd work waited for a slot and then ran while the other
slots sat in their fsyncs, so on a small host a round's uploads took about the encode's
whole CPU time longer. A round instead starts the encoding of all its segments as soon
as its pass has returned, in the order the uploads take them, in at most ``threads``
threads; an upload then takes its segment's copy, usually done already. A 256 MiB
catch-up with compression on took 1.20 s instead of 1.31 (median of six alternating
runs; 1.00 s with compression off: BENCHMARKS.md).

Its contracts:

* ``take`` returns each started encoding once; the caller owns (and deletes) the file.
  A second ``take`` of the same segment (an upload retried after its file was deleted),
  or one never started, encodes it then, in a thread.
* An encoding that failed raises from ``take`` (the upload attempt fails and is retried
  as any other, encoding afresh).
* :meth:`Encodings.settle` cancels the round's encodings not begun and waits for the
  running ones: after it, nothing writes into the round's spool directory, which may
  then go. Files of encodings nobody took are left there (the directory's removal takes
  them). Another round's encodings, in threads of their own, are not touched.
* The encoded copies of a round exist beside its spool files until each upload is
  done: a round's spool budget counts both
  (:func:`~tieredstore.cold.compressed.frames.stored_bound`,
  :class:`~tieredstore.dispatcher.tiering.spool_room.RoundBudget`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
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

__all__ = [
    "Encoded",
    "Encodings",
    "Started",
    "UploadedObjects",
    "encoded_path",
    "encoding_ahead",
    "upload_objects",
]


@dataclass(frozen=True, slots=True)
class Encoded:
    """A segment's COMMIT_LOG object as encoded: the file to upload and how it is stored
    (its stored size and the CRC-32C of its bytes, computed as they were written)."""

    path: Path
    framed: Framed


def encoded_path(spooled: Spooled) -> Path:
    """Where ``spooled``'s encoded copy is written: beside it, ``.zst`` appended."""
    return spooled.path.with_name(spooled.path.name + ".zst")


@dataclass(frozen=True, slots=True)
class Started:
    """One round's encodings, as :meth:`Encodings.start` began them: its own threads and
    the spool files they encode."""

    pool: concurrent.futures.ThreadPoolExecutor
    paths: tuple[Path, ...]


class Encodings:
    """Encodes segments for upload, ahead when a round has started them (see the
    module's contracts). One instance serves every round of a writer; each round's
    encodings run in threads of their own (two rounds may overlap: a tick's pass goes
    on while the next tick tiers other queues), which :meth:`settle` ends."""

    def __init__(self, frames: FrameSettings, *, threads: int) -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.frames = frames
        self.threads = threads
        #: Encodings started and not yet taken (a round's pool waits for taken ones).
        self._started: dict[Path, concurrent.futures.Future[tuple[int, str]]] = {}

    def start(self, segments: Iterable[Spooled]) -> Started:
        """Start encoding each of ``segments``, in order, in at most ``threads`` threads
        of the round's own; hand the result to :meth:`settle` when the round ends."""
        pool = concurrent.futures.ThreadPoolExecutor(self.threads, thread_name_prefix="encode")
        paths: list[Path] = []
        for spooled in segments:
            self._started[spooled.path] = pool.submit(
                encode_file, spooled.path, encoded_path(spooled), self.frames
            )
            paths.append(spooled.path)
        return Started(pool, tuple(paths))

    async def take(self, spooled: Spooled) -> Encoded:
        """``spooled`` encoded: the encoding started for it (awaited) the first time it
        is taken, else (a retry, or never started) encoded now.

        Raises:
            OSError: the spool file could not be read or the copy written.
        """
        started = self._started.pop(spooled.path, None)
        target = encoded_path(spooled)
        if started is None or started.cancelled():
            size, crc = await asyncio.to_thread(encode_file, spooled.path, target, self.frames)
        else:
            size, crc = await asyncio.wrap_future(started)
        return Encoded(target, Framed(size, crc))

    async def settle(self, started: Started) -> None:
        """End a round's encodings: those not begun are cancelled, the running ones
        waited for (also when the caller is cancelled meanwhile)."""
        for path in started.paths:
            self._started.pop(path, None)
        done = asyncio.ensure_future(
            asyncio.to_thread(started.pool.shutdown, True, cancel_futures=True)
        )
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            await asyncio.gather(done, return_exceptions=True)
            raise


@contextlib.asynccontextmanager
async def encoding_ahead(
    encodings: Encodings | None, segments: Iterable[Spooled]
) -> AsyncIterator[None]:
    """Within: ``segments`` encoded ahead of their uploads, in order; after: their
    encodings settled (:meth:`Encodings.settle`). ``encodings`` None (plain): nothing."""
    if encodings is None:
        yield
        return
    started = encodings.start(segments)
    try:
        yield
    finally:
        await encodings.settle(started)


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
    spooled: Spooled, encodings: Encodings | None
) -> tuple[Path, int, Framed | None]:
    """The file to upload as the COMMIT_LOG object, its size and how it is stored: the
    spool file itself (plain), or its encoded copy (``.zst``; the caller deletes it),
    whose stored digest was computed as it was written, never read back."""
    if encodings is None:
        return spooled.path, spooled.size, None
    encoded = await encodings.take(spooled)
    return encoded.path, encoded.framed.stored_size, encoded.framed


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
    encodings: Encodings | None = None,
) -> UploadedObjects:
    """Write the segment's COMMIT_LOG (from its spool file) and CONSUME_QUEUE objects
    concurrently.

    The caller gives names unique to this upload attempt; the objects count only once a
    manifest names them. ``check`` runs before each chunk and before the CONSUME_QUEUE
    write; whatever it raises (the lease is lost) aborts the upload and no object of
    this attempt is published past that point. ``encodings``: upload the COMMIT_LOG
    object compressed (None: plain).
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
    source, stored, framed = await _commit_log_source(spooled, encodings)
    try:
        written = await asyncio.gather(
            backend.write_file(cl_key, source, chunk_bytes=batch_bytes, check=check),
            write_cq(),
            return_exceptions=True,
        )
    finally:
        if encodings is not None:
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
