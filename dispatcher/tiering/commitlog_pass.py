"""The commitlog-order pass: gather many queues' planned segments in one sequential read.

RocketMQ appends the records of every queue to one commitlog, so a queue's records are
interleaved with all the others'. Reading them queue by queue costs one read per record.
The pass instead takes the segments planned for many queues at once (each a
:class:`~tieredstore.dispatcher.tiering.planner.SegmentPlan`: which queue offsets, and their CQ
units), and:

1. merges their records into commitlog order with one stable sort of every segment's
   commitlog offsets, and hands them on one span of ``span_bytes`` (64 MiB) of
   commitlog at a time (a slice of that order; no step per segment and span);
2. reads the commitlog once, front to back, in windows of up to ``window_bytes`` that
   hold whole records of one commitlog file (a window also ends before a gap of more
   than ``gap_bytes`` between due records, so a lone due queue is not read through
   everyone else's data);
3. per window, with numpy over all its records at once: checks every record against its
   unit (:class:`~tieredstore.cold.segment.RecordHeads`: length, magic, totalSize,
   queueOffset; :class:`~tieredstore.cold.segment.RecordOwners`: topic, queueId and
   physicalOffset), reads the store timestamps, and
   rewrites bytes [28, 36) to each record's cold offset (the segment's ``cl_base`` plus
   its position in the segment);
4. groups the window's records by segment with one ``pyarrow`` ``take`` (a memcpy per
   record in C, no Python per record), updates each segment's digest (CRC-32C) with its
   whole run, and queues the run for the segment's **spool file**; one writer thread
   writes the queued runs of every segment with one ``writev`` each, a batch per
   ``hold_bytes`` (8 MiB) gathered.

Memory is one window and its grouped copy, two spool batches (``2 * hold_bytes``), the
merge's order (about 28 bytes a record) and arrays of one span, and the plans' units,
whatever the number of queues; each
segment's bytes go to its spool file as they are gathered (a temp file under
``spool_dir``), from which the upload then writes them.

Errors are per segment: a record that does not match its unit fails its segment with
:class:`~tieredstore.errors.CorruptRecordError` (its other records are dropped, the
other segments go on); a window that cannot be read fails the segments with records in
it (OffsetOutOfRangeError when the commitlog file is gone, TruncatedDataError when it is
shorter than its records).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from tieredstore.cold.digests import hasher
from tieredstore.cold.segment import RecordHeads, RecordOwners, TopicTable
from tieredstore.dispatcher.tiering.planner import SegmentPlan
from tieredstore.errors import (
    CorruptRecordError,
    OffsetOutOfRangeError,
    StoreError,
    TieredStoreError,
    TruncatedDataError,
)
from tieredstore.formats.arrownp import gather_ranges
from tieredstore.formats.record import (
    PHYSICAL_OFFSET_AT,
)
from tieredstore.formats.vector import scatter_be_i64, store_timestamps
from tieredstore.hot.commitlog import read_span
from tieredstore.hot.files import MappedFileList
from tieredstore.hot.store import HotStore

__all__ = ["GatherJob", "Spooled", "gather_segments"]

I64 = npt.NDArray[np.int64]

#: Default window: large sequential reads, small enough to keep memory flat.
WINDOW_BYTES = 2 << 20
#: Records are merged into commitlog order this many commitlog bytes at a time.
SPAN_BYTES = 64 << 20
#: A gap between due records wider than this ends the window (read around it).
GAP_BYTES = 256 << 10


def _pool() -> pa.MemoryPool:
    """Where grouped copies come from: jemalloc told to return freed pages at once
    (pyarrow's default pool keeps them: the sidecar's peak RSS grew by about 100 MiB),
    else the system's malloc."""
    try:
        pool = pa.jemalloc_memory_pool()
        pa.jemalloc_set_decay_ms(0)
    except NotImplementedError:
        return pa.system_memory_pool()
    return pool


_POOL = _pool()


@dataclass(frozen=True, slots=True)
class GatherJob:
    """One planned segment to gather, and the cold commitlog offset its bytes start at."""

    plan: SegmentPlan
    cl_base: int


@dataclass(frozen=True, slots=True)
class Spooled:
    """A segment's COMMIT_LOG bytes, checked and rewritten, in a local spool file."""

    path: Path
    size: int
    digest: str  # of the whole file, by :data:`tieredstore.cold.digests.WRITTEN`
    min_store_timestamp: int
    max_store_timestamp: int


@dataclass(slots=True)
class _Records:
    """Due records of one span of the commitlog, in commitlog order (parallel arrays)."""

    offset: I64  # commitlog offset
    size: I64
    job: I64  # index into the jobs
    queue_offset: I64
    cold: I64  # cold commitlog offset after the rewrite


class _Merge:
    """The jobs' records merged into commitlog order, one span of ``span`` commitlog
    bytes at a time (the first remaining record's offset plus ``span``), so the merged
    arrays stay small however many records the jobs hold.

    One stable sort of every job's commitlog offsets (ties keep job order, then queue
    order) gives the order once; a span is then a slice of it, its columns gathered
    with a few numpy calls: no Python step per job, span or record. Held across the
    spans: the sorted offsets, the order, and each record's job, size and cold offset
    (about 28 bytes a record; the plans' units are 20)."""

    def __init__(self, jobs: Sequence[GatherJob], span: int) -> None:
        self.span = max(span, 1)
        units = [j.plan.units for j in jobs]
        counts = np.array([u.shape[0] for u in units], dtype=np.int64)
        n = int(counts.sum())
        index = np.int32 if n < 1 << 31 else np.int64
        empty = np.zeros(0, dtype=np.int64)
        offsets = np.concatenate([empty, *(u["commitlog_offset"] for u in units)]).astype(np.int64)
        self.size = np.concatenate([empty, *(u["size"] for u in units)]).astype(np.int32)
        self.job = np.repeat(np.arange(len(jobs), dtype=index), counts)
        self.first = np.cumsum(counts) - counts  # each job's first record
        self.start = np.array([j.plan.start for j in jobs], dtype=np.int64)
        # Cold offset of each record: its job's cl_base plus the sizes before it in the job.
        before = np.cumsum(self.size, dtype=np.int64) - self.size
        cl_base = np.array([j.cl_base for j in jobs], dtype=np.int64)
        self.cold = before + (cl_base - np.append(before, 0)[self.first])[self.job]
        self.order = np.argsort(offsets, kind="stable").astype(index)
        self.sorted = offsets[self.order]

    def spans(self) -> Iterator[_Records]:
        n = int(self.sorted.shape[0])
        lo = 0
        while lo < n:
            end = int(self.sorted[lo]) + self.span
            hi = lo + int(np.searchsorted(self.sorted[lo:], end, side="left"))
            yield self._take(lo, hi)
            lo = hi

    def _take(self, lo: int, hi: int) -> _Records:
        """The records at ``[lo, hi)`` of the commitlog order."""
        idx = self.order[lo:hi]
        job = self.job[idx].astype(np.int64)
        return _Records(
            offset=self.sorted[lo:hi],
            size=self.size[idx].astype(np.int64),
            job=job,
            queue_offset=self.start[job] + (idx - self.first[job]),
            cold=self.cold[idx],
        )


@dataclass(frozen=True, slots=True)
class _Window:
    lo: int  # record indexes [lo, hi)
    hi: int
    file_index: int


def _windows(rec: _Records, files: MappedFileList, window: int, gap: int) -> list[_Window]:
    """Cut the records into windows: one file, at most ``window`` bytes (or one record),
    no gap wider than ``gap`` inside. A Python loop per window, never per record."""
    n = int(rec.offset.shape[0])
    bases = np.array([f.base for f in files.files], dtype=np.int64)
    file_of = np.searchsorted(bases, rec.offset, side="right") - 1
    end = np.maximum.accumulate(rec.offset + rec.size)  # rises even if records overlap
    breaks = np.zeros(n, dtype=bool)
    if n:
        breaks[0] = True
        breaks[1:] = (file_of[1:] != file_of[:-1]) | (rec.offset[1:] - end[:-1] > gap)
    starts = [*np.flatnonzero(breaks).tolist(), n]
    out: list[_Window] = []
    for run_lo, run_hi in itertools.pairwise(starts):
        lo = run_lo
        while lo < run_hi:
            limit = int(rec.offset[lo]) + window
            hi = lo + int(np.searchsorted(end[lo:run_hi], limit, side="right"))
            hi = max(hi, lo + 1)
            out.append(_Window(lo, hi, int(file_of[lo])))
            lo = hi
    return out


def _libc(name: str, *argtypes: type[ctypes._SimpleCData[int]]) -> Callable[..., int] | None:
    """The C library's function ``name`` (Linux system-call wrappers Python's ``os``
    lacks), or None where there is none (not Linux, not glibc): callers then skip it."""
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (AttributeError, OSError):
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return cast("Callable[..., int]", fn)


# sync_file_range(fd, offset, nbytes, flags) and fallocate(fd, mode, offset, len).
_SYNC_FILE_RANGE = _libc(
    "sync_file_range", ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint
)
_FALLOCATE = _libc("fallocate64", ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
_SYNC_FILE_RANGE_WRITE = 2
#: Spooled bytes per file whose writeback is started at once (measured on ext4 with
#: 128 files: 1 MiB cost CPU, 4 MiB left more to flush when the segments commit).
_WRITEBACK_BYTES = 2 << 20
_IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024) if hasattr(os, "sysconf") else 16


def _reserve(fd: int, size: int) -> None:
    """Allocate a spool file's final size at once (Linux ``fallocate``): the filesystem
    lays it out in one extent instead of allocating a block range at every early
    writeback, which with 128 files growing side by side cost more CPU than the
    writes (ext4, measured). The file is that long from now on; only a segment whose
    every byte was written is uploaded. A filesystem that cannot preallocate is
    written as it is: the system call, not ``posix_fallocate``, which would write
    zeros over the whole size there. Only files of at least ``_WRITEBACK_BYTES`` are
    reserved: a smaller one never sees an early writeback, so it is laid out once, when
    it is written back whole, and a reservation only cost its fallocate and a slower
    unlink (1,024 small queues: measurable in the round's spool removal)."""
    if size > 0 and _FALLOCATE is not None:
        _FALLOCATE(fd, 0, 0, size)  # a failure (EOPNOTSUPP, ENOSPC) only means no reservation


def start_writeback(fd: int, offset: int, size: int) -> None:
    """Ask the kernel to start writing ``[offset, offset + size)`` of ``fd`` to disk, not
    waiting for it (Linux ``sync_file_range(SYNC_FILE_RANGE_WRITE)``; Python's ``os``
    lacks it). A no-op where unavailable; durability still comes from the fsync when
    the object is published."""
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, offset, size, _SYNC_FILE_RANGE_WRITE)


class _Failures:
    """The jobs failed so far (first error wins) and a mask of those still good."""

    def __init__(self, jobs: int) -> None:
        self.errors: dict[int, TieredStoreError] = {}
        self.ok = np.ones(jobs, dtype=bool)

    def fail(self, job: int, error: TieredStoreError) -> None:
        self.errors.setdefault(job, error)
        self.ok[job] = False


#: Gathered bytes the spool collects before it writes every segment's waiting runs (one
#: ``writev`` per segment). Small appends cost a syscall, an inode time update and a
#: partly zeroed page each; batching makes a 128-queue pass's writes ~64 KiB.
SPOOL_HOLD_BYTES = 8 << 20


class _Spool:
    """The spool files of one pass, with running digests.

    The caller digests each run as it arrives (CRC-32C, while its bytes are still in the
    CPU's cache) and leaves it waiting, as a view of its grouped window. Once the
    windows collected reach ``hold_bytes``, the waiting runs go to one writer thread as a
    batch: every job with runs waiting writes them with one ``writev``. The caller then
    collects the next batch while this one is written; before handing that one over it
    waits for the previous, so files see their bytes in order and at most two batches
    (``2 * hold_bytes``) plus a window are held. One writer thread and syscalls of
    ~64 KiB keep the GIL quiet; a thread per few runs made the pass mostly GIL
    hand-offs. Files are opened on first write; :meth:`finish` writes what still waits.
    """

    def __init__(
        self,
        directory: Path,
        expected: Sequence[int],
        hold_bytes: int = SPOOL_HOLD_BYTES,
        *,
        writeback: bool = True,
    ) -> None:
        jobs = len(expected)
        # Early writeback and reservations: for files uploaded as they are (POSIX links
        # them into place); a file that is only encoded need never reach the disk.
        self.writeback = writeback
        self.directory = directory
        self.expected = expected  # each file's final size, reserved when it is opened
        self.fds: dict[int, int] = {}
        self.hashes = [hasher() for _ in range(jobs)]
        self.sizes = [0] * jobs  # bytes written to each file
        self.flushed = [0] * jobs  # bytes whose writeback was started
        self.paths = [directory / f"segment-{i}" for i in range(jobs)]
        self.hold_bytes = hold_bytes
        self._waiting: dict[int, list[memoryview]] = {}
        self._held = 0  # bytes of the windows the waiting runs are views of
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="spool")
        # Writeback requests go to a thread of their own: sync_file_range blocks while
        # the disk's queue is full, and the writer (so the pass) must not wait for it.
        self._flusher = ThreadPoolExecutor(1, thread_name_prefix="spool-flush")
        self._writing: Future[None] | None = None

    def submit(self, data: pa.Buffer, runs: Sequence[tuple[int, int, int]]) -> None:
        """Digest each ``(job, start, end)`` run of ``data`` and queue it for its file."""
        view = memoryview(data)
        waiting = self._waiting
        for job, lo, hi in runs:
            self.hashes[job].update(data.slice(lo, hi - lo))
            if job in waiting:
                waiting[job].append(view[lo:hi])
            else:
                waiting[job] = [view[lo:hi]]
        self._held += data.size
        if self._held >= self.hold_bytes:
            self._hand_over()

    def finish(self) -> None:
        """Write every run still waiting; wait for it (raises the first write error)."""
        self._hand_over()
        self.wait()

    def wait(self) -> None:
        """Wait for the batch being written; raise its error, if any."""
        writing, self._writing = self._writing, None
        if writing is not None:
            writing.result()

    def _hand_over(self) -> None:
        self.wait()
        batch, self._waiting, self._held = self._waiting, {}, 0
        if batch:
            self._writing = self._writer.submit(self._write_batch, batch)

    def _write_batch(self, batch: dict[int, list[memoryview]]) -> None:
        for job, parts in batch.items():
            self._write(job, parts)

    def _write(self, job: int, parts: list[memoryview]) -> None:
        """Write ``parts`` to ``job``'s file (``writev``, short writes resumed)."""
        fd = self.fds.get(job)
        if fd is None:
            fd = self.fds[job] = os.open(
                self.paths[job], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666
            )
            if self.writeback and self.expected[job] >= _WRITEBACK_BYTES:
                _reserve(fd, self.expected[job])
        while parts:
            batch = parts[:_IOV_MAX]
            written = os.writev(fd, batch)
            self.sizes[job] += written
            done = 0
            while done < len(batch) and written >= len(batch[done]):
                written -= len(batch[done])
                done += 1
            parts = parts[done:]
            if written:
                parts[0] = parts[0][written:]
        # Start writing the new bytes back (no waiting) once _WRITEBACK_BYTES are
        # pending: the upload's fsync then finds them on disk already (POSIX links the
        # spool file into place). Never per small write: many tiny disk writes.
        pending = self.sizes[job] - self.flushed[job]
        if self.writeback and pending >= _WRITEBACK_BYTES:
            self._flusher.submit(start_writeback, fd, self.flushed[job], pending)
            self.flushed[job] = self.sizes[job]

    def close(self) -> None:
        """Wait for the writer, stop it and close the files (runs still waiting are
        dropped: call :meth:`finish` first to keep them)."""
        try:
            self.wait()
        finally:
            self._writer.shutdown(wait=True)
            self._flusher.shutdown(wait=True)  # before the files it flushes are closed
            for fd in self.fds.values():
                os.close(fd)
            self.fds.clear()
            self._waiting = {}


@dataclass(frozen=True, slots=True)
class _Owners:
    """What each job's records must belong to: its topic (a row of ``topics``) and
    queue id; built once per pass (:class:`~tieredstore.cold.segment.RecordOwners`)."""

    topics: TopicTable
    queue_ids: I64

    @classmethod
    def of(cls, jobs: Sequence[GatherJob]) -> _Owners:
        table = TopicTable.of([j.plan.queue.topic for j in jobs])
        return cls(table, np.array([j.plan.queue.queue_id for j in jobs], dtype=np.int64))


def _check(
    win: npt.NDArray[np.uint8],
    rel: I64,
    rec: _Records,
    sel: slice,
    jobs: Sequence[GatherJob],
    owners: _Owners,
) -> tuple[npt.NDArray[np.bool_], dict[int, TieredStoreError]]:
    """Check the window's records against their units: the head
    (:class:`RecordHeads`: size, magic, queue offset) and the owner
    (:class:`RecordOwners`: topic, queue id, physical offset). Return the bad mask
    and, per failed job, the error of its first bad record."""
    expect = rec.queue_offset[sel]
    job = rec.job[sel]
    heads = RecordHeads.check(win, rel, rec.size[sel], expect)
    owner = RecordOwners.check(
        win, starts=rel, sizes=rec.size[sel], skip=heads.bad,
        queue_ids=owners.queue_ids[job], physical=rec.offset[sel],
        topics=owners.topics, topic_of=job,
    )  # fmt: skip
    bad = heads.bad | owner.bad
    errors: dict[int, TieredStoreError] = {}
    for k in np.flatnonzero(bad).tolist():
        j = int(job[k])
        if j not in errors:
            where = (
                f"hot record of {jobs[j].plan.queue} at queue offset {int(expect[k])} "
                f"(commitlog offset {int(rec.offset[sel][k])})"
            )
            fault = heads.fault(k) if heads.bad[k] else owner.fault(k)
            errors[j] = CorruptRecordError(fault, where=where)
    return bad, errors


def _by_job(job: I64) -> I64:
    """The stable order that groups records by job (commitlog order kept within a job).
    Job numbers are sorted as 16-bit ints when they fit: numpy radix-sorts those, about
    four times faster than a merge sort of int64s."""
    keys = job.astype(np.uint16) if len(job) and int(job.max()) < 1 << 16 else job
    order: I64 = np.argsort(keys, kind="stable").astype(np.int64)
    return order


def _stamp_range(job: I64, order: I64, stamps: I64, ts_min: I64, ts_max: I64) -> None:
    """Widen each job's [ts_min, ts_max] by its records' ``stamps`` (in place);
    ``order``: :func:`_by_job` of ``job``."""
    sorted_jobs = job[order]
    firsts = np.flatnonzero(np.concatenate(([True], sorted_jobs[1:] != sorted_jobs[:-1])))
    ids = sorted_jobs[firsts]
    ts_min[ids] = np.minimum(ts_min[ids], np.minimum.reduceat(stamps[order], firsts))
    ts_max[ids] = np.maximum(ts_max[ids], np.maximum.reduceat(stamps[order], firsts))


def _group(
    win: bytearray, rel: I64, size: I64, job: I64, order: I64, cold: I64
) -> tuple[pa.Buffer, list[tuple[int, int, int]]]:
    """Rewrite bytes [28, 36) to ``cold`` and copy the window's records grouped by job
    in ``order`` (:func:`_by_job`: commitlog order kept within a job).

    Returns the grouped bytes and ``(job, start, end)`` runs into them. The copy is one
    Arrow ``take`` (:func:`~tieredstore.formats.arrownp.gather_ranges`); the rewrite is
    done in the window first, with one numpy scatter.
    """
    k = int(rel.shape[0])
    if k > 1 and bool(np.any(rel[1:] < (rel + size)[:-1])):
        return _group_overlapping(win, rel, size, job, order, cold)
    scatter_be_i64(np.frombuffer(win, dtype=np.uint8), rel + PHYSICAL_OFFSET_AT, cold)
    data = gather_ranges(win, rel, size, order, memory_pool=_POOL)
    return data, _runs(job, size, order)


def _runs(job: I64, size: I64, order: I64) -> list[tuple[int, int, int]]:
    """``(job, start, end)`` of each job's bytes once the records are put in ``order``."""
    k = int(job.shape[0])
    sorted_jobs = job[order]
    cuts = np.flatnonzero(np.diff(sorted_jobs)) + 1
    firsts = np.concatenate(([0], cuts))
    ends = np.cumsum(size[order])
    starts = np.concatenate(([0], ends[:-1]))
    lasts = np.concatenate((cuts, [k])) - 1
    return list(
        zip(
            sorted_jobs[firsts].tolist(), starts[firsts].tolist(), ends[lasts].tolist(), strict=True
        )
    )


def _group_overlapping(
    win: bytearray, rel: I64, size: I64, job: I64, order: I64, cold: I64
) -> tuple[pa.Buffer, list[tuple[int, int, int]]]:
    """:func:`_group` for a window where due records overlap (consume queues pointing at
    the same bytes: a broken store). Rare, so a copy per record is fine here; the
    records' own checks decide whether they can be tiered. Rewritten after the copy,
    so one record's rewrite never lands in another's bytes."""
    view = memoryview(win)
    data = bytearray().join(view[int(rel[i]) : int(rel[i] + size[i])] for i in order.tolist())
    sizes = size[order]
    at = np.cumsum(sizes) - sizes
    scatter_be_i64(np.frombuffer(data, dtype=np.uint8), at + PHYSICAL_OFFSET_AT, cold[order])
    return pa.py_buffer(data), _runs(job, size, order)


def gather_segments(
    hot: HotStore,
    jobs: Sequence[GatherJob],
    spool_dir: Path,
    *,
    window_bytes: int = WINDOW_BYTES,
    gap_bytes: int = GAP_BYTES,
    span_bytes: int = SPAN_BYTES,
    hold_bytes: int = SPOOL_HOLD_BYTES,
    stop: threading.Event | None = None,
    writeback: bool = True,
) -> list[Spooled | TieredStoreError]:
    """Gather every job's records into its spool file under ``spool_dir`` (module doc).

    Returns, per job in order, its :class:`Spooled` file or the error that failed it.
    Blocking (run it in a thread). ``stop`` set: the pass ends at the next window and
    every job not yet complete is returned as an error. ``hold_bytes``: how much
    gathered data waits before the spool files are written (:class:`_Spool`; its
    ``writeback``: False when the files are only encoded, never uploaded as they are).
    """
    if not jobs:
        return []
    files = hot.commitlog_files()
    failed = _Failures(len(jobs))
    owners = _Owners.of(jobs)
    ts_min = np.full(len(jobs), np.iinfo(np.int64).max, dtype=np.int64)
    ts_max = np.full(len(jobs), np.iinfo(np.int64).min, dtype=np.int64)
    spool = _Spool(
        spool_dir, [j.plan.nbytes for j in jobs], hold_bytes=hold_bytes, writeback=writeback
    )
    buffer = bytearray(window_bytes)
    try:
        try:
            for rec in _Merge(jobs, span_bytes).spans():
                for w in _windows(rec, files, window_bytes, gap_bytes):
                    if stop is not None and stop.is_set():
                        stopped = StoreError("tiering pass stopped", where=str(spool_dir))
                        return [stopped] * len(jobs)
                    buffer = _window(
                        hot, files, rec, w, jobs, owners, spool, failed, ts_min, ts_max, buffer
                    )
            spool.finish()
        finally:
            spool.close()
    except OSError as exc:  # the spool's disk (the state directory) is full or broken
        raise StoreError(f"cannot write the tiering spool: {exc}", where=str(spool_dir)) from exc
    out: list[Spooled | TieredStoreError] = []
    for i, job in enumerate(jobs):
        if i in failed.errors:
            out.append(failed.errors[i])
        elif spool.sizes[i] != job.plan.nbytes:  # a bug, not bad data: say so loudly
            raise AssertionError(f"gathered {spool.sizes[i]} of {job.plan.nbytes} bytes")
        else:
            out.append(Spooled(spool.paths[i], spool.sizes[i], spool.hashes[i].hexdigest(),
                               int(ts_min[i]), int(ts_max[i])))  # fmt: skip
    return out


def _window(
    hot: HotStore,
    files: MappedFileList,
    rec: _Records,
    w: _Window,
    jobs: Sequence[GatherJob],
    owners: _Owners,
    spool: _Spool,
    failed: _Failures,
    ts_min: I64,
    ts_max: I64,
    buffer: bytearray,
) -> bytearray:
    """Read one window, check, rewrite and spool its records; return the read buffer."""
    sel = slice(w.lo, w.hi)
    live = failed.ok[rec.job[sel]]
    if not live.any():
        return buffer
    first, end = int(rec.offset[w.lo]), int((rec.offset[sel] + rec.size[sel]).max())
    error = _read_window(hot, files, w, first, end, buffer)
    if isinstance(error, TieredStoreError):
        for j in np.unique(rec.job[sel]).tolist():
            failed.fail(int(j), error)
        return buffer
    buffer = error
    win = np.frombuffer(buffer, dtype=np.uint8, count=end - first)
    rel = rec.offset[sel] - first
    bad, errors = _check(win, rel, rec, sel, jobs, owners)
    for j, exc in errors.items():
        failed.fail(j, exc)
    live &= ~bad & failed.ok[rec.job[sel]]  # drop every record of a segment that failed
    keep = np.flatnonzero(live)
    if keep.size == 0:
        return buffer
    rel, job = rel[keep], rec.job[sel][keep]
    size = rec.size[sel][keep]
    stamps = store_timestamps(win, rel)
    order = _by_job(job)
    _stamp_range(job, order, stamps, ts_min, ts_max)
    data, runs = _group(buffer, rel, size, job, order, rec.cold[sel][keep])
    spool.submit(data, runs)
    return buffer


def _read_window(
    hot: HotStore, files: MappedFileList, w: _Window, first: int, end: int, buffer: bytearray
) -> bytearray | TieredStoreError:
    """Read commitlog bytes ``[first, end)`` of the window's file into ``buffer``; an
    error is returned (it fails only the segments of this window), not raised."""
    if w.file_index < 0:
        return OffsetOutOfRangeError(
            f"commitlog offset {first} is in no commitlog file (oldest starts at "
            f"{files.min_offset}); the broker deleted it",
            where=str(hot.commitlog_dir),
        )
    try:
        return read_span(files.files[w.file_index], first, end, buffer)
    except (OffsetOutOfRangeError, TruncatedDataError) as exc:
        return exc
