"""Compaction: a queue's batch slices rewritten as one per-queue segment.

With ``tiering.batching`` on, small queues are committed as slices of per-broker batch
objects (:mod:`tieredstore.cold.batch`). A pass of the :class:`Compactor` rewrites them:

1. **Which queues**: those the catalogue says are due (``catalogue.slices.due``): the
   oldest slice is ``tiering.compact_after`` old, or the slices hold
   ``tiering.segment_max_bytes`` of commit log.
2. **Which slices** (:func:`compaction_run`): from the queue's first slice row, the
   longest run of contiguous ones (each starts where the previous ends, in queue offsets
   and cold commitlog: a segment or a gap between two slices ends the run), at most
   ``tiering.segment_max_bytes`` of commit log, but at least one slice.
3. **Read and check**: each slice's two spans are read from its batch object and fully
   checked against the slice row (sizes, digests, record pointers:
   :func:`~tieredstore.cold.segment.verify_segment`). A slice that does not check is one
   loud ERROR naming the batch key and the offsets, and the queue is skipped: nothing is
   ever compacted from bad bytes.
4. **Write**: the commit-log spans concatenated are the segment's COMMIT_LOG, the
   consume-queue spans concatenated its CONSUME_QUEUE (units already hold absolute cold
   commitlog offsets; with ``cold.compression = "zstd"`` the COMMIT_LOG is written as
   seekable zstd frames, :mod:`tieredstore.cold.compressed.frames`), uploaded under a fresh
   attempt's names as every segment is
   (:meth:`ColdWriter.upload_attempt <tieredstore.dispatcher.tiering.cold_writer.ColdWriter.
   upload_attempt>`), the lease checked before each object.
5. **Commit**: the lease is checked, then the manifest *created*
   (:meth:`~tieredstore.dispatcher.tiering.cold_writer.ColdWriter.create_manifest`), the commit
   point:

   * CREATED: the catalogue swaps the slice rows for the segment's row
     (``catalogue.slices.compact``) under the catalogue lock;
   * EXISTS: an earlier compaction created a manifest there and crashed before its swap.
     If that manifest is this run's segment or a prefix of it ending at a slice
     boundary (same start and cold commitlog base, its digests those of our bytes), it
     is adopted: the catalogue swaps for *it*, ours is discarded. Anything else there is
     a one-line ERROR and the queue is skipped;
   * UNREADABLE (a newer format there): ERROR, skipped; LeaseLostError propagates.

Readers need no change: segments win over slices (:func:`~tieredstore.cold.history.choose`),
and the segment's bytes at every offset are the slice's, so a read after the manifest
lands returns the same bytes from the segment. The batch objects are deleted later, by
the rules of :mod:`tieredstore.dispatcher.tiering.batch.collect`, run at the end of each pass.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from tieredstore.cold.compressed.framed import encode_framed
from tieredstore.cold.digests import digest
from tieredstore.cold.history import Committed, span_bytes
from tieredstore.cold.layout import QueuePath
from tieredstore.cold.manifest import Manifest, read_stored
from tieredstore.cold.segment import verify_segment
from tieredstore.dispatcher.lease.guard import hold_lease
from tieredstore.dispatcher.tiering.batch.collect import (
    MIN_GRACE_MS,
    BatchCollection,
    collect_batches,
)
from tieredstore.dispatcher.tiering.batch.sequence import BatchKeys
from tieredstore.dispatcher.tiering.cold_writer import ColdWriter, ManifestOutcome
from tieredstore.dispatcher.tiering.uploader import UploadedObjects
from tieredstore.errors import (
    ColdDataError,
    CorruptDataError,
    LeaseLapsedError,
    LeaseLostError,
    TieredStoreError,
)
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.settings.in_force import SettingsInForce
from tieredstore.settings.loader import TieringSettings

__all__ = ["CompactionReport", "Compactor", "compaction_run"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What one pass did: segments written (``queues``: one per queue at most), slices
    they replaced, batch objects deleted (keys), and one line per problem (each also
    logged as an ERROR)."""

    queues: int = 0
    slices: int = 0
    batches_deleted: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Run:
    """A run of slices and their bytes, read and checked."""

    queue: QueuePath
    slices: tuple[Committed, ...]
    commit_log: bytes
    consume_queue: bytes

    def upload(self) -> UploadedObjects:
        return UploadedObjects(
            cl_size=len(self.commit_log),
            cl_digest=digest(self.commit_log),
            cq_size=len(self.consume_queue),
            cq_digest=digest(self.consume_queue),
            min_store_timestamp=min(s.min_store_timestamp for s in self.slices),
            max_store_timestamp=max(s.max_store_timestamp for s in self.slices),
        )

    def adoptable(self, theirs: Manifest) -> bool:
        """Whether ``theirs`` (at our manifest key) is this run or a prefix of it ending
        at a slice boundary, with our bytes there (by its own digest algorithm)."""
        first = self.slices[0]
        if (theirs.start_offset, theirs.cl_base) != (first.start_offset, first.cl_base):
            return False
        if not any(
            (s.end_offset, s.cl_end) == (theirs.end_offset, theirs.cl_end) for s in self.slices
        ):
            return False
        cl = self.commit_log[: theirs.cl_end - theirs.cl_base]
        cq = self.consume_queue[: (theirs.end_offset - theirs.start_offset) * CQ_UNIT_SIZE]
        return (theirs.commit_log.size, theirs.consume_queue.size) == (len(cl), len(cq)) and (
            theirs.commit_log.digest,
            theirs.consume_queue.digest,
        ) == (digest(cl, theirs.algorithm), digest(cq, theirs.algorithm))


def compaction_run(slices: Sequence[Committed], max_bytes: int) -> list[Committed]:
    """From the first of ``slices`` (by start), the longest contiguous run (offsets and
    cold commitlog) whose commit-log bytes add up to at most ``max_bytes``; at least the
    first slice, none if there is none."""
    run: list[Committed] = []
    size = 0
    for nxt in slices:
        if run:
            prev = run[-1]
            if (nxt.start_offset, nxt.cl_base) != (prev.end_offset, prev.cl_end):
                break
            if size + nxt.commit_log.size > max_bytes:
                break
        run.append(nxt)
        size += nxt.commit_log.size
    return run


@dataclass(slots=True)
class _Tally:
    queues: int = 0
    slices: int = 0
    problems: list[str] = field(default_factory=list)

    def problem(self, line: str) -> None:
        log.error("compaction: %s", line)
        self.problems.append(line)


class Compactor:
    """Rewrites batch slices as per-queue segments and deletes the batches they leave
    (see the module docstring). ``in_force`` holds the settings in force, read at each use
    (a reload replaces them); ``lock`` is the catalogue lock (:attr:`SharedState.lock
    <tieredstore.dispatcher.shared_state.SharedState.lock>`), taken only around each catalogue swap.
    """

    def __init__(
        self, *, writer: ColdWriter, keys: BatchKeys, lock: asyncio.Lock, in_force: SettingsInForce
    ) -> None:
        self.writer = writer
        self.keys = keys  # the broker's batch keys, under the lease; shared (assembly)
        self.lease = keys.lease
        self.lock = lock
        self.in_force = in_force
        self.catalogue = writer.catalogue
        self.backend = writer.backend
        #: Whether the last pass left batch objects (unknown at start: one pass finds out).
        self.batches_left = True

    @property
    def tiering(self) -> TieringSettings:
        """The ``[tiering]`` settings in force now (read from ``in_force``)."""
        return self.in_force.tiering

    @property
    def grace_ms(self) -> int:
        """How old a batch must be before it may be deleted: ``max(compact_after,
        10 min)``."""
        return max(round(self.tiering.compact_after * 1000), MIN_GRACE_MS)

    async def run_if_needed(self) -> CompactionReport | None:
        """The periodic job: :meth:`run_pass` while ``tiering.batching`` is on, some slice
        row is left to compact, or the last pass left batch objects to delete (batching
        turned off: what it left is still compacted and collected); else nothing (None)."""
        if not (self.tiering.batching or self.batches_left) and not await asyncio.to_thread(
            self.catalogue.slices.referenced_batches
        ):
            return None
        return await self.run_pass()

    async def run_pass(self) -> CompactionReport:
        """Compact every due queue (one segment each at most), then delete the batches
        the rules allow (:func:`~tieredstore.dispatcher.tiering.batch.collect.collect_batches`).

        A queue that fails is a problem line and the pass goes on with the next one.

        Raises:
            LeaseLostError / LeaseLapsedError: the lease is gone (nothing more written).
        """
        tally = _Tally()
        t = self.tiering
        due = await asyncio.to_thread(
            self.catalogue.slices.due,
            self.writer.clock.now_ms(),
            round(t.compact_after * 1000),
            t.segment_max_bytes,
        )
        for topic, queue_id in due:
            try:
                await self._compact(self.writer.queue_path(topic, queue_id), tally)
            except (LeaseLostError, LeaseLapsedError):
                raise
            except TieredStoreError as exc:
                tally.problem(f"queue {topic}/{queue_id} not compacted: {exc}")
        collected = await collect_batches(
            self.keys, self.catalogue, now_ms=self.writer.clock.now_ms(), grace_ms=self.grace_ms
        )
        self.batches_left = collected.left > 0
        return self._report(tally, collected)

    @staticmethod
    def _report(tally: _Tally, collected: BatchCollection) -> CompactionReport:
        report = CompactionReport(
            tally.queues, tally.slices, collected.deleted, (*tally.problems, *collected.problems)
        )
        if report.queues or report.batches_deleted or report.problems:
            log.info(
                "compaction: %d slices of %d queues rewritten as segments, %d batch objects "
                "deleted, %d problems",
                report.slices, report.queues, len(report.batches_deleted), len(report.problems),
            )  # fmt: skip
        return report

    async def _compact(self, queue: QueuePath, tally: _Tally) -> None:
        """One segment for ``queue``'s first run of slices (module docstring, 2-5)."""
        rows = await asyncio.to_thread(self.catalogue.slices.of, queue.topic, queue.queue_id)
        slices = compaction_run(rows, self.tiering.segment_max_bytes)
        if not slices:
            return
        await hold_lease(self.lease)
        run = await self._read(queue, slices, tally)
        if run is None:
            return
        ours = await self._upload(run)
        await hold_lease(self.lease)
        outcome = await self.writer.create_manifest(ours, check=self.lease.check)
        chosen: Manifest | None = ours
        if outcome is not ManifestOutcome.CREATED:
            chosen = await self._theirs(run, ours, outcome, tally)
            await self.writer.discard(ours)
        if chosen is None:
            return
        async with self.lock:
            await asyncio.to_thread(self.catalogue.slices.compact, chosen)
        tally.queues += 1
        tally.slices += sum(s.end_offset <= chosen.end_offset for s in run.slices)

    async def _read(
        self, queue: QueuePath, slices: Sequence[Committed], tally: _Tally
    ) -> _Run | None:
        """The run's bytes, every slice checked; None (a problem) if one does not check."""
        cl: list[bytes] = []
        cq: list[bytes] = []
        for s in slices:
            try:
                cl.append(await span_bytes(self.backend, s.commit_log))
                cq.append(await span_bytes(self.backend, s.consume_queue))
                verify_segment(s, cl[-1], cq[-1], where=self.backend.url)
            except (ColdDataError, CorruptDataError) as exc:
                tally.problem(
                    f"queue {queue}: slice [{s.start_offset}, {s.end_offset}) of batch {s.key} "
                    f"does not check, the queue is not compacted: {exc}"
                )
                return None
        return _Run(queue, tuple(slices), b"".join(cl), b"".join(cq))

    async def _upload(self, run: _Run) -> Manifest:
        """Upload the run's two objects under a fresh attempt; their manifest (unwritten)."""
        up = run.upload()
        check = self.lease.check

        frames = self.writer.frames
        cl_data = run.commit_log
        if frames is not None:  # cold.compression: the segment as the uploader writes one
            cl_data, framed = await asyncio.to_thread(encode_framed, run.commit_log, frames)
            up = dataclasses.replace(up, cl_framed=framed)

        async def write(cl_key: str, cq_key: str) -> UploadedObjects:
            for key, data in ((cl_key, cl_data), (cq_key, run.consume_queue)):
                check()
                await self.backend.write(key, data)
            return up

        first, last = run.slices[0], run.slices[-1]
        attempt, _ = await self.writer.upload_attempt(
            run.queue, first.start_offset, first.cl_base, write, op="compaction upload"
        )
        return self.writer.manifest_for(
            run.queue, first.start_offset, last.end_offset, first.cl_base, attempt, up,
            self.lease.epoch,
        )  # fmt: skip

    async def _theirs(
        self, run: _Run, ours: Manifest, outcome: ManifestOutcome, tally: _Tally
    ) -> Manifest | None:
        """What the catalogue swaps for when our manifest's key was taken: the manifest
        there if it is adoptable (:meth:`_Run.adoptable`), else None (a problem)."""
        where = f"queue {run.queue}: a manifest is already at {ours.key}"
        if outcome is ManifestOutcome.UNREADABLE:
            tally.problem(f"{where} in a newer format; not compacted")
            return None
        stored = read_stored(await self.backend.read(ours.key), ours.key)
        if isinstance(stored, Manifest) and run.adoptable(stored):
            log.warning(
                "%s (an earlier compaction's, [%d, %d)): adopted", where,
                stored.start_offset, stored.end_offset,
            )  # fmt: skip
            return stored
        tally.problem(f"{where} that is not these slices' segment; not compacted")
        return None
