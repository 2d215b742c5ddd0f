"""The durability guard: never tier a record a power cut of the broker host could take away.

What a broker guarantees, read from RocketMQ's store code (``org.apache.rocketmq.store``):

* **Writes reach the page cache first.** ``CommitLog`` appends into a ``MappedFile``
  (mmap, or a transient buffer that ``CommitRealTimeService`` copies into the file); the
  consume-queue unit that makes a record visible to us is dispatched from there by the
  reput service. So a record we can see may still be only in the page cache.
* **Flushing is ``MappedFileQueue.flush(leastPages)`` → ``MappedFile.flush`` →
  ``MappedByteBuffer.force()`` / ``FileChannel.force()``** (``msync`` / ``fdatasync`` of
  the file). ``FlushRealTimeService`` (ASYNC_FLUSH) does it every
  ``flushIntervalCommitLog`` (500 ms) when at least ``flushCommitLogLeastPages`` (4 pages)
  are dirty, and unconditionally every ``flushCommitLogThoroughInterval`` (10 s);
  ``GroupCommitService`` (SYNC_FLUSH) does it for every waiting producer.
* **The checkpoint tells the flushed position only as a store time, and late.**
  ``MappedFileQueue.flush`` records ``storeTimestamp`` (the file's last append time, read
  *before* the flush) only when ``leastPages == 0``: ASYNC_FLUSH's thorough flush every
  10 s; SYNC_FLUSH's group commit, and only when a producer was waiting (broker-internal
  writes — delay deliveries, transaction ops — are flushed but never recorded).
  ``StoreCheckpoint.physicMsgTimestamp`` takes that value and ``DefaultMessageStore``
  writes the checkpoint file once a second. Every record stored *strictly before* it was
  flushed; one stored in the same millisecond may have been appended after the flush
  took its position. Nothing outside the broker shows ``flushedWhere`` itself.
* **Recovery keeps the valid prefix.** After a crash (the ``abort`` file is left)
  ``CommitLog.recoverAbnormally`` starts at the newest commitlog file whose first
  record's store time is before ``StoreCheckpoint.getMinTimestamp()`` (the checkpoint's
  physic/logics time minus 3 s; ``isMappedFileMatchedRecover``) and keeps every record
  ``checkMessageAndReturnSize`` accepts (magic code, CRC), up to the first that it does
  not; everything after is truncated (``truncateDirtyFiles``) and its queue offsets are
  handed out again.

So a record survives a power cut exactly when it and every record before it (from the
recovery file on) reached the disk. Two rules follow (``tiering.guard``):

``sync`` (default): **make it durable, then tier it.** Before a segment is uploaded the
sidecar ``fdatasync``\\ s the broker's commitlog files that may hold unflushed records up
to the segment's last one: the file holding the first record stored at or after the
checkpoint's ``physicMsgTimestamp`` (found the way recovery finds its start: by each
file's first store time) through the file holding the segment's end. ``fdatasync`` on a
read-only descriptor writes back the same page-cache pages the broker's own ``force()``
would (the mapping is shared), so on return every record the plan names, and every one
before it, is on disk. No age, no broker interval: lag is the group-commit rules plus one
``fdatasync`` of the few dirty pages. If the store's filesystem refuses ``fdatasync``
the guard falls back to ``checkpoint`` (logged once, counted in
``tieredstore_guard_sync_failures``).

``checkpoint``: **observe only.** Tier a record only when its store time is strictly
before the checkpoint's ``physicMsgTimestamp``. Safe, never touches the broker's files,
but on ASYNC_FLUSH it releases data in thorough-flush steps (up to 10 s + 1 s) and the
newest millisecond waits for the broker's next flushed write.

``none``: no guard (tests, or a store on storage that survives power loss by itself).

In a broker group the guard also carries the group's limit (``DurabilityGuard.group``,
:mod:`tieredstore.dispatcher.replicas`): a record is tiered only once the other live replicas hold
it durably too, so a failover never finds cold ahead of the new master.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tieredstore.dispatcher.metrics import Metrics
from tieredstore.errors import StoreError, TieredStoreError
from tieredstore.hot.files import MappedFile
from tieredstore.hot.store import HotStore
from tieredstore.settings.loader import GuardMode

if TYPE_CHECKING:  # tieredstore.dispatcher.replicas builds on this module's CommitlogSyncer
    from tieredstore.dispatcher.replicas import ReplicaGroup

__all__ = [
    "CommitlogSyncer",
    "DurabilityGuard",
    "GuardMode",
    "SyncOutcome",
    "checkpoint_guard_ts",
]

log = logging.getLogger(__name__)


def checkpoint_guard_ts(hot: HotStore) -> int:
    """The newest store time the checkpoint vouches for: ``physicMsgTimestamp - 1``.

    Strict: a record stored in the very millisecond of the checkpoint may have been
    appended after the flush that recorded it (``MappedFileQueue.flush``).
    """
    return hot.checkpoint().physic_msg_timestamp - 1


@dataclass(frozen=True, slots=True)
class SyncOutcome:
    """What one :meth:`CommitlogSyncer.ensure` did: the files it synced (none when an
    earlier sync of this round already covered the end) and how long it took."""

    files: tuple[str, ...]
    seconds: float


class CommitlogSyncer:
    """Makes the broker's commitlog durable up to a position (``guard = sync``).

    One per dispatcher; calls are serialised. Within one round (:meth:`new_round`, once
    per tick) a position already synced is not synced again; a new round forgets it, so
    a commitlog the broker rewound (recovered after a crash, offsets handed out again)
    is never taken for synced.

    ``fdatasync`` is injectable so tests can make the filesystem refuse it.
    """

    def __init__(
        self,
        hot: HotStore,
        *,
        fdatasync: Callable[[int], None] = os.fdatasync,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.hot = hot
        self._fdatasync = fdatasync
        self._monotonic = monotonic or time.perf_counter
        self._lock = asyncio.Lock()
        self._synced_to = 0  # this round: every commitlog byte below it is durable

    def new_round(self) -> None:
        self._synced_to = 0

    async def ensure(self, end: int) -> SyncOutcome:
        """Make every commitlog byte below ``end`` durable before returning.

        Raises StoreError when a file cannot be opened or synced (the caller falls back
        to the checkpoint rule).
        """
        async with self._lock:
            if end <= self._synced_to:
                return SyncOutcome((), 0.0)
            started = self._monotonic()
            files = await asyncio.to_thread(self._files_to_sync, end)
            for f in files:
                await asyncio.to_thread(self._sync_one, f)
            self._synced_to = end
            return SyncOutcome(tuple(str(f.path) for f in files), self._monotonic() - started)

    def _files_to_sync(self, end: int) -> list[MappedFile]:
        """The files from the first that may hold an unflushed record through the one
        holding ``end - 1``. Recovery's own rule finds the first: the newest file whose
        first record is stored before the checkpoint time; every file before it holds
        only records stored before that time, all flushed."""
        files = self.hot.commitlog_files().files
        first = 0
        try:
            flushed_ts = self.hot.checkpoint().physic_msg_timestamp
        except TieredStoreError:
            flushed_ts = 0  # no checkpoint: nothing is vouched for
        for i in range(len(files) - 1, -1, -1):
            try:
                ts = self.hot.read_store_timestamp(files[i].base)
            except TieredStoreError:
                continue  # a vanished file: look further back
            # 0: no record at the file's start yet (recovery skips such a file too).
            if 0 < ts < flushed_ts:
                first = i
                break
        return [f for f in files[first:] if f.base < end and f.end > self._synced_to]

    def _sync_one(self, f: MappedFile) -> None:
        try:
            fd = os.open(f.path, os.O_RDONLY)
        except FileNotFoundError:
            return  # deleted by the broker's retention meanwhile: nothing left to lose
        except OSError as exc:
            raise StoreError(
                f"cannot open for fdatasync: {exc.strerror}", where=str(f.path)
            ) from exc
        try:
            self._fdatasync(fd)
        except OSError as exc:
            raise StoreError(
                f"fdatasync refused: {exc.strerror or exc}", where=str(f.path)
            ) from exc
        finally:
            os.close(fd)


class DurabilityGuard:
    """The rule in force for one dispatcher, and its calls: the planner's time limit
    (``checkpoint``) and the fdatasync of planned records (``sync``).

    ``sync`` falls back to ``checkpoint`` for the rest of the process once the store
    refused an fdatasync (logged once, counted). The configured mode is passed in on
    every call, so a reload takes effect at the next round. :attr:`syncer` is
    replaceable (tests inject a refusing ``fdatasync``).
    """

    def __init__(self, hot: HotStore, metrics: Metrics, group: ReplicaGroup) -> None:
        self.hot = hot
        self.metrics = metrics
        #: The broker group's limit on what may be tiered (its ``cl_limit``, set each tick).
        self.group = group
        self.syncer = CommitlogSyncer(hot)
        self._sync_refused = False  # the store refused fdatasync: checkpoint rule instead

    async def new_tick(self) -> None:
        """A fresh sync round (:meth:`CommitlogSyncer.new_round`) and the group's limit
        for the tick that starts (:meth:`ReplicaGroup.new_tick`)."""
        self.syncer.new_round()
        await self.group.new_tick()

    def mode(self, configured: GuardMode) -> GuardMode:
        """The rule in force: the configured one, or ``checkpoint`` once ``sync`` failed."""
        if configured is GuardMode.SYNC and self._sync_refused:
            return GuardMode.CHECKPOINT
        return configured

    def guard_ts(self, configured: GuardMode) -> int | None:
        """Newest store time the planner may tier, or None when nothing limits it.

        Only the ``checkpoint`` rule limits the plan (strictly before the checkpoint's
        physicMsgTimestamp); ``sync`` makes the planned records durable afterwards
        (:meth:`make_durable`); ``none`` is no guard (blocking: reads the checkpoint).
        """
        if self.mode(configured) is GuardMode.CHECKPOINT:
            return checkpoint_guard_ts(self.hot)
        return None

    async def make_durable(self, configured: GuardMode, end: int) -> bool:
        """``sync`` guard: fdatasync the commitlog up to ``end`` (a plan's last record).

        False when the store refused (logged once, counted): the rule falls back to
        ``checkpoint`` and the queue is planned again under it.
        """
        if self.mode(configured) is not GuardMode.SYNC:
            return True
        try:
            done = await self.syncer.ensure(end)
        except StoreError as exc:
            self._sync_refused = True
            self.metrics.guard_sync_failures.inc()
            self.metrics.set_guard_mode(GuardMode.CHECKPOINT.value)
            log.error(
                "durability guard: %s; falling back to the checkpoint rule (records wait "
                "until the broker's checkpoint shows them flushed)",
                exc,
            )
            return False
        if done.files:
            self.metrics.guard_syncs.inc(len(done.files))
            self.metrics.guard_sync_seconds.observe(done.seconds)
        return True
