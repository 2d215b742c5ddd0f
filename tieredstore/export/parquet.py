"""Export the archive to Parquet, link by link: idempotent and incremental.

What is exported is each queue's committed history as every reader reads it
(:func:`~tieredstore.cold.history.load_history`): its links, each a segment (committed
by a manifest) or a batch slice (one queue's part of a batch object). Below, "segment"
means either: a link is exported whole, from the bytes of its spans only.

Layout under the output root (any backend URL: a path, ``file://``, ``s3://``)::

    topic=<topic>/date=<YYYY-MM-DD>/<cluster>+<broker>+<queueId>+<start:020d>.parquet
    _tieredstore_export/<cluster>/<broker>.json          the export manifest

Each Parquet file holds the rows of one segment stored on one UTC day (by
``store_timestamp``) with every column of :data:`~tieredstore.export.rows.ARCHIVE_SCHEMA`
but ``topic``, which is the partition directory, as Spark's ``partitionBy`` writes it;
``date`` is the second partition column. Topic names are escaped in directory names as
Spark escapes partition values (``%RETRY%g`` is ``topic=%25RETRY%25g``), so Spark and
``pyarrow.dataset(..., partitioning="hive")`` both read the tree back with the original
names. Files and directories starting with ``_`` are ignored by both.

**Idempotent.** A file's name is a function of the segment (cluster, broker, queue,
first offset) and the day, so exporting a segment again overwrites its files instead of
adding rows. The export manifest records, per link (by
:attr:`~tieredstore.cold.history.Committed.history_key`: a segment's manifest key, or
``<batch key>#<topic>/<queue id>`` for a slice, whose record also holds its topic, queue
id and first offset), the SHA-256 of the manifest exported (of a slice's description,
:func:`_commit_sha`), the files written and the row count. A run skips every segment
recorded with the same manifest digest; a segment whose manifest changed (re-tiered by
``repair``) is exported again and its files no longer written are deleted.

**One row per committed offset.** A segment can leave the committed history: ``repair``
quarantines a DIVERGED queue's cold tail and the queue is tiered again from hot, maybe
with another segment size, so new segments cover the old ones' offsets under other
keys. Each run first removes (files and record) every exported segment of a selected
topic that is no longer a link of the committed history *and* whose offsets a link now
covers: it was superseded, and its rows would duplicate the new ones' (so is a slice
exported before compaction rewrote it as a segment: the segment is exported instead).
What the export promises is therefore one row per offset the cold store committed,
in the version it holds now. Segments removed by retention (``expire``) are gone from
the cold store but superseded by nothing: the export keeps them, as an archive that
outlives cold retention (delete partitions by ``date`` to age it out).

**Never two rows for an offset.** Export reads as restore does: before anything is
written, every selected commit point is read, and two committed segments of one queue
that cover the same offsets (a damaged history: a manifest rewritten, copied or forged)
make the run refuse with :class:`~tieredstore.errors.OverlapError` naming both
(``tieredstore export`` exits 2). A batch slice that a segment or an earlier batch
already holds is no link (the reading rule, :func:`~tieredstore.cold.history.choose`):
it is normal (compacted, waiting for collection) and not exported. Gaps are fine
(retention removes the oldest segments).

**Incremental.** So the next run exports only segments committed since. The export
manifest is saved every :data:`SAVE_EVERY` segments and at the end (also when the run
fails): a crash between the two only means a few segments are exported again — their
files are overwritten, never duplicated.

**Selection.** ``topics`` are shell-style globs (``fnmatch``, case-sensitive); a
``since``/``until`` window (epoch ms, ``[since, until)``) selects the *segments* whose
store-time range overlaps it, exported whole: the segment is the unit of export and of
idempotence. Cut rows by time when reading the Parquet (``store_timestamp`` is a column).

**Parallel.** Segments are decoded column by column (numpy and Arrow,
:mod:`tieredstore.formats.columnar`). With ``jobs`` 1 (the default) segments go through
a two-stage pipeline in this process: one thread decodes while another encodes the
previous segment's Parquet (which releases the GIL), three segments in flight. With
``jobs > 1`` that many segments are checked,
decoded and encoded at once, each in its own process. Either way files are written and
recorded in segment order, while the next segments are read and decoded. Parquet
dictionary encoding is used only for the columns with few distinct values
(:data:`DICTIONARY_COLUMNS`) and min/max statistics are kept for all but the body and
the property map (:data:`STATISTICS_COLUMNS`).

One run at a time per output root and broker: runs do not lock the export manifest.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import fnmatch
import hashlib
import itertools
import json
import multiprocessing
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tieredstore.backends.base import Backend
from tieredstore.canonical_json import canonical
from tieredstore.clock import Clock
from tieredstore.cold.history import Committed, EntryKind, Span, load_history, span_bytes
from tieredstore.cold.layout import parse_object_key
from tieredstore.errors import (
    CorruptManifestError,
    InvalidNameError,
    ObjectNotFoundError,
    OverlapError,
)
from tieredstore.export.rows import ARCHIVE_SCHEMA, SegmentSlice

__all__ = [
    "DICTIONARY_COLUMNS",
    "EXPORT_FORMAT",
    "SAVE_EVERY",
    "STATISTICS_COLUMNS",
    "EncodedSegment",
    "ExportManifest",
    "ExportProgress",
    "ExportReport",
    "ExportRequest",
    "encode_segment",
    "export_manifest_key",
    "export_parquet",
    "partition_dir",
]

EXPORT_FORMAT: Final = "tieredstore-export/1"
#: Segments exported between two saves of the export manifest.
SAVE_EVERY: Final = 32
#: The columns of a Parquet file: the archive's but ``topic`` (a partition directory).
FILE_SCHEMA: Final = pa.schema([f for f in ARCHIVE_SCHEMA if f.name != "topic"])
#: Parquet columns (paths) with few distinct values, dictionary-encoded. The others
#: (bodies, ids, keys, property values, offsets, timestamps) are nearly all distinct: a
#: dictionary would be built for each and dropped once it outgrew its page (about a
#: third of the encoding time).
DICTIONARY_COLUMNS: Final = (
    "queue_id", "tags", "properties.key_value.key", "sys_flag", "reconsume_times",
    "broker", "cluster",
)  # fmt: skip
#: Parquet columns (paths) with min/max statistics, for readers' pruning: all but the
#: body and the property map, whose bounds select nothing.
STATISTICS_COLUMNS: Final = (
    "queue_id", "queue_offset", "store_timestamp", "born_timestamp", "msg_id",
    "offset_msg_id", "keys.list.element", "tags", "body_size", "sys_flag",
    "reconsume_times", "broker", "cluster",
)  # fmt: skip

_MANIFEST_DIR: Final = "_tieredstore_export"
# The characters Spark escapes in partition directory names (ExternalCatalogUtils).
_ESCAPED: Final = frozenset("\"#%'*/:=?\\\x7f{[]^") | frozenset(chr(c) for c in range(0x20))


def _escape(value: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def partition_dir(topic: str, day: dt.date) -> str:
    """``topic=<escaped topic>/date=<YYYY-MM-DD>``."""
    return f"topic={_escape(topic)}/date={day.isoformat()}"


def export_manifest_key(cluster: str, broker: str) -> str:
    """Where the export manifest of one broker lives under the output root."""
    return f"{_MANIFEST_DIR}/{cluster}/{broker}.json"


@dataclass(frozen=True)
class ExportRequest:
    """What to export: one broker's segments, of topics matching ``topics`` (all when
    empty), overlapping the store times ``[since_ms, until_ms)`` (None: unbounded)."""

    cluster: str
    broker: str
    topics: tuple[str, ...] = ()
    since_ms: int | None = None
    until_ms: int | None = None

    def wants_topic(self, topic: str) -> bool:
        return not self.topics or any(fnmatch.fnmatchcase(topic, g) for g in self.topics)

    def wants_segment(self, m: Committed) -> bool:
        return (self.since_ms is None or m.max_store_timestamp >= self.since_ms) and (
            self.until_ms is None or m.min_store_timestamp < self.until_ms
        )


@dataclass(frozen=True)
class ExportReport:
    """What a run did: segments selected, exported now, skipped as already exported."""

    selected: int
    exported: int
    skipped: int
    rows: int
    files: int
    bytes: int
    removed: int = 0  # superseded segments removed (module doc)
    removed_rows: int = 0


@dataclass(frozen=True)
class ExportProgress:
    """How far a run is: segments looked at of those listed (exported now or skipped as
    exported before, or not selected), and what was written so far."""

    segments: int
    segments_total: int
    exported: int
    rows: int
    bytes: int


@dataclass
class ExportManifest:
    """The export manifest of one broker: link history key → what was exported."""

    cluster: str
    broker: str
    segments: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        doc = {"format": EXPORT_FORMAT, "cluster": self.cluster, "broker": self.broker,
               "segments": self.segments}  # fmt: skip
        return json.dumps(doc, sort_keys=True, indent=1).encode()

    @classmethod
    def load(cls, data: bytes, *, where: str, cluster: str, broker: str) -> ExportManifest:
        """Parse an export manifest; CorruptManifestError (one line) if it is not ours."""
        try:
            doc = json.loads(data)
            ok = doc["format"] == EXPORT_FORMAT and (doc["cluster"], doc["broker"]) == (
                cluster,
                broker,
            )
            segments = dict(doc["segments"])
            for entry in segments.values():
                if not (isinstance(entry["manifest_sha256"], str)
                        and all(isinstance(f, str) for f in entry["files"])
                        and _slice_place(entry) is not False):  # fmt: skip
                    raise TypeError(f"bad segment entry {entry!r}")
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptManifestError(f"not an export manifest: {exc!r}", where=where) from exc
        if not ok:
            raise CorruptManifestError(
                f"export manifest of {doc.get('format')} for {doc.get('cluster')}/"
                f"{doc.get('broker')}, not {EXPORT_FORMAT} for {cluster}/{broker}",
                where=where,
            )
        return cls(cluster, broker, segments)


async def _load_manifest(out: Backend, request: ExportRequest) -> ExportManifest:
    key = export_manifest_key(request.cluster, request.broker)
    try:
        data = await out.read(key)
    except ObjectNotFoundError:
        return ExportManifest(request.cluster, request.broker)
    return ExportManifest.load(
        data, where=f"{out.url} {key}", cluster=request.cluster, broker=request.broker
    )


def _slice_place(entry: dict[str, Any]) -> tuple[str, int, int] | bool:
    """A slice's record: (topic, queue id, first offset); True for a segment's record
    (its key names them); False for a slice record whose place is malformed."""
    if "start_offset" not in entry:
        return True
    topic, queue_id, start = entry.get("topic"), entry.get("queue_id"), entry["start_offset"]
    if not (isinstance(topic, str) and type(queue_id) is int and type(start) is int):
        return False
    return topic, queue_id, start


def _place(hkey: str, entry: dict[str, Any]) -> tuple[str, int, int] | None:
    """(topic, queue id, first offset) of an exported link; None for a key this version
    never wrote."""
    place = _slice_place(entry)
    if isinstance(place, tuple):
        return place
    try:
        parsed = parse_object_key(hkey)
    except InvalidNameError:
        return None
    return parsed.topic, parsed.queue_id, parsed.base_offset


async def _current(cold: Backend, run: _Run, request: ExportRequest) -> list[Committed]:
    """The links to export (:func:`_history`), once the exported ones they superseded are
    removed (:func:`_remove_superseded`)."""
    links = await _history(cold, request)
    await _remove_superseded(run, request, links)
    return links


async def _remove_superseded(run: _Run, request: ExportRequest, links: list[Committed]) -> None:
    """Remove the exported links that left the committed history (module doc): no link
    of it now, of a selected topic, and covered by a link. Counted in ``run``; files
    another record names are kept."""
    current: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for link in links:
        current[(link.topic, link.queue_id)].append((link.start_offset, link.end_offset))
    keys = {link.history_key for link in links}
    for hkey in sorted(k for k in run.done.segments if k not in keys):
        entry = run.done.segments[hkey]
        place = _place(hkey, entry)
        if place is None:
            continue  # not a key this version wrote: left as it is
        topic, queue_id, start = place
        end = start + int(entry["rows"])  # links are exported whole
        covered = any(s < end and start < e for s, e in current.get((topic, queue_id), []))
        if not request.wants_topic(topic) or not covered:
            continue
        del run.done.segments[hkey]
        run.changed = True
        named = {f for e in run.done.segments.values() for f in e["files"]}
        for name in sorted(set(entry["files"]) - named):
            await run.out.delete(name)
        run.removed, run.removed_rows = run.removed + 1, run.removed_rows + int(entry["rows"])


async def _history(cold: Backend, request: ExportRequest) -> list[Committed]:
    """The chosen links of every wanted queue, in history-key order (a segment's manifest
    key), once each queue's history is known to hold one version of each offset.

    Raises OverlapError, naming both manifests, when two committed segments of a queue
    cover the same offsets (e.g. a manifest rewritten or copied under another start):
    export reads as restore does and writes nothing then, rather than two rows for an
    offset. A slice the reading rule set aside is not exported. Gaps are allowed:
    retention removes a queue's oldest segments.
    """
    history = await load_history(
        cold, request.cluster, request.broker, wants_topic=request.wants_topic
    )
    links = sorted(history.links(), key=lambda c: c.history_key)
    segments = [c for h in history.queues.values() for c in (*h.links, *h.overlaps)
                if c.kind is EntryKind.SEGMENT]  # fmt: skip
    by_queue: dict[tuple[str, int], list[Committed]] = {}
    for c in sorted(segments, key=lambda c: c.key):
        by_queue.setdefault((c.topic, c.queue_id), []).append(c)
    for queue_segments in by_queue.values():
        queue_segments.sort(key=lambda m: (m.start_offset, m.end_offset))
        for a, b in itertools.pairwise(queue_segments):
            if b.start_offset < a.end_offset:
                raise OverlapError(
                    f"committed segments [{a.start_offset}, {a.end_offset}) and "
                    f"[{b.start_offset}, {b.end_offset}) of {a.topic}/{a.queue_id} overlap "
                    f"({a.key}, {b.key}): export writes one row per offset and refuses "
                    "a history with two versions of one; nothing was exported",
                    where=b.key,
                )
    return links


def _commit_sha(link: Committed) -> str:
    """What an export record remembers of the link it exported (a change exports it
    again): the SHA-256 of a segment's manifest (canonical JSON: the bytes written), of
    a slice's canonical description (a batch never changes, so neither does this)."""
    if link.manifest is not None:
        return hashlib.sha256(link.manifest.to_json()).hexdigest()

    def span(s: Span) -> list[object]:
        return [s.key, s.at, s.size, s.digest, s.object_size]

    doc = {"key": link.history_key, "sequence": link.sequence, "start": link.start_offset,
           "end": link.end_offset, "cl": [link.cl_base, link.cl_end],
           "commit_log": span(link.commit_log), "consume_queue": span(link.consume_queue),
           "algorithm": link.digest_algorithm}  # fmt: skip
    return hashlib.sha256(canonical(doc)).hexdigest()


def _file_name(m: Committed) -> str:
    # Names are percent-quoted, so "+" separates them unambiguously.
    cluster, broker = quote(m.queue.cluster, safe=""), quote(m.queue.broker, safe="")
    return f"{cluster}+{broker}+{m.queue_id}+{m.start_offset:020d}.parquet"


def _files(m: Committed, table: pa.Table) -> Iterable[tuple[str, pa.Table]]:
    """The segment's rows split by UTC day: (key under the output root, rows)."""
    days = pc.cast(table["store_timestamp"], pa.date32())
    unique = sorted(pc.unique(days).to_pylist())
    for day in unique:
        # Most segments lie within one day: their rows need no filtering.
        rows = (
            table if len(unique) == 1 else table.filter(pc.equal(days, pa.scalar(day, pa.date32())))
        )
        yield f"{partition_dir(m.topic, day)}/{_file_name(m)}", rows.drop_columns(["topic"])


def _parquet(table: pa.Table) -> bytes:
    # An Arrow in-memory sink, not io.BytesIO: the writer then never calls back into
    # Python (and takes the GIL) for each chunk it writes.
    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        compression="zstd",
        use_dictionary=list(DICTIONARY_COLUMNS),
        write_statistics=list(STATISTICS_COLUMNS),
    )
    data: bytes = sink.getvalue().to_pybytes()
    return data


@dataclass(frozen=True)
class EncodedSegment:
    """A segment's Parquet files (key under the output root, bytes) and its row count."""

    files: list[tuple[str, bytes]]
    rows: int


def decode_segment(
    link: Committed, commit_log: bytes, consume_queue: bytes, where: str
) -> tuple[Committed, pa.Table]:
    """Check a whole link (its spans' bytes) against its commit point and decode its rows.

    Raises:
        SizeMismatchError / DigestMismatchError / CorruptDataError: see
            :meth:`~tieredstore.export.rows.SegmentSlice.whole`.
    """
    piece = SegmentSlice.whole(link, commit_log, consume_queue, where=where)
    batches = list(piece.batches(cluster=link.queue.cluster, broker=link.queue.broker))
    return link, pa.Table.from_batches(batches, schema=ARCHIVE_SCHEMA)


def encode_table(m: Committed, table: pa.Table) -> EncodedSegment:
    """A decoded segment's Parquet files, one per UTC day (zstd; releases the GIL)."""
    return EncodedSegment([(key, _parquet(rows)) for key, rows in _files(m, table)], table.num_rows)


def encode_segment(
    link: Committed, commit_log: bytes, consume_queue: bytes, where: str
) -> EncodedSegment:
    """:func:`decode_segment` then :func:`encode_table` (sync and self-contained: it
    runs in a worker process with ``--jobs``)."""
    return encode_table(*decode_segment(link, commit_log, consume_queue, where))


@dataclass
class _Run:
    """One export run: the output, what is recorded, and the counts so far."""

    out: Backend
    done: ExportManifest
    key: str
    clock: Clock
    exported: int = 0
    rows: int = 0
    files: int = 0
    bytes: int = 0
    changed: bool = False  # records removed: the manifest must be saved
    removed: int = 0  # segments removed as superseded, and their rows
    removed_rows: int = 0

    async def finish(self, link: Committed, sha: str, job: asyncio.Future[EncodedSegment]) -> None:
        """Write a link's files, delete its stale ones, record it (saved every
        :data:`SAVE_EVERY` links)."""
        encoded = await job
        mkey = link.history_key
        old = self.done.segments.get(mkey)
        for name, data in encoded.files:
            await self.out.write(name, data)
        keys = [name for name, _ in encoded.files]
        for stale in sorted(set(old["files"] if old else ()) - set(keys)):
            await self.out.delete(stale)
        self.done.segments[mkey] = {
            "manifest_sha256": sha,
            "files": keys,
            "rows": encoded.rows,
            "exported_at_ms": self.clock.now_ms(),
        }
        if link.kind is EntryKind.SLICE:  # its key does not say where it lies
            self.done.segments[mkey] |= {"topic": link.topic, "queue_id": link.queue_id,
                                         "start_offset": link.start_offset}  # fmt: skip
        self.exported += 1
        self.rows += encoded.rows
        self.files += len(keys)
        self.bytes += sum(len(data) for _, data in encoded.files)
        if self.exported % SAVE_EVERY == 0:
            await self.save()

    async def save(self) -> None:
        await self.out.write(self.key, self.done.to_json())

    def progress(self, looked: int, listed: int) -> ExportProgress:
        """How far the run is, ``looked`` of ``listed`` links."""
        return ExportProgress(looked, listed, self.exported, self.rows, self.bytes)


SegmentArgs = tuple[Committed, bytes, bytes, str]  # the link, its CL and CQ bytes, where


class _Pipeline:
    """``jobs`` 1: a two-stage pipeline in this process. One thread decodes segments
    (mostly Python and numpy: it holds the GIL), another encodes the previous ones'
    Parquet (zstd in C++: it releases the GIL), so both cores work; two threads that
    each decoded and then encoded a segment spent half their time decoding side by
    side, one waiting for the GIL."""

    #: Segments in flight: one decoding, one encoding, one read ahead.
    depth: Final = 3

    def __init__(self) -> None:
        self._decode = ThreadPoolExecutor(1, thread_name_prefix="export-decode")
        self._encode = ThreadPoolExecutor(1, thread_name_prefix="export-encode")

    def submit(self, args: SegmentArgs) -> asyncio.Future[EncodedSegment]:
        return asyncio.ensure_future(self._run(args))

    async def _run(self, args: SegmentArgs) -> EncodedSegment:
        loop = asyncio.get_running_loop()
        m, table = await loop.run_in_executor(self._decode, decode_segment, *args)
        return await loop.run_in_executor(self._encode, encode_table, m, table)

    def close(self) -> None:
        self._decode.shutdown(wait=True)
        self._encode.shutdown(wait=True)


class _Processes:
    """``jobs > 1``: that many segments checked, decoded and encoded at once, each in
    its own (spawned) process."""

    def __init__(self, jobs: int) -> None:
        self.depth = jobs
        # spawn: a fork would copy the event loop's threads and connections.
        self._pool: Executor = ProcessPoolExecutor(
            jobs, mp_context=multiprocessing.get_context("spawn")
        )

    def submit(self, args: SegmentArgs) -> asyncio.Future[EncodedSegment]:
        return asyncio.get_running_loop().run_in_executor(self._pool, encode_segment, *args)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _stages(jobs: int) -> _Pipeline | _Processes:
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    return _Pipeline() if jobs == 1 else _Processes(jobs)


_Job = tuple[Committed, str, "asyncio.Future[EncodedSegment]"]  # the link, its sha, the work
#: What :func:`export_parquet` tells how far it is.
OnProgress = Callable[[ExportProgress], None]


async def _submit(
    cold: Backend,
    run: _Run,
    request: ExportRequest,
    stages: _Pipeline | _Processes,
    link: Committed,
) -> tuple[bool, _Job | None]:
    """One link of the committed history (:func:`_history`): whether the request selects
    it, and its export job when it is not exported yet (its spans' bytes read, a
    segment's objects whole, and submitted)."""
    if not request.wants_segment(link):
        return False, None
    sha = _commit_sha(link)
    if run.done.segments.get(link.history_key, {}).get("manifest_sha256") == sha:
        return True, None
    cl = await span_bytes(cold, link.commit_log)
    cq = await span_bytes(cold, link.consume_queue)
    return True, (link, sha, stages.submit((link, cl, cq, cold.url)))


async def export_parquet(cold: Backend, out: Backend, request: ExportRequest, *,
                        clock: Clock, jobs: int = 1,
                        on_progress: OnProgress | None = None) -> ExportReport:  # fmt: skip
    """Export the segments ``request`` selects that are not exported yet (module doc).

    ``jobs > 1``: that many segments at once, each in its own process; 1: a decode
    thread and an encode thread in this process, three segments in flight. The oldest
    finished segment's files are written meanwhile (one segment at a time, in order).
    Memory: about three times a segment's size per segment in flight or being written.
    ``on_progress`` is told after each listed segment is read (and when one is
    written) how far the run is (:class:`ExportProgress`).

    Raises:
        CorruptManifestError: a segment manifest or the export manifest does not validate.
        OverlapError: a queue's committed segments overlap (:func:`_history`).
        ObjectNotFoundError / SizeMismatchError / DigestMismatchError / CorruptDataError:
            a segment whose objects are missing or do not match its manifest (the
            segments exported before it stay recorded).
    """
    run = _Run(out, await _load_manifest(out, request),
               export_manifest_key(request.cluster, request.broker), clock)  # fmt: skip
    pending: deque[_Job] = deque()
    # The oldest segment's files are written while the next segments are read and
    # submitted, so the decoder never waits for a write (one segment written at a time,
    # in order).
    writing: asyncio.Future[None] | None = None
    selected = 0
    stages = _stages(jobs)
    say = on_progress or (lambda _p: None)
    try:
        try:
            committed = await _current(cold, run, request)
            for looked, segment in enumerate(committed):
                say(run.progress(looked, len(committed)))
                wanted, submitted = await _submit(cold, run, request, stages, segment)
                selected += wanted
                if submitted is None:
                    continue
                pending.append(submitted)
                if len(pending) >= stages.depth:
                    if writing is not None:
                        await writing
                    writing = asyncio.ensure_future(run.finish(*pending.popleft()))
            if writing is not None:
                await writing
            while pending:
                await run.finish(*pending.popleft())
            say(run.progress(len(committed), len(committed)))
        finally:
            if writing is not None:  # an error above: stop the write, keep the error
                writing.cancel()
                await asyncio.gather(writing, return_exceptions=True)
            for _, _, job in pending:
                job.cancel()
            if run.exported or run.changed:
                await run.save()
    finally:
        await asyncio.to_thread(stages.close)
    return ExportReport(selected, run.exported, selected - run.exported, run.rows, run.files,
                        run.bytes, run.removed, run.removed_rows)  # fmt: skip
