"""A queue's committed history: the one rule by which every reader finds cold data.

A queue's history is a sequence of :class:`Committed` links, each holding queue offsets
``[start, end)`` with their COMMIT_LOG records and CONSUME_QUEUE units at a byte range
(:class:`Span`) of some object. A link comes from one of two commit points:

* a **segment** (:class:`EntryKind.SEGMENT`): a MANIFEST under the queue's own prefix
  names two objects of its own (spans start at byte 0 and cover the whole object);
* a **batch slice** (:class:`EntryKind.SLICE`): one queue's part of a per-broker batch
  object (``_batches/``, :mod:`tieredstore.cold.batch`); both spans lie inside that one
  object, and the batch's index is the commit point of all its slices.

**The rule** (:func:`choose`, used by every reader): withdrawn slices are no link (a
batch fence's :class:`~tieredstore.cold.batch.Withdrawn`, written by ``repair`` and the
heal of a lost tail, withdraws a queue's slices of lower sequences from an offset on:
:class:`Withdrawal`); then segments win. An offset that a
segment holds is read from that segment; an offset no segment holds is read from the
slice that holds it, the slice of the lowest batch sequence first (a later slice over the
same offsets is a duplicate, never a second truth: see :attr:`QueueHistory.overlaps`).
Compaction rewrites whole slices as a segment with the same boundaries, so during the
window in which both exist the segment is read and the slices are garbage. A fence
marker (at a manifest or a batch key) is no link.

The readers: :class:`~tieredstore.cold.reader.ColdReader` (``read``, the read service, the
broker plugin through it), restore, export, the Spark verifier and data source,
``rebuild-metadata``, retention, ``repair``, ``resume`` and the fleet's comparison.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from tieredstore.cold.batch import (
    BatchFence,
    BatchHead,
    BatchSlice,
    QueueOffsets,
    Withdrawn,
    commit_log_span,
    consume_queue_span,
    head_reads,
)
from tieredstore.cold.compressed.framed import Framed, read_range, read_whole
from tieredstore.cold.digests import DigestAlgorithm
from tieredstore.cold.layout import (
    ObjectKey,
    QueuePath,
    SegmentKind,
    batch_prefix,
    broker_prefix,
    classify_listed,
    parse_batch_key,
)
from tieredstore.cold.manifest import FenceMarker, Manifest, read_stored
from tieredstore.errors import ObjectNotFoundError

if TYPE_CHECKING:
    from tieredstore.backends.base import Backend

__all__ = [
    "BatchLinks",
    "BrokerHistory",
    "Committed",
    "EntryKind",
    "QueueHistory",
    "Span",
    "Withdrawal",
    "as_link",
    "batch_links",
    "choose",
    "load_history",
    "read_batch",
    "read_span",
    "slices_of",
    "span_bytes",
]

#: Commit points read at once while a broker's history is loaded.
_READ_CONCURRENCY: Final = 32


class EntryKind(enum.Enum):
    """Which commit point a link of a queue's history comes from."""

    SEGMENT = "segment"
    SLICE = "slice"


@dataclass(frozen=True, slots=True)
class Span:
    """Bytes ``[at, at + size)`` of object ``key`` (``object_size`` bytes in all), whose
    digest is ``digest``. All in uncompressed coordinates: ``framed`` says the object is
    stored compressed (:mod:`tieredstore.cold.compressed.framed`; None: plain), which only
    :func:`read_span` and :func:`span_bytes` need to know (a compressed batch's slice:
    ``object_size`` is the batch's header and decoded data section, and its frames begin
    at ``framed.at``)."""

    key: str
    at: int
    size: int
    digest: str
    object_size: int
    framed: Framed | None = None

    @property
    def end(self) -> int:
        return self.at + self.size

    @property
    def stored_size(self) -> int:
        """The object's size as stored and listed (``object_size`` for a plain one)."""
        return self.object_size if self.framed is None else self.framed.stored_size

    @property
    def whole(self) -> bool:
        """Whether the span is its whole object (a segment's: read and named as one)."""
        return self.at == 0 and self.size == self.object_size


class OfQueue:
    """``topic`` and ``queue_id`` of the frozen dataclasses that declare ``queue`` (a
    link, a withdrawal): a mixin."""

    __slots__ = ()
    queue: QueuePath

    @property
    def topic(self) -> str:
        return self.queue.topic

    @property
    def queue_id(self) -> int:
        return self.queue.queue_id


@dataclass(frozen=True, slots=True)
class Committed(QueueOffsets, OfQueue):
    """One link of a queue's committed history, wherever it lives.

    It answers what readers used to ask a :class:`Manifest`: the offsets and cold
    commitlog range it covers, the store-time bounds, who wrote it, and where its
    COMMIT_LOG (``commit_log``) and CONSUME_QUEUE (``consume_queue``) bytes are.
    ``key`` is its commit point: the manifest key of a segment, the batch key of a slice;
    ``manifest`` is the segment's manifest (None for a slice).
    """

    kind: EntryKind
    queue: QueuePath
    start_offset: int
    end_offset: int
    cl_base: int
    cl_end: int
    commit_log: Span
    consume_queue: Span
    digest_algorithm: str
    min_store_timestamp: int
    max_store_timestamp: int
    writer_id: str
    lease_epoch: int
    created_at_ms: int
    key: str
    sequence: int = -1  # the batch's sequence (slices); -1 for a segment
    manifest: Manifest | None = None

    @classmethod
    def of_manifest(cls, m: Manifest) -> Committed:
        """The link a segment's manifest commits (spans: the two whole objects)."""
        cl, cq = m.commit_log, m.consume_queue
        return cls(
            kind=EntryKind.SEGMENT,
            queue=m.queue,
            start_offset=m.start_offset,
            end_offset=m.end_offset,
            cl_base=m.cl_base,
            cl_end=m.cl_end,
            commit_log=Span(m.commit_log_key, 0, cl.size, cl.digest, cl.size, cl.framed),
            consume_queue=Span(m.consume_queue_key, 0, cq.size, cq.digest, cq.size),
            digest_algorithm=m.digest_algorithm,
            min_store_timestamp=m.min_store_timestamp,
            max_store_timestamp=m.max_store_timestamp,
            writer_id=m.writer_id,
            lease_epoch=m.lease_epoch,
            created_at_ms=m.created_at_ms,
            key=m.key,
            manifest=m,
        )

    @classmethod
    def of_slice(cls, head: BatchHead, part: BatchSlice) -> Committed:
        """The link a batch commits for one queue (spans: ranges of the batch object)."""
        index, key, size, framed = head.index, head.index.key, head.size, head.framed
        cl_at, cl_end = commit_log_span(head, part)
        cq_at, cq_end = consume_queue_span(head, part)
        return cls(
            kind=EntryKind.SLICE,
            queue=index.queue(part),
            start_offset=part.start_offset,
            end_offset=part.end_offset,
            cl_base=part.cl_base,
            cl_end=part.cl_end,
            commit_log=Span(key, cl_at, cl_end - cl_at, part.commit_log_digest, size, framed),
            consume_queue=Span(key, cq_at, cq_end - cq_at, part.consume_queue_digest, size, framed),
            digest_algorithm=index.digest_algorithm,
            min_store_timestamp=part.min_store_timestamp,
            max_store_timestamp=part.max_store_timestamp,
            writer_id=index.writer_id,
            lease_epoch=index.lease_epoch,
            created_at_ms=index.created_at_ms,
            key=key,
            sequence=index.sequence,
        )

    # What readers used to take from a manifest, by the same names.
    @property
    def commit_log_key(self) -> str:
        return self.commit_log.key

    @property
    def consume_queue_key(self) -> str:
        return self.consume_queue.key

    @property
    def algorithm(self) -> DigestAlgorithm:
        return DigestAlgorithm(self.digest_algorithm)

    @property
    def history_key(self) -> str:
        """This link's name among every link of its broker, for readers that keep a
        record per link (export): a segment's manifest key (unchanged from the days of
        segments alone); ``<batch key>#<topic>/<queue id>`` for a slice, whose batch key
        is shared by the slices of many queues."""
        if self.kind is EntryKind.SEGMENT:
            return self.key
        return f"{self.key}#{self.topic}/{self.queue_id}"

    def describe(self) -> str:
        where = "segment" if self.kind is EntryKind.SEGMENT else f"slice of batch {self.sequence}"
        return f"{where} [{self.start_offset}, {self.end_offset}) of {self.queue}"


@dataclass(frozen=True, slots=True)
class Withdrawal(OfQueue):
    """One queue's :class:`~tieredstore.cold.batch.Withdrawn` entry in the batch fence at
    ``key`` (sequence ``sequence``): the queue's slices of lower sequences that hold any
    offset at or after ``from_offset`` are no link."""

    queue: QueuePath
    from_offset: int
    sequence: int
    key: str

    def withdraws(self, link: Committed) -> bool:
        """Whether ``link`` is withdrawn by this: a slice of the same topic and queue id,
        of a lower sequence, holding an offset at or after :attr:`from_offset`."""
        return (
            link.kind is EntryKind.SLICE
            and (link.topic, link.queue_id) == (self.topic, self.queue_id)
            and link.sequence < self.sequence
            and link.end_offset > self.from_offset
        )


@dataclass(frozen=True, slots=True)
class QueueHistory:
    """One queue's committed history as :func:`choose` reads it.

    ``links``: the chosen links in offset order (gaps between them are possible: offsets
    accepted as lost, or damage); ``overlaps``: links not chosen because an earlier one
    already holds some of their offsets (a compacted slice, a stale writer's duplicate);
    ``withdrawn``: slices a later batch fence withdrew (:class:`Withdrawal`).
    """

    links: tuple[Committed, ...]
    overlaps: tuple[Committed, ...] = ()
    withdrawn: tuple[Committed, ...] = ()

    @property
    def min(self) -> int:
        return self.links[0].start_offset if self.links else 0

    @property
    def commit(self) -> int:
        return self.links[-1].end_offset if self.links else 0


def choose(segments: Sequence[Committed], slices: Sequence[Committed | Withdrawal]) -> QueueHistory:
    """The one reading rule (see the module docstring) over one queue's links.

    ``segments`` in any order; ``slices`` in any order (ties broken by batch sequence),
    with the queue's withdrawals among them (:func:`batch_links`). A withdrawn slice is
    no link. A segment is never dropped for a slice; a slice is chosen only over offsets
    that no chosen link holds yet, and only whole (a slice that holds some chosen offsets
    is an overlap).
    """
    withdrawals = [w for w in slices if isinstance(w, Withdrawal)]
    withdrawn: list[Committed] = []
    live: list[Committed] = []
    for s in slices:
        if isinstance(s, Committed):
            (withdrawn if any(w.withdraws(s) for w in withdrawals) else live).append(s)
    chosen = sorted(segments, key=lambda c: c.start_offset)
    overlaps: list[Committed] = []
    kept: list[Committed] = []
    for s in chosen:  # segments never overlap one another; a stray one is an overlap
        if kept and s.start_offset < kept[-1].end_offset:
            overlaps.append(s)
        else:
            kept.append(s)
    taken = [(c.start_offset, c.end_offset) for c in kept]
    for s in sorted(live, key=lambda c: (c.sequence, c.start_offset)):
        if any(s.start_offset < end and start < s.end_offset for start, end in taken):
            overlaps.append(s)
            continue
        taken.append((s.start_offset, s.end_offset))
        kept.append(s)
    kept.sort(key=lambda c: c.start_offset)
    return QueueHistory(tuple(kept), tuple(overlaps), tuple(withdrawn))


def as_link(x: Committed | Manifest) -> Committed:
    """``x`` as a link (a segment's manifest becomes its link)."""
    return x if isinstance(x, Committed) else Committed.of_manifest(x)


async def read_span(backend: Backend, span: Span, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` relative to ``span`` (refused outside it), decoded.

    Raises:
        CorruptFrameError: a compressed object that does not decode.
    """
    if not 0 <= start <= end <= span.size:
        raise ValueError(f"[{start}, {end}) is outside the span of {span.size} bytes")
    return await read_range(backend, span.key, span.at + start, span.at + end, span.framed)


async def span_bytes(backend: Backend, span: Span) -> bytes:
    """All the bytes of ``span``. A whole object (a segment's) is read whole, so one longer
    or shorter than its commit point says keeps its size and a size check sees it; a span
    inside a larger object (a slice's) is a range read of exactly its bytes. Decoded, for a
    compressed object (a cut one is a :class:`~tieredstore.errors.CorruptFrameError`)."""
    if span.whole:
        return await read_whole(backend, span.key, span.framed)
    return await read_range(backend, span.key, span.at, span.end, span.framed)


@dataclass(slots=True)
class BrokerHistory:
    """Every queue's committed history under one broker prefix (:func:`load_history`)."""

    queues: dict[QueuePath, QueueHistory] = field(default_factory=dict)

    def links(self) -> list[Committed]:
        """Every chosen link, queue by queue in name order, each in offset order."""
        ordered = sorted(self.queues.items(), key=lambda kv: (kv[0].topic, kv[0].queue_id))
        return [link for _, h in ordered for link in h.links]


async def load_history(
    backend: Backend,
    cluster: str,
    broker: str,
    *,
    wants_topic: Callable[[str], bool] = lambda _topic: True,
) -> BrokerHistory:
    """The committed history of every queue of ``broker`` whose topic is wanted: one
    listing of the broker prefix, then every commit point read (``_READ_CONCURRENCY`` at
    once) and :func:`choose` applied per queue. Fence markers are no link.

    Raises:
        CorruptManifestError / UnsupportedFormatError: a commit point that does not
            parse (a reader of the whole history cannot step over it).
    """
    prefix = broker_prefix(cluster, broker) + "/"
    batches = batch_prefix(cluster, broker) + "/"
    keys: list[str] = []
    batch_objects: list[tuple[str, int]] = []
    for info in await backend.list(prefix):
        listed = classify_listed(info.key, prefix)
        if (
            isinstance(listed, ObjectKey)
            and listed.kind is SegmentKind.MANIFEST
            and wants_topic(listed.topic)
        ):
            keys.append(info.key)
        elif parse_batch_key(info.key, batches) is not None:
            batch_objects.append((info.key, info.size))
    sem = asyncio.Semaphore(_READ_CONCURRENCY)

    async def one(key: str) -> Manifest | FenceMarker:
        async with sem:
            return read_stored(await backend.read(key), key)

    async def head(key: str, size: int) -> BatchHead | BatchFence | None:
        async with sem:
            return await read_batch(backend, key, size)

    segments: dict[QueuePath, list[Committed]] = {}
    for stored in await asyncio.gather(*(one(k) for k in keys)):
        if isinstance(stored, Manifest):
            segments.setdefault(stored.queue, []).append(Committed.of_manifest(stored))
    slices: dict[QueuePath, list[Committed | Withdrawal]] = {}
    for found in await asyncio.gather(*(head(k, n) for k, n in batch_objects)):
        for link in batch_links(found):
            if wants_topic(link.topic):
                slices.setdefault(link.queue, []).append(link)
    return BrokerHistory(
        {q: choose(segments.get(q, []), slices.get(q, [])) for q in {*segments, *slices}}
    )


class BatchLinks:
    """A broker's batch links (slices and withdrawals) by queue, kept between calls:
    each :meth:`by_queue` lists ``_batches/`` once and reads only the heads it has not
    read yet (a batch never changes); a batch no longer listed is forgotten. Loop-safe,
    not thread-safe."""

    def __init__(self, backend: Backend, cluster: str, broker: str) -> None:
        self.backend = backend
        self.prefix = batch_prefix(cluster, broker) + "/"
        self._heads: dict[str, BatchHead | BatchFence | None] = {}
        self._listed: frozenset[str] = frozenset()
        self._by_queue: dict[QueuePath, list[Committed | Withdrawal]] = {}

    async def by_queue(self) -> dict[QueuePath, list[Committed | Withdrawal]]:
        """Every queue's batch links as listed now (pass a queue's to :func:`choose`).

        Raises:
            CorruptBatchError / UnsupportedFormatError: a batch head that does not parse.
        """
        listed = {
            info.key: info.size
            for info in await self.backend.list(self.prefix)
            if parse_batch_key(info.key, self.prefix) is not None
        }
        if listed.keys() != self._listed:
            new = [k for k in listed if k not in self._heads]
            heads = await asyncio.gather(*(read_batch(self.backend, k, listed[k]) for k in new))
            kept = {k: h for k, h in self._heads.items() if k in listed}
            self._heads = kept | dict(zip(new, heads, strict=True))
            self._listed = frozenset(listed)
            by_queue: dict[QueuePath, list[Committed | Withdrawal]] = {}
            for head in self._heads.values():
                for link in batch_links(head):
                    by_queue.setdefault(link.queue, []).append(link)
            self._by_queue = by_queue
        return self._by_queue


async def read_batch(backend: Backend, key: str, size: int) -> BatchHead | BatchFence | None:
    """The head of the batch object at ``key`` (``size`` bytes, as listed), read as
    :func:`~tieredstore.cold.batch.head_reads` says (one read, two when its index is
    longer than :data:`~tieredstore.cold.batch.HEAD_PROBE`); None if it vanished since the
    listing (collected after compaction).

    Raises:
        CorruptBatchError / UnsupportedFormatError: as
            :func:`~tieredstore.cold.batch.head_reads`.
    """
    reads = head_reads(key, size)
    try:
        want = next(reads)
        while True:
            want = reads.send(await backend.read_exact(key, 0, want))
    except StopIteration as parsed:
        return parsed.value  # type: ignore[no-any-return]
    except ObjectNotFoundError:
        return None


def slices_of(found: BatchHead | BatchFence | None) -> list[Committed]:
    """The links a batch commits (none for a fence or a vanished batch)."""
    if not isinstance(found, BatchHead):
        return []
    return [Committed.of_slice(found, part) for part in found.index.slices]


def batch_links(found: BatchHead | BatchFence | None) -> list[Committed | Withdrawal]:
    """What a batch key holds for :func:`choose`: a batch's slices, or a fence's
    withdrawals (a plain fence or a vanished batch: nothing)."""
    if isinstance(found, BatchFence):
        return [_withdrawal(found, w) for w in found.withdrawn]
    return list(slices_of(found))


def _withdrawal(fence: BatchFence, w: Withdrawn) -> Withdrawal:
    queue = QueuePath(fence.cluster, fence.broker, w.topic, w.queue_id)
    return Withdrawal(queue, w.from_offset, fence.sequence, fence.key)
