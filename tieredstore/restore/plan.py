"""What a restore writes: the committed links of the selected queues' history, in order.

:func:`build_plan` takes the committed history of the queues whose topic matches the
filter (:func:`~tieredstore.cold.history.load_history`: every commit point read, one
reading rule, so a queue's links are segments or batch slices), checks that each queue's
links are contiguous, and prunes them to the time window by the links' min/max store
times. Object keys and byte ranges come from the commit points only. Two committed
segments over one offset (a damaged history) are refused like a hole; a slice the
reading rule set aside (compacted, waiting for collection) is simply not restored.

The window is applied to messages as well (:class:`TimeWindow`): a queue's restored range
starts at its first message stored at or after ``since`` and ends before its first
message stored after ``until``, so every restored queue is one contiguous run of queue
offsets (store times rise with queue offsets; if they ever go backwards inside a queue
the run still ends at the first later message).

**Accepted losses.** Offsets the broker deleted before they were tiered, accepted by
``resume --accept-loss`` (loss records, :mod:`tieredstore.cold.loss`), leave a hole no
link covers, and a broker's consume queue cannot have one. A queue with loss records
is therefore restored from the first offset after its *last* accepted loss: the
links before it are left out, and the plan says so (:class:`LossCut`, one line per
queue). A hole that no loss record explains still refuses the restore.

**Order** (:meth:`RestorePlan.merge_order`): links of all queues are merged by their
oldest store time (ties by topic, queue id, offset), each queue's links staying in
offset order. The restored commitlog is therefore in store-time order at the grain of a
link, as a broker's commitlog is at the grain of a message.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import heapq
import itertools
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from tieredstore.backends.base import Backend
from tieredstore.cold.history import Committed, EntryKind, QueueHistory, load_history
from tieredstore.cold.layout import (
    QueuePath,
    SegmentKind,
    broker_prefix,
    is_loss_key,
    parse_loss_key,
    parse_object_key,
)
from tieredstore.cold.loss import LossRecord, read_loss_record
from tieredstore.errors import ColdDataError, InvalidNameError

__all__ = ["LossCut", "QueuePlan", "RestoreFilter", "RestorePlan", "TimeWindow", "build_plan"]


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """Store times ``[since, until]`` (epoch ms, both inclusive); ``None`` = unbounded."""

    since: int | None = None
    until: int | None = None

    def __post_init__(self) -> None:
        if self.since is not None and self.until is not None and self.since > self.until:
            raise ValueError(f"time window since {self.since} is after until {self.until}")

    def overlaps(self, link: Committed) -> bool:
        """Whether the link may hold a message inside the window."""
        if self.since is not None and link.max_store_timestamp < self.since:
            return False
        return self.until is None or link.min_store_timestamp <= self.until


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
    """One queue's links to restore: contiguous, in offset order, never empty."""

    queue: QueuePath
    links: tuple[Committed, ...]

    @property
    def start(self) -> int:
        return self.links[0].start_offset

    @property
    def end(self) -> int:
        return self.links[-1].end_offset


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
    """The selected queues (sorted by topic, queue id), their links, and the queues
    an accepted loss cut (sorted likewise)."""

    queues: tuple[QueuePlan, ...]
    cuts: tuple[LossCut, ...] = ()

    @property
    def segments(self) -> int:
        """Links to restore (the progress counts them as segments)."""
        return sum(len(q.links) for q in self.queues)

    @property
    def messages(self) -> int:
        return sum(m.message_count for q in self.queues for m in q.links)

    @property
    def bytes(self) -> int:
        return sum(m.commit_log.size for q in self.queues for m in q.links)

    def merge_order(self) -> Iterator[Committed]:
        """Every link once: merged by oldest store time, each queue in offset order."""

        def keyed(q: QueuePlan) -> Iterator[tuple[int, str, int, int, Committed]]:
            for m in q.links:
                yield (m.min_store_timestamp, m.topic, m.queue_id, m.start_offset, m)

        for *_, link in heapq.merge(*(keyed(q) for q in self.queues)):
            yield link


@dataclass(slots=True)
class _Listing:
    """One broker prefix's loss-record keys per queue (in offset order), and the queues
    with a manifest key (a fence marker's too: such a queue still gets its loss line)."""

    manifests: set[QueuePath] = field(default_factory=set)
    losses: dict[QueuePath, list[str]] = field(default_factory=dict)


async def _list_keys(backend: Backend, cluster: str, broker: str, filt: RestoreFilter) -> _Listing:
    prefix = broker_prefix(cluster, broker) + "/"
    manifests: set[QueuePath] = set()
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
            manifests.add(key.queue)
    return _Listing(manifests, {q: [k for _, k in sorted(keys)] for q, keys in losses.items()})


async def _last_losses(backend: Backend, listing: _Listing) -> dict[QueuePath, LossRecord]:
    """Each queue's accepted loss that ends last (CorruptLossRecordError if one does not
    parse: an unreadable record acknowledges nothing)."""
    out: dict[QueuePath, LossRecord] = {}
    for queue, keys in listing.losses.items():
        records = [read_loss_record(await backend.read(k), k) for k in keys]
        out[queue] = max(records, key=lambda r: r.end_offset)
    return out


def _cut(
    queue: QueuePath, links: Sequence[Committed], loss: LossRecord | None
) -> tuple[Sequence[Committed], LossCut | None]:
    """The links after ``loss`` (all of them without one), and the cut to report."""
    if loss is None:
        return links, None
    kept = [m for m in links if m.start_offset >= loss.end_offset]
    left_out = sum(m.message_count for m in links if m.start_offset < loss.end_offset)
    return kept, LossCut(queue, loss, left_out, restored=bool(kept))


def _queue_links(history: QueueHistory | None) -> list[Committed]:
    """A queue's chosen links and the *segments* :func:`choose` set aside, in offset
    order: two committed segments over one offset are a damaged history that
    :func:`_contiguous` refuses (inside the window), as before links. A slice set aside
    is normal (compacted, waiting for collection) and is left out."""
    if history is None:
        return []
    stray = [o for o in history.overlaps if o.kind is EntryKind.SEGMENT]
    return sorted([*history.links, *stray], key=lambda c: c.start_offset)


def _contiguous(queue: QueuePath, links: Sequence[Committed]) -> None:
    for a, b in itertools.pairwise(links):
        if b.start_offset < a.end_offset:
            raise ColdDataError(
                f"queue {queue} has committed segments [{a.start_offset}, {a.end_offset}) "
                f"and [{b.start_offset}, {b.end_offset}) over the same offsets: a restore "
                "needs one version of each offset (exclude the topic, or restore a window "
                "after them with --since)",
                where=b.key,
            )
        if a.end_offset != b.start_offset:
            raise ColdDataError(
                f"queue {queue} has no committed segment for offsets "
                f"[{a.end_offset}, {b.start_offset}): a restore needs one contiguous run "
                "(exclude the topic, or restore a window after the gap with --since)",
                where=b.key,
            )


def _prune(links: Sequence[Committed], window: TimeWindow) -> tuple[Committed, ...]:
    """The contiguous run from the first to the last link overlapping the window."""
    hits = [i for i, m in enumerate(links) if window.overlaps(m)]
    return tuple(links[hits[0] : hits[-1] + 1]) if hits else ()


async def build_plan(
    backend: Backend, cluster: str, broker: str, filt: RestoreFilter
) -> RestorePlan:
    """Read the committed history and check the links a restore needs (see the module
    docstring).

    Raises:
        ColdDataError: a selected queue has a hole between committed links (inside
            the window) that no accepted loss explains; CorruptManifestError for a
            commit point that does not validate, CorruptLossRecordError for a loss record.
    """
    history = await load_history(backend, cluster, broker, wants_topic=filt.accepts)
    listing = await _list_keys(backend, cluster, broker, filt)
    losses = await _last_losses(backend, listing)
    queues: list[QueuePlan] = []
    cuts: list[LossCut] = []
    for queue in sorted(listing.manifests | set(history.queues)):
        after, cut = _cut(queue, _queue_links(history.queues.get(queue)), losses.get(queue))
        kept = _prune(after, filt.window)
        _contiguous(queue, kept)
        if kept:
            queues.append(QueuePlan(queue, kept))
        if cut is not None and (kept or not cut.restored):
            cuts.append(cut if kept else dataclasses.replace(cut, restored=False))
    return RestorePlan(tuple(queues), tuple(cuts))
