"""Reading messages back from the cold store alone: commit points, never the catalogue.

:class:`ColdReader` serves one broker's cold prefix. For a queue it lists the
``MANIFEST/`` objects (each names the first queue offset of one committed segment) and
the broker's batch objects (``_batches/``, whose heads it reads once each: a batch never
changes), reads the few manifests a request needs (cached: committed manifests never
change), then range-reads only the CONSUME_QUEUE units and COMMIT_LOG records asked for —
from a segment's objects or a batch slice's byte ranges, by the one reading rule of
:mod:`tieredstore.cold.history` (a segment wins; a slice serves only offsets no segment
holds). Every record is checked against its unit before it is decoded: totalSize == unit
size, queueOffset field == the queue offset, physicalOffset field == the unit's cold
offset, and the topic and queue id are the queue's. Objects without a commit point are
uncommitted and never read.

What the cold store holds of a queue is ``[cold min, cold commit)``: from the first
link's start to the last link's end. A read must start inside it
(:class:`~tieredstore.errors.OffsetOutOfRangeError` otherwise, naming the range) and is
cut at cold commit, like a broker answering a pull near the end of a queue. Offsets the
broker deleted before they were tiered and ``resume`` accepted as lost (loss records,
``LOSS/``, :mod:`tieredstore.cold.loss`) are in no segment: a read that starts there is out of
range and the error names the loss record; a read that reaches one ends before it.

**Offset by time** (:meth:`ColdReader.offset_by_time`) follows RocketMQ's
``ConsumeQueue#getOffsetInQueueByTime(timestamp, BoundaryType)``: store times rise with
queue offsets, so it binary-searches the segments by their manifests' min/max store
times, then the records of one segment (one CQ unit and one record header per probe).

* ``LOWER``: the first offset whose storeTimestamp is ``>= T``; cold commit if every
  message is older.
* ``UPPER``: the last offset whose storeTimestamp is ``<= T``; cold min if every message
  is newer.

Worked example — one queue in cold, offsets 10..14 (cold min 10, cold commit 15):

======  ==============
offset  storeTimestamp
======  ==============
10      1000
11      1000
12      1000
13      3000
14      3000
======  ==============

=========  =====  =====  ==============================================================
T          LOWER  UPPER  why
=========  =====  =====  ==============================================================
500        10     10     every message is newer: both answer cold min
1000       10     12     LOWER: first of the equal run; UPPER: last of it
2000       13     12     no message at T: LOWER is the next one, UPPER the previous one
3000       13     14     the equal run 13..14
9000       15     14     every message is older: LOWER is cold commit, UPPER the last
=========  =====  =====  ==============================================================

The ``T=2000`` row is RocketMQ's own "t2" case (its comment: an upper boundary below the
lower one "does make sense when performing range queries"). Upstream's tiered store
answers UPPER for a missing T with the next offset instead (13 here); we keep the
broker's semantics, so a time range [T1, T2] maps to [LOWER(T1), UPPER(T2)] whether the
offsets are hot or cold. If store times ever go backwards inside a queue, the search still
ends at an offset of that queue, but not necessarily the first such one.

**Message ids.** ``msg_id`` is the client's id (property ``UNIQ_KEY``), the same in hot
and cold. ``offset_msg_id`` is store host + the record's physicalOffset field, which in
cold is the record's *cold* commitlog offset (bytes [28, 36) are rewritten, as in
RocketMQ's tiered store): it differs from the offset id the producer got from the broker.
"""

from __future__ import annotations

import base64
import bisect
import enum
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

from tieredstore.cold.compressed.framed import read_range
from tieredstore.cold.history import (
    BatchLinks,
    Committed,
    Withdrawal,
    as_link,
    choose,
)
from tieredstore.cold.layout import (
    QueuePath,
    SegmentKind,
    kind_prefix,
    parse_object_key,
)
from tieredstore.cold.loss import list_loss_records
from tieredstore.cold.manifest import FenceMarker, Manifest, read_stored
from tieredstore.cold.pieces import Pieces
from tieredstore.cold.segment import MIN_RECORD_SIZE
from tieredstore.errors import (
    CorruptLossRecordError,
    CorruptRecordError,
    CorruptUnitError,
    InvalidNameError,
    ObjectNotFoundError,
    OffsetOutOfRangeError,
    TruncatedDataError,
)
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE, Units, decode_units
from tieredstore.formats.msgid import offset_msg_id
from tieredstore.formats.record import (
    HEAD_PROBE_SIZE,
    MessageRecord,
    SysFlag,
    decode_record,
    msg_id_of,
)
from tieredstore.formats.vector import store_timestamps

if TYPE_CHECKING:  # the backends package pulls in s3fs; decoding must stay light
    from tieredstore.backends.base import Backend
    from tieredstore.cold.readahead import ReadAhead

__all__ = [
    "BoundaryType",
    "ColdMessage",
    "ColdRange",
    "ColdReader",
    "Segments",
    "check_units",
    "decode_messages",
]

log = logging.getLogger(__name__)

#: Bytes of a record header that always hold its storeTimestamp (IPv6 born host: 68..76).
#: Default bound on the COMMIT_LOG bytes one batch of a read holds in memory.
_BATCH_BYTES: Final = 4 << 20
_BATCH_UNITS: Final = 1024


class BoundaryType(enum.Enum):
    """Which end of a run of equal store times :meth:`ColdReader.offset_by_time` picks."""

    LOWER = "lower"
    UPPER = "upper"


@dataclass(frozen=True, slots=True)
class ColdRange:
    """Queue offsets ``[min, commit)`` committed in cold; ``min == commit`` when empty."""

    min: int
    commit: int

    @property
    def count(self) -> int:
        return self.commit - self.min

    def __str__(self) -> str:
        return f"[{self.min}, {self.commit})"


@dataclass(frozen=True, slots=True)
class ColdMessage:
    """One message read from cold: the decoded record and where it lives there.

    ``body`` is the producer's body (decompressed when the record was compressed).
    """

    queue_offset: int
    cold_commitlog_offset: int
    tags_code: int
    record: MessageRecord
    body: bytes

    @property
    def msg_id(self) -> str | None:
        """The client message id (``UNIQ_KEY``), when the producer set one."""
        return msg_id_of(self.record.properties)

    @property
    def offset_msg_id(self) -> str:
        """Store host + cold commitlog offset (see the module docstring)."""
        return offset_msg_id(self.record)

    def body_text(self) -> tuple[str, str]:
        """Return ``(encoding, text)``: ``("utf-8", body)`` if it decodes, else base64."""
        try:
            return "utf-8", self.body.decode("utf-8")
        except UnicodeDecodeError:
            return "base64", base64.b64encode(self.body).decode("ascii")

    @property
    def sys_flag(self) -> int:
        """``sysFlag`` as a consumer sees it: RocketMQ's ``MessageDecoder`` clears the
        COMPRESSED bit when it inflates the body (the compression-type bits stay), and
        ``body`` here is always inflated."""
        return self.record.sys_flag & ~int(SysFlag.COMPRESSED)

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict with every field a consumer sees (camelCase, as RocketMQ).

        ``sysFlag`` is :attr:`sys_flag` (COMPRESSED cleared: the body is decompressed);
        ``compression`` still says how the record was stored.
        """
        r = self.record
        encoding, body = self.body_text()
        return {
            "topic": r.topic,
            "queueId": r.queue_id,
            "queueOffset": self.queue_offset,
            "msgId": self.msg_id,
            "offsetMsgId": self.offset_msg_id,
            "coldCommitLogOffset": self.cold_commitlog_offset,
            "storeTimestamp": r.store_timestamp,
            "bornTimestamp": r.born_timestamp,
            "storeHost": str(r.store_host),
            "bornHost": str(r.born_host),
            "tags": r.tags,
            "tagsCode": self.tags_code,
            "keys": r.keys,
            "properties": r.properties,
            "sysFlag": self.sys_flag,
            "flag": r.flag,
            "reconsumeTimes": r.reconsume_times,
            "compression": r.compression_type.name if r.compressed else "NONE",
            "bodyCrc": r.body_crc,
            "bodyLength": len(self.body),
            "bodyEncoding": encoding,
            "body": body,
        }


@dataclass(frozen=True, slots=True)
class Segments:
    """One queue's committed history as listed: manifest keys sorted by start offset
    (read lazily), and the batch slices not already a duplicate of another slice
    (``slices``, sorted by start; :func:`~tieredstore.cold.history.choose` with no
    segments). A slice is read only where no segment holds its offsets."""

    starts: tuple[int, ...]
    keys: tuple[str, ...]
    slices: tuple[Committed, ...] = ()

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def empty(self) -> bool:
        return not self.starts and not self.slices

    def slice_at(self, offset: int) -> Committed | None:
        """The slice holding ``offset``, if any."""
        i = bisect.bisect_right(self.slices, offset, key=lambda s: s.start_offset) - 1
        if i >= 0 and offset < self.slices[i].end_offset:
            return self.slices[i]
        return None


Stored = Callable[[str], Awaitable[Manifest | FenceMarker]]


async def _at_or_before(stored: Stored, segs: Segments, i: int) -> tuple[int, Manifest] | None:
    """The last committed segment listed at index ``i`` or before, stepping over fence
    markers (no segment there); None if there is none."""
    while i >= 0:
        found = await stored(segs.keys[i])
        if isinstance(found, Manifest):
            return i, found
        i -= 1
    return None


async def _at_or_after(stored: Stored, segs: Segments, i: int) -> tuple[int, Manifest] | None:
    """The first committed segment listed at index ``i`` or after (see above)."""
    while i < len(segs):
        found = await stored(segs.keys[i])
        if isinstance(found, Manifest):
            return i, found
        i += 1
    return None


class _SegmentIndex:
    """Which committed segments a queue has and what each holds (manifests, cached).

    The part of :class:`ColdReader` that finds segments; it reads no record.

    ``cache_manifests`` bounds how many parsed manifests are kept (least recently used
    first out); ``batch_bytes`` bounds the COMMIT_LOG bytes one read batch holds;
    ``readahead`` (the read service's) serves the segment objects' range reads from
    fixed-size parts and fetches the next part ahead. Thread-unsafe, loop-safe: many
    coroutines may share one reader.
    """

    def __init__(
        self,
        backend: Backend,
        cluster: str,
        broker: str,
        *,
        cache_manifests: int = 4096,
        batch_bytes: int = _BATCH_BYTES,
        readahead: ReadAhead | None = None,
    ) -> None:
        if cache_manifests < 1 or batch_bytes < 1:
            raise ValueError("cache_manifests and batch_bytes must be positive")
        self.backend = backend
        self.cluster = cluster
        self.broker = broker
        self.batch_bytes = batch_bytes
        self.readahead = readahead
        self._cache_size = cache_manifests
        self._manifests: OrderedDict[str, Manifest | FenceMarker] = OrderedDict()
        # Each cached manifest's link: deriving its object keys validates every name
        # in them, too slow to repeat on every small read.
        self._links: dict[str, Committed] = {}
        # The broker's batch links by queue, heads read once (see _slices).
        self._batches = BatchLinks(backend, cluster, broker)

    def queue_path(self, topic: str, queue_id: int) -> QueuePath:
        """The queue's cold path; InvalidNameError for a name the layout refuses."""
        return QueuePath(self.cluster, self.broker, topic, queue_id)

    # -- segments ------------------------------------------------------------------
    async def _segments(self, queue: QueuePath) -> Segments:
        prefix = kind_prefix(queue, SegmentKind.MANIFEST) + "/"
        found: list[tuple[int, str]] = []
        for info in await self.backend.list(prefix):
            try:
                key = parse_object_key(info.key)
            except InvalidNameError as exc:
                # Not ours to read (a stray file); the reader only trusts manifest names.
                log.warning("ignoring foreign object in a manifest directory: %s", exc)
                continue
            found.append((key.base_offset, info.key))
        found.sort()
        slices = choose([], await self._slices(queue)).links
        return Segments(tuple(s for s, _ in found), tuple(k for _, k in found), slices)

    async def _slices(self, queue: QueuePath) -> list[Committed | Withdrawal]:
        """The queue's links in the broker's batch objects (:class:`BatchLinks`)."""
        return (await self._batches.by_queue()).get(queue, [])

    async def _stored(self, key: str) -> Manifest | FenceMarker:
        """What is at manifest key ``key``: a segment's manifest or a GC fence marker
        (no segment: every lookup below steps over it)."""
        cached = self._manifests.get(key)
        if cached is not None:
            self._manifests.move_to_end(key)
            return cached
        try:
            data = await self.backend.read(key)
        except ObjectNotFoundError as exc:
            # Listed a moment ago: expiry (or repair) removed the segment since.
            raise OffsetOutOfRangeError(
                "segment expired while it was being read", where=key
            ) from exc
        stored = read_stored(data, key)
        self._manifests[key] = stored
        if isinstance(stored, Manifest):
            self._links[key] = Committed.of_manifest(stored)
        if len(self._manifests) > self._cache_size:
            self._links.pop(self._manifests.popitem(last=False)[0], None)
        return stored

    async def _link(self, key: str) -> Committed | None:
        """The segment committed at manifest key ``key``; None for a fence marker."""
        stored = await self._stored(key)
        if isinstance(stored, FenceMarker):
            return None
        link = self._links.get(key)
        return link if link is not None else Committed.of_manifest(stored)

    async def range(self, topic: str, queue_id: int) -> ColdRange:
        """The queue's ``[cold min, cold commit)``; ``ColdRange(0, 0)`` if nothing is in cold."""
        segs = await self._segments(self.queue_path(topic, queue_id))
        return await self._range(segs)

    async def locate(self, topic: str, queue_id: int, offset: int) -> tuple[Segments, Committed]:
        """The queue's history and the link holding ``offset`` (OffsetOutOfRangeError if
        none does, as :meth:`read`)."""
        queue = self.queue_path(topic, queue_id)
        segs = await self._segments(queue)
        return segs, await self._segment_for(queue, segs, offset)

    async def following(self, segs: Segments, link: Committed) -> Committed | None:
        """The link that starts where ``link`` ends; None at cold commit or a gap."""
        return await self._link_at(segs, link.end_offset, starting=True)

    async def first_link(self, topic: str, queue_id: int) -> Committed | None:
        """The queue's oldest committed link; None if cold holds nothing."""
        segs = await self._segments(self.queue_path(topic, queue_id))
        rng = await self._range(segs)
        return await self._link_at(segs, rng.min) if rng.count else None

    async def _range(self, segs: Segments) -> ColdRange:
        first = await _at_or_after(self._stored, segs, 0)
        last = await _at_or_before(self._stored, segs, len(segs) - 1)
        starts, ends = [], []
        if first is not None and last is not None:
            starts.append(first[1].start_offset)
            ends.append(last[1].end_offset)
        if segs.slices:
            starts.append(segs.slices[0].start_offset)
            ends.append(segs.slices[-1].end_offset)
        return ColdRange(min(starts), max(ends)) if starts else ColdRange(0, 0)

    async def _segment_at(self, segs: Segments, offset: int) -> Committed | None:
        """The segment holding ``offset`` (manifests read lazily), if any."""
        found = await _at_or_before(
            self._stored, segs, bisect.bisect_right(segs.starts, offset) - 1
        )
        if found is None or offset >= found[1].end_offset:
            return None
        return await self._link(segs.keys[found[0]])

    async def _link_at(
        self, segs: Segments, offset: int, *, starting: bool = False
    ) -> Committed | None:
        """The link holding ``offset`` by the one reading rule
        (:func:`~tieredstore.cold.history.choose`): a segment if one holds it, else a
        slice that no segment overlaps. ``starting``: only a link that starts there."""
        link = await self._segment_at(segs, offset)
        if link is None:
            link = segs.slice_at(offset)
            if link is not None and await self._overlapped(segs, link):
                link = None
        if link is not None and starting and link.start_offset != offset:
            return None
        return link

    async def _overlapped(self, segs: Segments, link: Committed) -> bool:
        """Whether a segment holds any of the slice's offsets (then the segment wins)."""
        i = bisect.bisect_left(segs.starts, link.end_offset) - 1
        found = await _at_or_before(self._stored, segs, i)
        return found is not None and found[1].end_offset > link.start_offset

    async def _segment_for(self, queue: QueuePath, segs: Segments, offset: int) -> Committed:
        """The committed link holding ``offset``; OffsetOutOfRangeError if none does."""
        link = await self._link_at(segs, offset)
        if link is not None:
            return link
        rng = await self._range(segs)
        await self._raise_if_lost(queue, offset)
        if rng.min <= offset < rng.commit:
            raise OffsetOutOfRangeError(
                f"queue offset {offset} of {queue} is in no committed segment: a gap "
                f"inside what cold holds {rng}",
                where=queue.root,
            )
        raise OffsetOutOfRangeError(
            f"queue offset {offset} of {queue} is outside what cold holds {rng}"
            + (" (nothing tiered yet)" if segs.empty else ""),
            where=queue.root,
        )

    async def _raise_if_lost(self, queue: QueuePath, offset: int) -> None:
        """Raise OffsetOutOfRangeError naming the loss record that covers ``offset``, if any
        (only on the error path: one listing of the queue's ``LOSS/``)."""
        try:
            losses = await list_loss_records(self.backend, queue)
        except CorruptLossRecordError as exc:
            log.warning("ignoring a loss record that does not parse: %s", exc)
            return
        for loss in losses:
            if loss.start_offset <= offset < loss.end_offset:
                raise OffsetOutOfRangeError(
                    f"queue offset {offset} is in no committed segment: {loss.describe()}",
                    where=loss.key,
                )


class ColdReader(_SegmentIndex):
    """Reads one broker's queues from its cold prefix (see the module docstring).

    ``cache_manifests`` bounds how many parsed manifests are kept (least recently used
    first out); ``batch_bytes`` bounds the COMMIT_LOG bytes one read batch holds;
    ``readahead`` (the read service's) serves the segment objects' range reads from
    fixed-size parts and fetches the next part ahead. Thread-unsafe, loop-safe: many
    coroutines may share one reader.
    """

    # -- reading records -----------------------------------------------------------
    async def read(self, topic: str, queue_id: int, offset: int, count: int) -> list[ColdMessage]:
        """Return up to ``count`` messages from ``offset`` (fewer at cold commit).

        Raises:
            OffsetOutOfRangeError: ``offset`` is not in ``[cold min, cold commit)``.
            CorruptUnitError / CorruptRecordError: a unit or record that does not fit
                the segment, named by object key and byte offset.
            ObjectNotFoundError: a committed segment lacks an object.
        """
        return [m async for m in self.iter_messages(topic, queue_id, offset, count)]

    async def iter_messages(
        self, topic: str, queue_id: int, offset: int, count: int
    ) -> AsyncIterator[ColdMessage]:
        """Yield the messages of :meth:`read` batch by batch (bounded memory)."""
        if count < 1:
            raise ValueError(f"count must be at least 1, got {count}")
        queue = self.queue_path(topic, queue_id)
        segs = await self._segments(queue)
        link: Committed | None = await self._segment_for(queue, segs, offset)
        left = count
        while left > 0 and link is not None:
            n = min(left, link.end_offset - offset, _BATCH_UNITS)
            batch = await self._read_batch(link, offset, n)
            for message in batch:
                yield message
            offset += len(batch)
            left -= len(batch)
            if offset == link.end_offset:
                # None at cold commit, a gap or a fence marker: the read ends here.
                link = await self.following(segs, link)

    async def read_units(self, link: Committed, offset: int, n: int) -> Units:
        """The CQ units of queue offsets ``[offset, offset + n)`` of one link, unchecked."""
        rel = (offset - link.start_offset) * CQ_UNIT_SIZE
        span = link.consume_queue
        data = await self._read_object(link, span.key, span.at + rel, span.at + rel + n * 20)
        return decode_units(data.tobytes(), where=span.key)

    async def read_commit_log(self, link: Committed, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` (relative to the link's cold commitlog) of its COMMIT_LOG."""
        return (await self.read_commit_log_pieces(link, start, end)).tobytes()

    async def read_commit_log_pieces(self, link: Committed, start: int, end: int) -> Pieces:
        """:meth:`read_commit_log` as views over the read-ahead's parts (no copy); one
        view of the backend's answer without a read-ahead.

        Raises:
            CorruptUnitError: ``[start, end)`` is not inside the link's cold commitlog.
        """
        span = link.commit_log
        if not 0 <= start <= end <= span.size:
            raise CorruptUnitError(
                f"cold commitlog bytes [{start}, {end}) are outside {link.describe()}",
                where=span.key,
            )
        if start == end:
            return Pieces.of(b"")
        return await self._read_object(link, span.key, span.at + start, span.at + end)

    async def _read_object(self, link: Committed, key: str, start: int, end: int) -> Pieces:
        """Range-read an object of a committed link (through the read-ahead, if any).

        A missing object under a commit point that is gone too was expired (or, for a
        batch, compacted and collected) while we read: that is an offset out of range,
        not damage. A compressed object is decoded (:mod:`tieredstore.cold.compressed.framed`); the
        read-ahead caches its decoded frames.
        """
        span = link.commit_log if key == link.commit_log.key else link.consume_queue
        try:
            if self.readahead is None:
                return Pieces.of(await read_range(self.backend, key, start, end, span.framed))
            if span.framed is not None:
                return await self.readahead.read_framed(key, start, end, span.framed)
            return await self.readahead.read_pieces(key, start, end, span.object_size)
        except ObjectNotFoundError:
            if await self.backend.exists(link.key):
                raise
            raise OffsetOutOfRangeError(
                f"{link.describe()} expired while it was being read",
                where=link.key,
            ) from None

    async def _read_batch(self, manifest: Committed, offset: int, n: int) -> list[ColdMessage]:
        """Read ``n`` (or fewer, to stay within ``batch_bytes``) messages of one segment."""
        units = check_units(manifest, offset, await self.read_units(manifest, offset, n))
        sizes = units["size"].astype(np.int64)
        # Keep at least one record, however large: never a stall.
        k = max(int(np.searchsorted(np.cumsum(sizes), self.batch_bytes, side="right")), 1)
        units = units[:k]
        first = int(units["commitlog_offset"][0])
        end = int(units["commitlog_offset"][-1]) + int(units["size"][-1])
        rel = first - manifest.cl_base
        data = await self.read_commit_log(manifest, rel, rel + end - first)
        return decode_messages(manifest, offset, units, data, first)

    # -- offset by time ------------------------------------------------------------
    async def offset_by_time(
        self,
        topic: str,
        queue_id: int,
        timestamp_ms: int,
        boundary: BoundaryType = BoundaryType.LOWER,
    ) -> int:
        """The queue offset for ``timestamp_ms`` (see the module docstring's table).

        The answer lies in ``[cold min, cold commit]``; it equals cold commit only for
        ``LOWER`` when every message is older than the timestamp.

        Raises:
            OffsetOutOfRangeError: the queue has nothing in cold.
        """
        queue = self.queue_path(topic, queue_id)
        segs = await self._segments(queue)
        rng = await self._range(segs)
        if not rng.count:
            raise OffsetOutOfRangeError(
                f"{queue} has nothing in cold to search by time", where=queue.root
            )
        # Store times are integers, so the last offset <= T is one before the first > T.
        if boundary is BoundaryType.LOWER:
            return await self._first_at_or_after(segs, timestamp_ms, rng)
        return max(await self._first_at_or_after(segs, timestamp_ms + 1, rng) - 1, rng.min)

    async def _first_at_or_after(self, segs: Segments, ts: int, rng: ColdRange) -> int:
        """The first offset whose store time is >= ``ts``; cold commit if none is."""
        lo, hi = 0, len(segs)
        while lo < hi:  # first segment whose newest message is at or after ts
            mid = (lo + hi) // 2
            before = await _at_or_before(self._stored, segs, mid)  # markers: the segment before
            if before is None or before[1].max_store_timestamp < ts:
                lo = mid + 1
            else:
                hi = mid
        found = await _at_or_before(self._stored, segs, lo) if lo < len(segs) else None
        link = await self._link(segs.keys[found[0]]) if found is not None else None
        slice_ = None
        for s in segs.slices:
            if s.max_store_timestamp >= ts and not await self._overlapped(segs, s):
                slice_ = s
                break
        if slice_ is not None and (link is None or slice_.start_offset < link.start_offset):
            link = slice_
        if link is None:
            return rng.commit
        manifest = link
        if manifest.min_store_timestamp >= ts:
            return manifest.start_offset
        # The segment's last message is at or after ts, its first one before it.
        first, last = manifest.start_offset, manifest.end_offset - 1
        while first < last:
            mid = (first + last) // 2
            if await self._store_time(manifest, mid) < ts:
                first = mid + 1
            else:
                last = mid
        return first

    async def _store_time(self, manifest: Committed, offset: int) -> int:
        """The storeTimestamp of one record (one CQ unit and one header read)."""
        unit = check_units(manifest, offset, await self.read_units(manifest, offset, 1))
        rel = int(unit["commitlog_offset"][0]) - manifest.cl_base
        # Every record (MIN_RECORD_SIZE > HEAD_PROBE_SIZE) holds the whole head probed.
        head = await self.read_commit_log(manifest, rel, rel + HEAD_PROBE_SIZE)
        arr = np.frombuffer(head, dtype=np.uint8)
        return int(store_timestamps(arr, np.zeros(1, dtype=np.int64))[0])


# -- decoding a committed segment's records (pure, no I/O) --------------------------------


def check_units(link: Committed | Manifest, offset: int, units: Units) -> Units:
    """Check that ``units`` (queue offsets ``offset..``) point at contiguous records
    inside the segment's COMMIT_LOG; return them.

    Raises:
        CorruptUnitError: the first unit that does not, named by CQ key and byte offset.
    """
    manifest = as_link(link)
    cold = units["commitlog_offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    ends = cold + sizes
    bad = np.flatnonzero(
        (sizes < MIN_RECORD_SIZE)
        | (cold < manifest.cl_base)
        | (ends > manifest.cl_end)
        | np.concatenate(([False], cold[1:] != ends[:-1]))
    )
    if bad.size:
        i = int(bad[0])
        rel = manifest.consume_queue.at + (offset - manifest.start_offset + i) * CQ_UNIT_SIZE
        raise CorruptUnitError(
            f"unit of queue offset {offset + i} points at cold offset {int(cold[i])} size "
            f"{int(sizes[i])}, not at the next record inside cold commitlog "
            f"[{manifest.cl_base}, {manifest.cl_end})",
            where=f"{manifest.consume_queue_key}@{rel}",
        )
    return units


def decode_messages(
    link: Committed | Manifest,
    offset: int,
    units: Units,
    data: bytes,
    data_base: int,
    *,
    keep: npt.NDArray[np.bool_] | None = None,
) -> list[ColdMessage]:
    """Decode the messages of queue offsets ``[offset, offset + len(units))`` of a
    committed segment, every record checked against its unit.

    ``units`` are their CQ units, already checked (:func:`check_units`, or
    :func:`~tieredstore.cold.segment.verify_segment` for a whole segment); ``data`` is the
    COMMIT_LOG bytes from cold offset ``data_base`` on, holding every record the units
    point at. ``keep`` (one flag per unit) decodes only the flagged messages; the others
    are skipped unread.

    Raises:
        CorruptRecordError / TruncatedDataError: a record that does not decode or does
            not match its unit (totalSize, queueOffset, physicalOffset, queue id, topic),
            named by COMMIT_LOG key and byte offset.
    """
    manifest = as_link(link)
    rows = units.tolist()
    picked = range(len(rows)) if keep is None else np.flatnonzero(keep).tolist()
    # Derived (and validated) once per batch, not once per record.
    cl_key = manifest.commit_log_key
    out: list[ColdMessage] = []
    for i in picked:
        cold, size, tags_code = rows[i]
        pos = cold - data_base
        out.append(_decode(manifest, cl_key, data, offset + i, pos, cold, size, tags_code))
    return out


def _decode(
    manifest: Committed,
    cl_key: str,
    data: bytes,
    queue_offset: int,
    pos: int,
    cold: int,
    size: int,
    tags_code: int,
) -> ColdMessage:
    where = f"{cl_key}@{manifest.commit_log.at + cold - manifest.cl_base}"
    raw = data[pos : pos + size]
    try:
        record = decode_record(raw, where=cl_key)
    except (CorruptRecordError, TruncatedDataError) as exc:
        raise type(exc)(exc.message, where=where) from exc
    checks = (
        # decode_record consumed exactly totalSize bytes, so the field is the record's
        # size (cheaper than recomputing MessageRecord.total_size).
        ("totalSize", int.from_bytes(raw[:4], "big", signed=True), size),
        ("queueOffset", record.queue_offset, queue_offset),
        ("physicalOffset", record.physical_offset, cold),
        ("queueId", record.queue_id, manifest.queue_id),
    )
    for name, found, expected in checks:
        if found != expected:
            raise CorruptRecordError(
                f"record of queue offset {queue_offset}: {name} field {found}, expected {expected}",
                where=where,
            )
    if record.topic != manifest.topic:
        raise CorruptRecordError(
            f"record of queue offset {queue_offset} belongs to topic {record.topic!r}",
            where=where,
        )
    try:
        body = record.decompressed_body()
    except CorruptRecordError as exc:
        raise CorruptRecordError(exc.message, where=where) from exc
    return ColdMessage(queue_offset, cold, tags_code, record, body)
