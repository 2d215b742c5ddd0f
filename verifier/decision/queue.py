"""One queue's layout decided once, sans IO: ``gap`` and ``overlap`` over its covering links.

Both verifiers drive :func:`decide`: the single-broker job in a Spark task per group of
queues (:func:`tieredstore.verifier.checks.gap`, :func:`tieredstore.verifier.checks.overlap`, over
Arrow batches)
and the fleet job in its task per queue (:mod:`tieredstore.verifier.fleet.check`). Neither reads
storage here nor decides these classes anywhere else, so for the same links and the
same accepted-loss spans they report the same findings, word for word.

The input is :class:`QueueLinks`: the queue's **covering** links (segments and the batch
slices the reading rule chose) and the spans of its accepted losses. Links are taken in
``(start, end)`` order; the *reach* before a link is the furthest end of the links
before it:

* ``gap`` — a link starting above the reach leaves ``[reach, start)`` in no link, unless
  one accepted-loss span holds the whole hole;
* ``overlap`` — a link starting below the reach holds ``[start, min(end, reach))`` twice;
  reported on the later link.

To add a rule: write a function ``QueueLinks -> Iterable[QueueFinding]`` and add it to
:data:`RULES`; every driver then reports it (a driver that runs only some classes
filters by :attr:`QueueFinding.kind`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from tieredstore.findings import FindingKind

__all__ = ["RULES", "Link", "QueueFinding", "QueueLinks", "decide", "gaps", "overlaps"]


@dataclass(frozen=True, slots=True, order=True)
class Link:
    """A covering link: queue offsets ``[start, end)``, named by ``name`` (a segment's
    manifest key, a slice's ``<batch key>#<topic>/<queue id>``)."""

    start: int
    end: int
    name: str


@dataclass(frozen=True, slots=True)
class QueueLinks:
    """What the layout of one queue is decided from: its covering links (any order) and
    its accepted-loss spans ``(start, end)``, merged or not."""

    topic: str
    queue_id: int
    links: Sequence[Link]
    spans: Sequence[tuple[int, int]] = ()

    def ordered(self) -> list[Link]:
        return sorted(self.links)

    def excused(self, start: int, end: int) -> bool:
        """Whether one accepted-loss span holds all of ``[start, end)``."""
        return any(s <= start and e >= end for s, e in self.spans)


@dataclass(frozen=True, slots=True)
class QueueFinding:
    """One anomaly a decision found in a queue, before a job makes it a row of its anomaly
    table (:class:`tieredstore.verifier.outcome.Anomaly`, which adds the queue): its class, queue
    offsets ``[start, end)`` (None where unknown), object and the sentence a report shows."""

    kind: FindingKind
    start: int | None
    end: int | None
    object_key: str | None
    detail: str


def _with_reach(links: Sequence[Link]) -> Iterator[tuple[int, Link]]:
    """Each link after the first with the furthest end of the links before it."""
    reach: int | None = None
    for link in links:
        if reach is not None:
            yield reach, link
        reach = link.end if reach is None else max(reach, link.end)


def gaps(queue: QueueLinks) -> Iterator[QueueFinding]:
    """``gap``: offsets between the links in none of them, unless a span excuses them."""
    for reach, link in _with_reach(queue.ordered()):
        if link.start > reach and not queue.excused(reach, link.start):
            yield QueueFinding(
                FindingKind.GAP,
                reach,
                link.start,
                None,
                f"queue offsets [{reach}, {link.start}) are in no committed segment (the "
                f"next segment is {link.name})",
            )


def overlaps(queue: QueueLinks) -> Iterator[QueueFinding]:
    """``overlap``: offsets two links hold, reported on the later one."""
    for reach, link in _with_reach(queue.ordered()):
        if link.start < reach:
            yield QueueFinding(
                FindingKind.OVERLAP,
                link.start,
                min(link.end, reach),
                link.name,
                f"segment [{link.start}, {link.end}) starts below the end {reach} of an "
                "earlier segment",
            )


#: Every rule of the layout decision, in report order.
RULES: Final[tuple[Callable[[QueueLinks], Iterable[QueueFinding]], ...]] = (gaps, overlaps)


def decide(queue: QueueLinks, kinds: Iterable[FindingKind] | None = None) -> list[QueueFinding]:
    """Every finding of every rule for ``queue`` (``kinds``: only those classes)."""
    wanted = None if kinds is None else frozenset(kinds)
    return [f for rule in RULES for f in rule(queue) if wanted is None or f.kind in wanted]
