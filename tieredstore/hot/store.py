"""Read-only access to a live RocketMQ broker store directory (the hot side).

The broker writes through mmap into preallocated, zero-filled files; plain ``read()``
sees its writes at once. This module never writes and never takes the broker's
``lock``. Every call re-lists the directories it needs, so files the broker rolls,
creates or deletes between calls are noticed.

Offsets (docs/format.md, "Hot min and hot max"):

* **hot max** of a queue is the index of the first all-zero unit in its newest CQ file
  (exclusive: the next offset the broker will assign);
* **hot min** is the first non-filler unit whose commitlog offset is at or above the base
  of the oldest commitlog file still present (older units point at deleted data).

Records are complete only when their CQ unit exists, so reading ``[min, max)`` never
returns a torn record. Blocking file I/O: callers on an event loop use
``asyncio.to_thread``.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tieredstore.errors import (
    CorruptRecordError,
    CorruptUnitError,
    NotAStoreError,
    OffsetOutOfRangeError,
    StoreError,
    StoreNotFoundError,
    TruncatedDataError,
    UnsupportedStoreError,
)
from tieredstore.formats.checkpoint import Checkpoint, read_checkpoint
from tieredstore.formats.consumequeue import (
    CQ_UNIT_SIZE,
    Units,
    decode_units,
    filler_mask,
    zero_mask,
)
from tieredstore.formats.record import (
    HEAD_PROBE_SIZE,
    MessageRecord,
    ProbeKind,
    decode_record,
    probe_record,
)
from tieredstore.formats.topics import TopicConfig, read_topics
from tieredstore.formats.vector import store_timestamps
from tieredstore.hot.commitlog import HotCommitlog
from tieredstore.hot.files import MappedFile, MappedFileList

__all__ = [
    "CommitlogScan",
    "HotRange",
    "HotStore",
    "QueueKey",
    "QueueScan",
    "SkippedDir",
    "scan_queue_dirs",
]

# Consume-queue files are scanned for hot min/max in chunks (multiples of 20 bytes)
# that start small and double up to the largest: the broker preallocates 6 MB files,
# and a queue that holds a few thousand units finds its first zero unit in one small
# read instead of a 1 MiB one (planning a thousand queues was mostly these reads).
_SCAN_FIRST_CHUNK = 256 * CQ_UNIT_SIZE
_SCAN_CHUNK = 52_428 * CQ_UNIT_SIZE
# Files RocksDB keeps in its directory; a file-based consume queue has only topic dirs.
_ROCKSDB_MARKERS = re.compile(r"^(CURRENT|IDENTITY|LOCK|OPTIONS-\d+|MANIFEST-\d+|\d+\.(sst|log))$")


def _utf8(name: str) -> bool:
    """Whether a directory name read from the OS was valid UTF-8 (Python keeps the
    bytes of an undecodable name as lone surrogates, which cannot be encoded)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True, slots=True, order=True)
class SkippedDir:
    """A consume-queue directory that is no queue the sidecar can tier, and why.
    ``path`` is printable: undecodable bytes are shown as ``\\xNN``."""

    path: str
    reason: str

    @classmethod
    def of(cls, path: str, reason: str) -> SkippedDir:
        return cls(os.fsencode(path).decode("utf-8", "backslashreplace"), reason)

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass(frozen=True, slots=True)
class QueueScan:
    """One listing of the consume-queue directory: the queues, sorted, and the
    directories skipped (:meth:`HotStore.scan_queues`)."""

    queues: tuple[QueueKey, ...]
    skipped: tuple[SkippedDir, ...]


@dataclass(frozen=True, slots=True, order=True)
class QueueKey:
    """A (topic, queue id) pair."""

    topic: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.queue_id}"


@dataclass(frozen=True, slots=True)
class HotRange:
    """Queue offsets ``[min, max)`` the hot store can serve; ``min == max`` when empty."""

    min: int
    max: int

    @property
    def count(self) -> int:
        return self.max - self.min


def _open(path: Path) -> int:
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError as exc:
        raise StoreNotFoundError("file deleted while reading", where=str(path)) from exc
    except OSError as exc:
        raise StoreNotFoundError(f"cannot open: {exc.strerror}", where=str(path)) from exc


def _pread(path: Path, offset: int, size: int) -> bytes:
    fd = _open(path)
    try:
        return _read_at(fd, size, offset, path)
    finally:
        os.close(fd)


def _read_at(fd: int, size: int, offset: int, path: Path) -> bytes:
    """``os.pread``, an I/O error translated (StoreError naming the file and offset)."""
    try:
        return os.pread(fd, size, offset)
    except OSError as exc:
        raise StoreError(f"cannot read: {exc.strerror}", where=f"{path}@{offset}") from exc


@dataclass(frozen=True, slots=True)
class _FirstHit:
    """Where a scan of a CQ file stopped: the first matching unit, or its end."""

    index: int  # the first unit that matched, else the number of units in the file
    found: bool


def _scan_units(
    f: MappedFile, hit: Callable[[Units], np.ndarray], keep: list[bytes] | None = None
) -> _FirstHit:
    """Find the first unit of ``f`` for which ``hit`` is true.

    Reads the file in growing chunks and stops at the first chunk with a match, so a
    mostly empty (preallocated) file costs one small read, not its whole size. Like decoding
    the whole file, refuses a size that is not a multiple of 20. ``keep``: a list the
    chunks read (whole units) are appended to, in order: the file's bytes from its start
    to the end of the chunk that matched, or of the last one read.
    """
    if f.size % CQ_UNIT_SIZE:
        raise TruncatedDataError(
            f"consume-queue data of {f.size} bytes is not a multiple of {CQ_UNIT_SIZE}",
            where=f"{f.path}@{f.size - f.size % CQ_UNIT_SIZE}",
        )
    fd = _open(f.path)
    try:
        pos, chunk = 0, _SCAN_FIRST_CHUNK
        while pos < f.size:
            want = min(chunk, f.size - pos)
            chunk = min(2 * chunk, _SCAN_CHUNK)
            data = _read_at(fd, want, pos, f.path)
            whole = len(data) - len(data) % CQ_UNIT_SIZE  # a file shrunk under us ends early
            if keep is not None:
                keep.append(data[:whole])
            hits = np.flatnonzero(hit(decode_units(data[:whole], where=str(f.path))))
            if hits.size:
                return _FirstHit(pos // CQ_UNIT_SIZE + int(hits[0]), found=True)
            pos += whole
            if len(data) < want:
                break
    finally:
        os.close(fd)
    return _FirstHit(pos // CQ_UNIT_SIZE, found=False)


def _usable(units: Units, cl_min: int) -> np.ndarray:
    """Units that can be the hot min: no filler, not all zero, pointing at a commitlog
    offset at or above ``cl_min`` (the oldest commitlog file's base)."""
    return ~filler_mask(units) & ~zero_mask(units) & (units["commitlog_offset"] >= cl_min)


def _first_usable(chunks: list[bytes], used: int, cl_min: int, base: int, hot_max: int) -> int:
    """The hot min of a queue whose one consume-queue file starts at queue offset
    ``base``: the first :func:`_usable` unit among its first ``used`` units, read as
    ``chunks`` (:func:`_scan_units`), looked for chunk by chunk; ``hot_max`` if none."""
    pos = 0
    for chunk in chunks:
        below = chunk[: max(used - pos, 0) * CQ_UNIT_SIZE]
        first = np.flatnonzero(_usable(decode_units(below), cl_min))
        if first.size:
            return min(base + pos + int(first[0]), hot_max)
        pos += len(chunk) // CQ_UNIT_SIZE
        if pos >= used:
            break
    return hot_max


def _min_offset(cq: MappedFileList, cl_min: int, hot_max: int) -> int:
    """The hot min of a queue of several consume-queue files: its first :func:`_usable`
    unit, scanned file by file from the oldest; ``hot_max`` if none is."""

    def usable(units: Units) -> np.ndarray:
        return _usable(units, cl_min)

    for f in cq.files:
        first = _scan_units(f, usable)
        if first.found:
            return min((f.base + first.index * CQ_UNIT_SIZE) // CQ_UNIT_SIZE, hot_max)
    return hot_max


def scan_queue_dirs(consumequeue_dir: Path) -> QueueScan:
    """The queues of a broker's consume-queue directory, and the directories skipped.

    A topic directory whose name is not UTF-8, or that cannot be listed, and a queue
    directory whose name is not UTF-8 or not a plain decimal queue id, is skipped
    and named in :attr:`QueueScan.skipped`: one bad directory never hides the
    others. Entries that are no directories are ignored; a directory the broker
    deletes while it is listed is simply absent.
    """
    out: list[QueueKey] = []
    skipped: list[SkippedDir] = []
    try:
        topic_entries = list(os.scandir(consumequeue_dir))
    except FileNotFoundError:
        return QueueScan((), ())
    for topic in topic_entries:
        if not topic.is_dir():
            continue
        if not _utf8(topic.name):
            skipped.append(SkippedDir.of(topic.path, "topic name is not valid UTF-8"))
            continue
        try:
            queue_entries = list(os.scandir(topic.path))
        except FileNotFoundError:  # topic deleted while we listed
            continue
        except OSError as exc:
            skipped.append(SkippedDir.of(topic.path, f"cannot list: {exc.strerror}"))
            continue
        for q in queue_entries:
            if not q.is_dir():
                continue
            if _utf8(q.name) and q.name.isascii() and q.name.isdigit():
                out.append(QueueKey(topic.name, int(q.name)))
            else:
                skipped.append(SkippedDir.of(q.path, "not a decimal queue id"))
    return QueueScan(tuple(sorted(out)), tuple(sorted(skipped)))


@dataclass(frozen=True, slots=True)
class CommitlogScan:
    """One record found by :meth:`HotStore.scan_commitlog`, with where it lives."""

    offset: int
    record: MessageRecord


def _refuse_layout(root: Path, commitlog_dir: Path, consumequeue_dir: Path) -> None:
    """Refuse a RocksDB consume queue, then a directory that is not a broker store."""
    try:
        names = os.listdir(consumequeue_dir)
    except OSError:
        names = []
    if any(_ROCKSDB_MARKERS.match(n) for n in names):
        raise UnsupportedStoreError(
            "consume queue is kept in RocksDB (storeType=defaultRocksDB); "
            "tieredstore reads only the file-based consume queue (storeType=default)",
            where=str(consumequeue_dir),
        )
    missing = [d for d in (commitlog_dir, consumequeue_dir) if not d.is_dir()]
    if missing:
        names_text = " and ".join(f"{d.name}/" for d in missing)
        raise NotAStoreError(
            f"not a broker store: no {names_text} (give storePathRootDir, the directory "
            "holding commitlog/ and consumequeue/)",
            where=str(root),
        )


class HotStore:
    """A broker store directory, read-only.

    Args:
        root: ``storePathRootDir``.
        commitlog_dir: the commitlog directory when the broker keeps it elsewhere
            (``storePathCommitLog``); default ``<root>/commitlog``.

    Raises:
        NotAStoreError: ``root`` is not a directory, or it lacks the commitlog or the
            ``consumequeue`` directory. A broker creates both when it starts, so a
            directory without them is a wrong path (often the store's parent), never an
            empty store: treating it as one would report "0 queues" and exit 0.
        UnsupportedStoreError: the consume queue is kept in RocksDB.
    """

    def __init__(self, root: Path | str, *, commitlog_dir: Path | str | None = None) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise NotAStoreError("store directory does not exist", where=str(self.root))
        self.commitlog_dir = Path(commitlog_dir) if commitlog_dir else self.root / "commitlog"
        self.consumequeue_dir = self.root / "consumequeue"
        self._listings: dict[Path, tuple[int, MappedFileList]] = {}
        _refuse_layout(self.root, self.commitlog_dir, self.consumequeue_dir)

    # -- metadata ------------------------------------------------------------------
    def topics(self) -> dict[str, TopicConfig]:
        """Return ``config/topics.json`` (empty when the broker has not written it)."""
        return read_topics(self.root / "config" / "topics.json")

    def checkpoint(self) -> Checkpoint:
        """Return the decoded ``checkpoint`` file."""
        return read_checkpoint(self.root / "checkpoint")

    def queues(self) -> list[QueueKey]:
        """List every (topic, queue id) that has a consume-queue directory, sorted;
        directories :meth:`scan_queues` skips are left out."""
        return list(self.scan_queues().queues)

    def scan_queues(self) -> QueueScan:
        """The queues of the consume-queue directory, and the directories skipped
        (:func:`scan_queue_dirs`)."""
        return scan_queue_dirs(self.consumequeue_dir)

    def _listing(self, directory: Path) -> MappedFileList:
        """List ``directory``, reusing the last listing while its mtime is unchanged.

        Files are created and deleted, never resized, so the directory's mtime says
        when a listing is stale. A directory changed within the last two seconds is
        always rescanned, so a coarse mtime clock cannot hide a change.
        """
        try:
            mtime = os.stat(directory).st_mtime_ns
        except FileNotFoundError:
            return MappedFileList([])
        except OSError as exc:
            raise StoreNotFoundError(f"cannot stat: {exc.strerror}", where=str(directory)) from exc
        cached = self._listings.get(directory)
        if cached is not None and cached[0] == mtime and time.time_ns() - mtime > 2_000_000_000:
            return cached[1]
        files = MappedFileList.scan(directory)
        self._listings[directory] = (mtime, files)
        return files

    def commitlog_files(self) -> MappedFileList:
        """The commitlog files present now (the broker deletes old ones)."""
        return self._listing(self.commitlog_dir)

    def cq_files(self, topic: str, queue_id: int) -> MappedFileList:
        """The consume-queue files of one queue present now."""
        return self._listing(self.consumequeue_dir / topic / str(queue_id))

    # -- offsets -------------------------------------------------------------------
    def queue_range(self, topic: str, queue_id: int) -> HotRange:
        """Return the queue's hot ``[min, max)`` (see the module docstring); one read of
        a queue with one consume-queue file (:meth:`queue_units`)."""
        return self.queue_units(topic, queue_id, 0, 0)[0]

    def queue_units(
        self, topic: str, queue_id: int, start: int, limit: int
    ) -> tuple[HotRange, Units]:
        """The queue's hot ``[min, max)`` (module docstring) and its units for queue
        offsets ``[start, min(max, start + limit))`` as :meth:`read_units` returns them,
        from one read of the consume queue where it can: planning a thousand small
        queues was mostly these reads, three per queue.

        The scan that finds the hot max (the first all-zero unit of the newest file; a
        freshly created, all-zero file: its base) reads that file from its start, so it
        already holds every unit below the max there: the hot min comes from them when
        the queue has one file, and so do the units asked for when they lie in it; older
        files are scanned and read apart. No units (an empty array) when ``start`` is
        outside ``[min, max)`` or ``limit`` is not positive. Errors as
        :meth:`read_units`' (a consume-queue file of a partial unit: TruncatedDataError).
        """
        cq = self.cq_files(topic, queue_id)
        if not cq:
            return HotRange(0, 0), decode_units(b"")
        kept: list[bytes] = []
        newest = cq.files[-1]
        used = _scan_units(newest, zero_mask, kept).index
        hot_max = (newest.base + used * CQ_UNIT_SIZE) // CQ_UNIT_SIZE
        head = b"".join(kept)  # the newest file's units below the max, and a few after
        cl_min = self.commitlog_files().min_offset
        if len(cq.files) == 1:
            hot_min = _first_usable(kept, used, cl_min, newest.base // CQ_UNIT_SIZE, hot_max)
        else:
            hot_min = _min_offset(cq, cl_min, hot_max)
        rng = HotRange(hot_min, hot_max)
        end = min(hot_max, start + limit)
        if not hot_min <= start < end:
            return rng, decode_units(b"")
        base = newest.base // CQ_UNIT_SIZE
        if start >= base:  # decoded from a copy of their bytes, as read_units decodes its read
            units = head[(start - base) * CQ_UNIT_SIZE : (end - base) * CQ_UNIT_SIZE]
            return rng, decode_units(units, where=str(newest.path))
        return rng, self.read_units(topic, queue_id, start, end)

    # -- consume queue -------------------------------------------------------------
    def read_units(self, topic: str, queue_id: int, start: int, end: int) -> Units:
        """Return CQ units for queue offsets ``[start, end)`` in one array.

        Reads whole spans per file (bulk, no per-unit Python work). Raises
        OffsetOutOfRangeError when part of the range is not in any CQ file (deleted head
        or beyond the newest file) and CorruptUnitError when a unit in range is all zero
        (not yet written) — ask :meth:`queue_range` first.
        """
        if end <= start:
            return decode_units(b"")
        cq = self.cq_files(topic, queue_id)
        chunks: list[Units] = []
        pos = start * CQ_UNIT_SIZE
        stop = end * CQ_UNIT_SIZE
        while pos < stop:
            f = cq.find(pos)
            if f is None:
                raise OffsetOutOfRangeError(
                    f"queue offset {pos // CQ_UNIT_SIZE} of {topic}/{queue_id} is in no "
                    f"consume-queue file (files cover [{cq.min_offset // CQ_UNIT_SIZE}, "
                    f"{(cq.files[-1].end if cq else 0) // CQ_UNIT_SIZE}))",
                    where=str(self.consumequeue_dir / topic / str(queue_id)),
                )
            n = min(stop, f.end) - pos
            data = _pread(f.path, pos - f.base, n)
            if len(data) != n:
                raise TruncatedDataError(
                    f"consume-queue file is shorter than its peers ({len(data)} of {n} bytes)",
                    where=f"{f.path}@{pos - f.base}",
                )
            chunks.append(decode_units(data, where=str(f.path)))
            pos += n
        units = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
        zeros = np.flatnonzero(zero_mask(units))
        if zeros.size:
            bad = start + int(zeros[0])
            raise CorruptUnitError(
                f"queue offset {bad} of {topic}/{queue_id} has no unit yet (all zeros)",
                where=f"consumequeue/{topic}/{queue_id}@{bad * CQ_UNIT_SIZE}",
            )
        return units

    # -- commitlog -----------------------------------------------------------------
    def read_record_bytes(self, commitlog_offset: int, size: int) -> bytes:
        """Return the ``size`` bytes of the record at a commitlog offset."""
        offsets, sizes = np.array([commitlog_offset]), np.array([size])
        return self.read_records_bytes(offsets, sizes)[0]

    def read_records_bytes(self, offsets: np.ndarray, sizes: np.ndarray) -> list[bytes]:
        """Return the bytes of many records, given their commitlog offsets and sizes.

        Read through :class:`~tieredstore.hot.commitlog.HotCommitlog` (read-only mappings of
        the files holding them), the one hot-record reader.

        Raises OffsetOutOfRangeError for an offset in no commitlog file (deleted) and
        TruncatedDataError for a record crossing its file's end.
        """
        offs = np.asarray(offsets, dtype=np.int64)
        lens = np.asarray(sizes, dtype=np.int64)
        if offs.shape != lens.shape:
            raise ValueError(f"{offs.size} offsets but {lens.size} sizes")
        with HotCommitlog(self.commitlog_files()) as commitlog:
            buf = commitlog.gather(offs, lens)
        ends = np.cumsum(lens).tolist()
        return [bytes(buf[s:e]) for s, e in zip([0, *ends[:-1]], ends, strict=True)]

    def read_store_timestamp(self, commitlog_offset: int) -> int:
        """Return the storeTimestamp of the record at a commitlog offset (reads its head)."""
        f = self.commitlog_files().find(commitlog_offset)
        if f is None:
            raise OffsetOutOfRangeError(
                f"commitlog offset {commitlog_offset} is in no commitlog file",
                where=str(self.commitlog_dir),
            )
        head = _pread(f.path, commitlog_offset - f.base, HEAD_PROBE_SIZE)
        if len(head) < HEAD_PROBE_SIZE:
            raise TruncatedDataError("record header cut by end of file", where=f"{f.path}")
        arr = np.frombuffer(head, dtype=np.uint8)
        return int(store_timestamps(arr, np.zeros(1, dtype=np.int64))[0])

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """Return the first queue offset whose storeTimestamp is >= ``timestamp_ms``.

        Binary search over hot ``[min, max)`` (store times rise with queue offsets);
        returns hot max when every message is older, hot min when none is.
        """
        rng = self.queue_range(topic, queue_id)
        if rng.count == 0:
            return rng.max
        units = self.read_units(topic, queue_id, rng.min, rng.max)
        offsets = units["commitlog_offset"]
        lo, hi = 0, rng.count
        while lo < hi:
            mid = (lo + hi) // 2
            if self.read_store_timestamp(int(offsets[mid])) < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return rng.min + lo

    def read_message(self, topic: str, queue_id: int, queue_offset: int) -> MessageRecord:
        """Decode the record behind one queue offset, checking it belongs there."""
        unit = self.read_units(topic, queue_id, queue_offset, queue_offset + 1)[0]
        off, size = int(unit["commitlog_offset"]), int(unit["size"])
        data = self.read_record_bytes(off, size)
        where = f"commitlog@{off}"
        record = decode_record(data, where=where)
        if record.total_size != size or record.queue_offset != queue_offset:
            raise CorruptRecordError(
                f"record does not match its unit: size {record.total_size} vs {size}, "
                f"queueOffset {record.queue_offset} vs {queue_offset}",
                where=where,
            )
        return record

    def scan_commitlog(self, start: int | None = None) -> Iterator[CommitlogScan]:
        """Yield every complete record of the commitlog in physical order.

        Follows file rolling (the BLANK filler ends a file) and stops quietly at the
        end of the data: preallocated zeros, a torn last record, or a gap in the files.
        """
        files = self.commitlog_files()
        pos = files.min_offset if start is None else start
        for f in files.files:
            if f.end <= pos:
                continue
            if f.base > pos:  # a missing file between: nothing after it is contiguous
                return
            data = _pread(f.path, 0, f.size)
            rel = pos - f.base
            while True:
                probe = probe_record(data, rel, where=str(f.path))
                if probe.kind is ProbeKind.RECORD and probe.record is not None:
                    yield CommitlogScan(f.base + rel, probe.record)
                    rel += probe.size
                    continue
                if probe.kind is ProbeKind.END:
                    return
                break  # BLANK: continue in the next file
            pos = f.end
