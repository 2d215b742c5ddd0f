"""The restore itself: cold history in, a store a stock broker boots from out.

Steps (:meth:`Restorer.run`): claim the output directory (:mod:`.outdir`) → plan from
the committed history (:mod:`.plan`: its links, segments or batch slices) → stream
every link in merge order (:mod:`.stream`, range reads of its spans), appending its
records to the commitlog (:mod:`.commitlog`, physicalOffset rewritten),
its units to the queue's consume queue (:mod:`.consumequeue`, the new commitlog offsets,
the cold sizes and tagsCodes) and its keys to the index (:mod:`.index`) → commit the
journal every ``commit_bytes`` or ``commit_seconds``, whichever comes first, so an
interrupted restore resumes from at most that much before the interruption (a slow
restore of small segments no longer restarts from 0) → write the ``checkpoint`` and
``config/`` → mark the journal complete.

What changes in a restored message, and nothing else: its physicalOffset field (bytes
[28, 36)), and so its offset message id (store host + physicalOffset). Its topic, queue
id, queue offset, store time, hosts, flags, properties and body are the cold bytes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from tieredstore.backends.base import Backend
from tieredstore.cold.history import Committed
from tieredstore.errors import ColdDataError
from tieredstore.formats.checkpoint import Checkpoint
from tieredstore.formats.consumequeue import make_units
from tieredstore.formats.record import BLANK_MAGIC_CODE
from tieredstore.formats.vector import store_timestamps
from tieredstore.restore.commitlog import CommitLogWriter
from tieredstore.restore.configs import restore_configs
from tieredstore.restore.consumequeue import ConsumeQueueWriter
from tieredstore.restore.files import FileCache, fsync_dir
from tieredstore.restore.index import IndexGeometry, IndexWriter
from tieredstore.restore.journal import Journal, JournalState, QueueProgress, RestoreParams
from tieredstore.restore.outdir import Claim, claim_output
from tieredstore.restore.plan import RestoreFilter, RestorePlan, TimeWindow, build_plan
from tieredstore.restore.stream import Chunk, segment_chunks

__all__ = ["RestoreProgress", "RestoreReport", "Restorer"]

log = logging.getLogger(__name__)

I64 = npt.NDArray[np.int64]

_CHECKPOINT_FILE_SIZE: Final = 4096
_DEFAULT_BATCH: Final = 8 << 20
_DEFAULT_COMMIT: Final = 256 << 20
_DEFAULT_COMMIT_SECONDS: Final = 10.0


@dataclass(frozen=True, slots=True)
class RestoreProgress:
    """How far a restore is: segments and commitlog bytes done / planned."""

    segments: int
    segments_total: int
    messages: int
    bytes: int
    bytes_total: int


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """What a finished restore wrote."""

    out: Path
    queues: int
    messages: int
    bytes: int
    commitlog_base: int
    commitlog_end: int
    index_files: int
    index_entries: int
    configs: tuple[str, ...]
    resumed: bool
    #: One line per queue restored only after its last accepted loss (LossCut).
    losses: tuple[str, ...] = ()


class Restorer:
    """One restore of ``params`` into ``out`` (see the module docstring)."""

    def __init__(
        self,
        backend: Backend,
        params: RestoreParams,
        out: Path,
        *,
        batch_bytes: int = _DEFAULT_BATCH,
        commit_bytes: int = _DEFAULT_COMMIT,
        commit_seconds: float = _DEFAULT_COMMIT_SECONDS,
        on_progress: Callable[[RestoreProgress], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.params = params
        self.out = out
        self.batch_bytes = batch_bytes
        self.commit_bytes = commit_bytes
        self.commit_seconds = commit_seconds
        self.monotonic = monotonic  # injected: tests move time per segment
        self.on_progress = on_progress
        self.window = TimeWindow(params.since, params.until)

    async def plan(self) -> RestorePlan:
        filt = RestoreFilter(self.params.topics, self.window)
        plan = await build_plan(self.backend, self.params.cluster, self.params.broker, filt)
        if not plan.queues:
            raise ColdDataError(
                "no committed segment matches the topics and time window: nothing to restore",
                where=f"{self.params.cluster}/{self.params.broker}",
            )
        return plan

    async def run(self) -> RestoreReport:
        """Restore (or resume); returns the report. See :class:`Restorer`."""
        claim = claim_output(self.out, self.params)
        try:
            plan = await self.plan()
            journal = claim.resume or self._fresh_journal()
            if claim.resume is None:
                # Before the first file: an interrupt from here on leaves a directory
                # a rerun resumes (an empty journal resumes from the start).
                journal.save(claim.journal_path)
            files = FileCache()
            try:
                return await self._run(claim, plan, journal, files)
            finally:
                files.close()
        finally:
            claim.release()

    def _fresh_journal(self) -> Journal:
        base = self.params.commitlog_file_size
        return Journal(self.params, commitlog_base=base, commitlog_end=base)

    async def _run(
        self, claim: Claim, plan: RestorePlan, journal: Journal, files: FileCache
    ) -> RestoreReport:
        resumed = claim.resume is not None
        if resumed:
            log.info(
                "resuming the restore in %s from commitlog offset %d (%d segments done)",
                self.out,
                journal.commitlog_end,
                journal.segments,
            )
        commitlog = CommitLogWriter(
            self.out / "commitlog",
            self.params.commitlog_file_size,
            position=journal.commitlog_end,
            files=files,
        )
        queues = ConsumeQueueWriter(
            self.out / "consumequeue", self.params.cq_file_size, files=files
        )
        self._discard_uncommitted(queues, journal)
        index = self._open_index(journal)
        feeder = _IndexFeeder(index) if index is not None else None
        try:
            run = _Run(self, plan, journal, commitlog, queues, feeder, files, claim)
            await run.segments()
            run.commit()
            if feeder is not None:
                await asyncio.to_thread(feeder.close)
                journal.index_entries = feeder.index.entries
        finally:
            if feeder is not None:
                feeder.abandon()
        self._write_checkpoint(journal)
        configs = await restore_configs(self.backend, self.params, self.out, journal)
        journal.state = JournalState.COMPLETE
        journal.save(claim.journal_path)
        fsync_dir(self.out)
        return RestoreReport(
            out=self.out,
            queues=len(journal.queues),
            messages=journal.messages,
            bytes=journal.restored_bytes,
            commitlog_base=journal.commitlog_base,
            commitlog_end=journal.commitlog_end,
            index_files=len(index.files) if index else 0,
            index_entries=journal.index_entries,
            configs=configs,
            resumed=resumed,
            losses=tuple(cut.describe() for cut in plan.cuts),
        )

    def _discard_uncommitted(self, queues: ConsumeQueueWriter, journal: Journal) -> None:
        """Resume: drop consume-queue units written after the last commit."""
        root = self.out / "consumequeue"
        if not root.is_dir():
            return
        for topic in os.listdir(root):
            for qid in os.listdir(root / topic):
                progress = journal.queues.get((topic, int(qid)))
                if progress is None:
                    queues.discard_queue(topic, int(qid))
                else:
                    queues.discard_from(topic, int(qid), progress.next)

    def _open_index(self, journal: Journal) -> IndexWriter | None:
        """A fresh index; on resume it is rebuilt from the commitlog restored so far."""
        if not self.params.write_index:
            return None
        directory = self.out / "index"
        shutil.rmtree(directory, ignore_errors=True)
        index = IndexWriter(
            directory, IndexGeometry(self.params.index_hash_slots, self.params.index_max_entries)
        )
        if journal.commitlog_end > journal.commitlog_base:
            _reindex(self.out / "commitlog", self.params.commitlog_file_size, journal, index)
        return index

    def _write_checkpoint(self, journal: Journal) -> None:
        """``checkpoint``: store times of the newest restored message, confirmed offset."""
        ts = journal.max_store_timestamp
        data = Checkpoint(
            physic_msg_timestamp=ts,
            logics_msg_timestamp=ts,
            index_msg_timestamp=ts if self.params.write_index else 0,
            master_flushed_offset=0,
            confirm_phy_offset=journal.commitlog_end,
        ).encode()
        path = self.out / "checkpoint"
        with path.open("wb") as f:
            f.write(data.ljust(_CHECKPOINT_FILE_SIZE, b"\0"))
            f.flush()
            os.fsync(f.fileno())


class _IndexFeeder:
    """Builds the index in its own thread, beside the commitlog writer.

    At most ``backlog`` batches wait (memory stays bounded); batches are indexed in the
    order given. An indexing error surfaces at the next :meth:`add` or at :meth:`close`.
    """

    def __init__(self, index: IndexWriter, backlog: int = 4) -> None:
        self.index = index
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="restore-index")
        self._slots = threading.BoundedSemaphore(backlog)
        self._pending: deque[Future[None]] = deque()

    def add(self, data: bytearray, starts: I64, phys: I64, stamps: I64, *, floor_ts: int) -> None:
        while self._pending and self._pending[0].done():
            self._pending.popleft().result()
        self._slots.acquire()
        try:
            self._pending.append(self._pool.submit(self._add, data, starts, phys, stamps, floor_ts))
        except BaseException:
            self._slots.release()
            raise

    def _add(self, data: bytearray, starts: I64, phys: I64, stamps: I64, floor_ts: int) -> None:
        try:
            self.index.add(data, starts, phys, stamps, floor_ts=floor_ts)
        finally:
            self._slots.release()

    def close(self) -> None:
        """Wait for every batch, then write the index's last file."""
        while self._pending:
            self._pending.popleft().result()
        self._pool.shutdown()
        self.index.close()

    def abandon(self) -> None:
        """Stop without finishing (after an error or an interrupt); idempotent."""
        self._pool.shutdown(wait=True, cancel_futures=True)


class _Run:
    """The segment loop of one restore, with its writers and journal."""

    def __init__(
        self,
        restorer: Restorer,
        plan: RestorePlan,
        journal: Journal,
        commitlog: CommitLogWriter,
        queues: ConsumeQueueWriter,
        index: _IndexFeeder | None,
        files: FileCache,
        claim: Claim,
    ) -> None:
        self.r = restorer
        self.plan = plan
        self.journal = journal
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.files = files
        self.claim = claim
        self.uncommitted = 0
        self.committed_at = restorer.monotonic()

    def _todo(self) -> list[tuple[Committed, int]]:
        """Every link still to restore, in merge order, with its first queue offset."""
        out = []
        for m in self.plan.merge_order():
            progress = self.journal.queues.get((m.topic, m.queue_id))
            if progress is not None and (progress.closed or progress.next >= m.end_offset):
                continue  # restored before an interruption
            out.append(
                (m, m.start_offset if progress is None else max(progress.next, m.start_offset))
            )
        return out

    async def _read(self, todo: list[tuple[Committed, int]], out: asyncio.Queue[_Item]) -> None:
        """Producer: read the links' chunks ahead of the writer (a bounded queue)."""
        for m, first in todo:
            progress = self.journal.queues.get((m.topic, m.queue_id))
            if progress is None or not progress.closed:  # else the window ended the queue
                async for chunk in segment_chunks(
                    self.r.backend, m, first=first, batch_bytes=self.r.batch_bytes
                ):
                    await out.put(chunk)
            await out.put(m)  # the link is complete
        await out.put(None)

    async def segments(self) -> None:
        """Restore every segment: chunks are read ahead (``_READ_AHEAD`` of them, so memory
        stays bounded) while the previous ones are written in a worker thread."""
        queue: asyncio.Queue[_Item] = asyncio.Queue(maxsize=_READ_AHEAD)
        reader = asyncio.create_task(self._read(self._todo(), queue), name="restore reader")
        try:
            closed: set[tuple[str, int]] = set()
            while (item := await _next(queue, reader)) is not None:
                if isinstance(item, Chunk):
                    key = (item.link.topic, item.link.queue_id)
                    if key not in closed and not await asyncio.to_thread(self._write, item):
                        closed.add(key)  # the window ended this queue
                    continue
                closed.discard((item.topic, item.queue_id))
                await self._segment_done()
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def _segment_done(self) -> None:
        self.journal.segments += 1
        due = self.r.monotonic() - self.committed_at >= self.r.commit_seconds
        if self.uncommitted >= self.r.commit_bytes or (self.uncommitted and due):
            await asyncio.to_thread(self.commit)
        if self.r.on_progress:
            self.r.on_progress(
                RestoreProgress(
                    self.journal.segments,
                    self.plan.segments,
                    self.journal.messages,
                    self.journal.restored_bytes,
                    self.plan.bytes,
                )
            )

    def _window(self, chunk: Chunk, started: bool) -> tuple[int, int, bool]:
        """The slice of ``chunk`` inside the window, and whether the queue ends in it."""
        w = self.r.window
        lo, hi = 0, len(chunk)
        if not started and w.since is not None:
            lo = int(np.searchsorted(np.maximum.accumulate(chunk.stamps), w.since, side="left"))
        if w.until is not None:
            over = np.flatnonzero(chunk.stamps[lo:] > w.until)
            if over.size:
                return lo, lo + int(over[0]), True
        return lo, hi, False

    def _write(self, chunk: Chunk) -> bool:
        """Restore the part of ``chunk`` in the window; False once the queue is closed."""
        m = chunk.link
        key = (m.topic, m.queue_id)
        progress = self.journal.queues.get(key)
        lo, hi, closes = self._window(chunk, progress is not None)
        if hi > lo:
            first = chunk.first + lo
            if progress is None:
                self.queues.begin(m.topic, m.queue_id, first)
                progress = self.journal.queues[key] = QueueProgress(
                    m.topic, m.queue_id, first, first
                )
            self._append(chunk, lo, hi, progress)
        if closes and progress is not None:
            progress.closed = True
        return not closes

    def _append(self, chunk: Chunk, lo: int, hi: int, progress: QueueProgress) -> None:
        sizes, stamps = chunk.sizes[lo:hi], chunk.stamps[lo:hi]
        a = int(chunk.starts[lo])
        b = int(chunk.starts[hi - 1] + sizes[-1])
        data = bytearray(memoryview(chunk.data)[a:b])  # the copy whose offsets are rewritten
        starts = chunk.starts[lo:hi] - a
        phys = self.commitlog.append(data, sizes)
        self.queues.append(
            chunk.link.topic,
            chunk.link.queue_id,
            progress.next,
            make_units(phys, sizes, chunk.tags[lo:hi]),
        )
        if self.index is not None:
            self.index.add(data, starts, phys, stamps, floor_ts=chunk.link.min_store_timestamp)
        n = hi - lo
        progress.next += n
        self.journal.messages += n
        self.journal.restored_bytes += len(data)
        self.journal.commitlog_end = self.commitlog.position
        self.journal.max_store_timestamp = max(self.journal.max_store_timestamp, int(stamps.max()))
        self.uncommitted += len(data)

    def commit(self) -> None:
        """Make everything written so far durable, then say so in the journal."""
        self.files.sync()
        self.journal.save(self.claim.journal_path)
        self.uncommitted = 0
        self.committed_at = self.r.monotonic()


_HEAD = struct.Struct(">ii")
#: Chunks read ahead of the writer (each at most ``batch_bytes``).
_READ_AHEAD: Final = 2
_Item = Chunk | Committed | None


async def _next(queue: asyncio.Queue[_Item], reader: asyncio.Task[None]) -> _Item:
    """The next item, or the reader's error if it failed before producing one."""
    getter = asyncio.ensure_future(queue.get())
    await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
    if getter.done():
        return getter.result()
    getter.cancel()
    reader.result()  # raises the reader's error
    raise RuntimeError("the restore reader ended without its end marker")


def _reindex(directory: Path, file_size: int, journal: Journal, index: IndexWriter) -> None:
    """Rebuild the index from the commitlog restored before an interruption."""
    pos = journal.commitlog_base
    while pos < journal.commitlog_end:
        base = pos - pos % file_size
        with (directory / f"{base:020d}").open("rb") as f:
            f.seek(pos - base)
            data = f.read(min(base + file_size, journal.commitlog_end) - pos)
        starts: list[int] = []
        rel = 0
        while rel + 8 <= len(data):
            total, magic = _HEAD.unpack_from(data, rel)
            if magic == BLANK_MAGIC_CODE or total <= 0:
                break
            starts.append(rel)
            rel += total
        if starts:
            at = np.asarray(starts, dtype=np.int64)
            arr = np.frombuffer(data, dtype=np.uint8)
            stamps = store_timestamps(arr, at)
            index.add(data, at, pos + at, stamps, floor_ts=int(stamps.min()))
        pos = min(base + file_size, journal.commitlog_end)
    journal.index_entries = index.entries
