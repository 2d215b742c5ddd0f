"""What a restore writes: the committed cold segments of the selected queues, in order.

:func:`build_plan` lists one broker's cold prefix, keeps the manifests of the queues whose
topic matches the filter, reads them (bounded concurrency), checks that each queue's
segments are contiguous, and prunes them to the time window by the manifests' min/max
store times. Object keys come from the manifests only.

The window is applied to messages as well (:class:`TimeWindow`): a queue's restored range
starts at its first message stored at or after ``since`` and ends before its first
message stored after ``until``, so every restored queue is one contiguous run of queue
offsets (store times rise with queue offsets; if they ever go backwards inside a queue
the run still ends at the first later message).

**Accepted losses.** Offsets the broker deleted before they were tiered, accepted by
``resume --accept-loss`` (loss records, :mod:`tieredstore.cold.loss`), leave a hole no
segment covers, and a broker's consume queue cannot have one. A queue with loss records
is therefore restored from the first offset after its *last* accepted loss: the
segments before it are left out, and the plan says so (:class:`LossCut`, one line per
queue). A hole that no loss record explains still refuses the restore.

**Order** (:meth:`RestorePlan.merge_order`): segments of all queues are merged by their
oldest store time (ties by topic, queue id, offset), each queue's segments staying in
offset order. The restored commitlog is therefore in store-time order at the grain of a
segment, as a broker's commitlog is at the grain of a message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fnmatch
import heapq
import itertools
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

from tieredstore.backends.base import Backend
from tieredstore.cold.layout import (
    QueuePath,
    SegmentKind,
    broker_prefix,
    is_loss_key,
    parse_loss_key,
    parse_object_key,
)
from tieredstore.cold.loss import LossRecord, read_loss_record
from tieredstore.cold.manifest import FenceMarker, Manifest, read_stored
from tieredstore.errors import ColdDataError, InvalidNameError

__all__ = ["LossCut", "QueuePlan", "RestoreFilter", "RestorePlan", "TimeWindow", "build_plan"]

_READ_CONCURRENCY: Final = 32


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """Store times ``[since, until]`` (epoch ms, both inclusive); ``None`` = unbounded."""

    since: int | None = None
    until: int | None = None

    def __post_init__(self) -> None:
        if self.since is not None and self.until is not None and self.since > self.until:
            raise ValueError(f"time window since {self.since} is after until {self.until}")

    def overlaps(self, manifest: Manifest) -> bool:
        """Whether the segment may hold a message inside the window."""
        if self.since is not None and manifest.max_store_timestamp < self.since:
            return False
        return self.until is None or manifest.min_store_timestamp <= self.until


@dataclass(frozen=True, slots=True)
class RestoreFilter:
    """Which queues and which store times a restore selects.

    ``topics`` are shell globs (``fnmatch``, case-sensitive); empty selects every topic.
    """

    topics: tuple[str, ...] = ()
    window: TimeWindow = field(default_factory=TimeWindow)

    def accepts(self, topic: str) -> bool:
        return not self.topics or any(fnmatch.fnmatchcase(topic, g) for g in self.topics)


@dataclass(frozen=True, slots=True)
class QueuePlan:
    """One queue's segments to restore: contiguous, in offset order, never empty."""

    queue: QueuePath
    segments: tuple[Manifest, ...]

    @property
    def start(self) -> int:
        return self.segments[0].start_offset

    @property
    def end(self) -> int:
        return self.segments[-1].end_offset


@dataclass(frozen=True, slots=True)
class LossCut:
    """A queue restored only after its last accepted loss (see the module docstring)."""

    queue: QueuePath
    loss: LossRecord  # the queue's last accepted loss
    left_out: int  # tiered messages before it, not restored
    restored: bool  # False: nothing after the loss is tiered, the queue is left out

    def describe(self) -> str:
        """One line for the operator (restore and ``restore --check`` print it)."""
        lost = f"[{self.loss.start_offset}, {self.loss.end_offset})"
        head = (
            f"{self.queue.topic}/{self.queue.queue_id}: restored from offset {self.loss.end_offset}"
            if self.restored
            else f"{self.queue.topic}/{self.queue.queue_id}: not restored (nothing tiered "
            f"after offset {self.loss.end_offset})"
        )
        return (
            f"{head}, after its accepted loss of offsets {lost} (resume --accept-loss); "
            f"{self.left_out} tiered messages before it left out"
        )


@dataclass(frozen=True, slots=True)
class RestorePlan:
    """The selected queues (sorted by topic, queue id), their segments, and the queues
    an accepted loss cut (sorted likewise)."""

    queues: tuple[QueuePlan, ...]
    cuts: tuple[LossCut, ...] = ()

    @property
    def segments(self) -> int:
        return sum(len(q.segments) for q in self.queues)

    @property
    def messages(self) -> int:
        return sum(m.message_count for q in self.queues for m in q.segments)

    @property
    def bytes(self) -> int:
        return sum(m.commit_log.size for q in self.queues for m in q.segments)

    def merge_order(self) -> Iterator[Manifest]:
        """Every segment once: merged by oldest store time, each queue in offset order."""

        def keyed(q: QueuePlan) -> Iterator[tuple[int, str, int, int, Manifest]]:
            for m in q.segments:
                yield (m.min_store_timestamp, m.topic, m.queue_id, m.start_offset, m)

        for *_, manifest in heapq.merge(*(keyed(q) for q in self.queues)):
            yield manifest


@dataclass(slots=True)
class _Listing:
    """One broker prefix's manifest and loss-record keys per queue, in offset order."""

    manifests: dict[QueuePath, list[str]] = field(default_factory=dict)
    losses: dict[QueuePath, list[str]] = field(default_factory=dict)


async def _list_keys(backend: Backend, cluster: str, broker: str, filt: RestoreFilter) -> _Listing:
    prefix = broker_prefix(cluster, broker) + "/"
    manifests: dict[QueuePath, list[tuple[int, str]]] = defaultdict(list)
    losses: dict[QueuePath, list[tuple[int, str]]] = defaultdict(list)
    for info in await backend.list(prefix):
        if info.key[len(prefix) :].startswith("_"):
            continue  # tieredstore's own: lease, quarantine, config copies
        try:
            if is_loss_key(info.key):
                loss = parse_loss_key(info.key)
                if filt.accepts(loss.queue.topic):
                    losses[loss.queue].append((loss.start_offset, info.key))
                continue
            key = parse_object_key(info.key)
        except InvalidNameError:
            continue  # not a segment object; the verifier reports such strays
        if key.kind is SegmentKind.MANIFEST and filt.accepts(key.topic):
            manifests[key.queue].append((key.base_offset, info.key))

    def ordered(found: dict[QueuePath, list[tuple[int, str]]]) -> dict[QueuePath, list[str]]:
        return {q: [k for _, k in sorted(keys)] for q, keys in found.items()}

    return _Listing(ordered(manifests), ordered(losses))


async def _read_all(backend: Backend, keys: Sequence[str]) -> list[Manifest]:
    """The committed segments among ``keys`` (GC fence markers are no segment)."""
    sem = asyncio.Semaphore(_READ_CONCURRENCY)

    async def one(key: str) -> Manifest | FenceMarker:
        async with sem:
            return read_stored(await backend.read(key), key)

    stored = await asyncio.gather(*(one(k) for k in keys))
    return [m for m in stored if isinstance(m, Manifest)]


async def _last_losses(backend: Backend, listing: _Listing) -> dict[QueuePath, LossRecord]:
    """Each queue's accepted loss that ends last (CorruptLossRecordError if one does not
    parse: an unreadable record acknowledges nothing)."""
    out: dict[QueuePath, LossRecord] = {}
    for queue, keys in listing.losses.items():
        records = [read_loss_record(await backend.read(k), k) for k in keys]
        out[queue] = max(records, key=lambda r: r.end_offset)
    return out


def _cut(
    queue: QueuePath, manifests: Sequence[Manifest], loss: LossRecord | None
) -> tuple[Sequence[Manifest], LossCut | None]:
    """The segments after ``loss`` (all of them without one), and the cut to report."""
    if loss is None:
        return manifests, None
    kept = [m for m in manifests if m.start_offset >= loss.end_offset]
    left_out = sum(m.message_count for m in manifests if m.start_offset < loss.end_offset)
    return kept, LossCut(queue, loss, left_out, restored=bool(kept))


def _contiguous(queue: QueuePath, manifests: Sequence[Manifest]) -> None:
    for a, b in itertools.pairwise(manifests):
        if a.end_offset != b.start_offset:
            raise ColdDataError(
                f"queue {queue} has no committed segment for offsets "
                f"[{a.end_offset}, {b.start_offset}): a restore needs one contiguous run "
                "(exclude the topic, or restore a window after the gap with --since)",
                where=b.key,
            )


def _prune(manifests: Sequence[Manifest], window: TimeWindow) -> tuple[Manifest, ...]:
    """The contiguous run from the first to the last segment overlapping the window."""
    hits = [i for i, m in enumerate(manifests) if window.overlaps(m)]
    return tuple(manifests[hits[0] : hits[-1] + 1]) if hits else ()


async def build_plan(
    backend: Backend, cluster: str, broker: str, filt: RestoreFilter
) -> RestorePlan:
    """List, read and check the manifests a restore needs (see the module docstring).

    Raises:
        ColdDataError: a selected queue has a hole between committed segments (inside
            the window) that no accepted loss explains; CorruptManifestError for a
            manifest that does not validate, CorruptLossRecordError for a loss record.
    """
    listing = await _list_keys(backend, cluster, broker, filt)
    listed = listing.manifests
    manifests = await _read_all(backend, [k for q in sorted(listed) for k in listed[q]])
    losses = await _last_losses(backend, listing)
    by_queue: dict[QueuePath, list[Manifest]] = defaultdict(list)
    for m in manifests:  # fence markers are gone: group by what each manifest says
        by_queue[m.queue].append(m)
    queues: list[QueuePlan] = []
    cuts: list[LossCut] = []
    for queue in sorted(listed):
        after, cut = _cut(queue, by_queue[queue], losses.get(queue))
        kept = _prune(after, filt.window)
        _contiguous(queue, kept)
        if kept:
            queues.append(QueuePlan(queue, kept))
        if cut is not None and (kept or not cut.restored):
            cuts.append(cut if kept else dataclasses.replace(cut, restored=False))
    return RestorePlan(tuple(queues), tuple(cuts))
