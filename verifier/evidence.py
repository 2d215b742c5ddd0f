"""Records checked against what hot proves: pure decisions over plain values.

The cold store's provenance and loss records say what it must hold
(:mod:`tieredstore.provenance`, :mod:`tieredstore.loss`); a record can lie, or be
forged, so before it explains anything it is checked against what the hot store proves.
Everything here is a pure function over small values — each queue's hot range and the
offsets where messages stored since each tiering-record entry begin (:class:`HotFacts`),
the records, the cold max — so that any source of hot facts (the hot files, a
fingerprint) can apply the same decisions.

* **A loss record over offsets hot still holds** is impossible: it claims the broker
  deleted ``[start, end)`` before they were tiered, and the broker only ever deletes
  from the head (hot min never goes down). ``impossible_loss_record`` (CORRUPT), and
  the record explains nothing.
* **A retention record past what cold committed** is impossible while the broker still
  has the queue: retention removes only committed segments and never the newest of a
  live queue, so a segment ending beyond its first offset must remain (first offset ≥
  cold max, or no segment at all), and it can never pass the hot max.
  ``impossible_retention_record`` (CORRUPT), and the record explains nothing.
* **An init record hot contradicts** explains nothing (the queue is ``unproven_start``,
  its start then decided by message time, below): an ``earliest`` one above the hot min
  (it was the hot min when written, and hot min never goes down), or any one above the
  hot max.
* **When the rules tiered a topic** (:func:`tiered_start`, :func:`tiered_end`): the
  tiering record's history is applied per message time. Messages stored while an entry
  tiered the topic are required whatever the current rules say; a topic excluded now
  after being tiered owes its history up to its queue's stop record (where tiering
  stopped), or, without one, up to the first message stored after the exclusion.

Worked example (tiering record: every topic from t=100, ``exclude T`` from t=500;
hot offsets stored at t = 10 × offset)::

    queue  records               hot [min, max)  decision
    T/0    stop at 40 (t=500)    [0, 90)         required end 40 (the stop record)
    T/0    none                  [0, 90)         required end 50 (stored from t=500)
    T/0    loss [60, 70)         [0, 90)         impossible_loss_record
    T/0    retention first 95    [0, 90)         impossible_retention_record (> hot max)
    U/0    no init               [0, 90)         proven start 10 (stored from t=100)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tieredstore.findings import FindingKind
from tieredstore.loss import LossRecord
from tieredstore.provenance import QueueInit, RetentionMark, StopMark, TieringRecord
from verifier.outcome import Anomaly

__all__ = [
    "HotFacts",
    "Stop",
    "impossible_init",
    "impossible_losses",
    "impossible_retention",
    "record_anomalies",
    "tiered_end",
    "tiered_start",
]

Queue = tuple[str, int]


@dataclass(frozen=True, slots=True)
class HotFacts:
    """What hot proves of one queue: its range ``[hot_min, hot_max)`` and, per
    tiering-record time ``since_ms``, the first offset stored at or after it
    (``hot_max``: none), as ``stored_from[since_ms]``."""

    hot_min: int
    hot_max: int
    stored_from: Mapping[int, int]


def impossible_losses(
    losses: Iterable[LossRecord], hot: Mapping[Queue, HotFacts]
) -> list[LossRecord]:
    """The loss records that cover an offset of ``[hot_min, hot_max)`` of their queue."""
    out: list[LossRecord] = []
    for x in losses:
        h = hot.get((x.topic, x.queue_id))
        if h is not None and x.start_offset < h.hot_max and x.end_offset > h.hot_min:
            out.append(x)
    return out


def impossible_retention(
    marks: Iterable[RetentionMark],
    cold_max: Mapping[Queue, int],
    hot: Mapping[Queue, HotFacts],
) -> list[RetentionMark]:
    """The retention records of queues hot still has whose first offset is past the hot
    max, or at or past the cold max (no committed segment beyond it remains)."""
    out: list[RetentionMark] = []
    for r in marks:
        q = (r.topic, r.queue_id)
        h = hot.get(q)
        if h is None:
            continue  # a queue the broker no longer has may be destroyed whole
        top = cold_max.get(q)
        if r.first_offset > h.hot_max or top is None or r.first_offset >= top:
            out.append(r)
    return out


def impossible_init(init: QueueInit, hot: HotFacts | None) -> str | None:
    """Why hot contradicts ``init`` (None: it does not)."""
    if hot is None:
        return None
    if init.init_offset > hot.hot_max:
        return f"its init offset {init.init_offset} is past the hot max {hot.hot_max}"
    if init.policy == "earliest" and init.init_offset > hot.hot_min:
        return (
            f"an earliest init at {init.init_offset}, but hot still holds offsets from "
            f"{hot.hot_min} (hot min never goes down)"
        )
    return None


def record_anomalies(
    losses: Iterable[LossRecord],
    marks: Iterable[RetentionMark],
    cold_max: Mapping[Queue, int],
    hot: Mapping[Queue, HotFacts],
) -> list[Anomaly]:
    """One anomaly per impossible record (:func:`impossible_losses`,
    :func:`impossible_retention`), the record's key as its object."""
    out: list[Anomaly] = []
    for x in losses:
        h = hot[(x.topic, x.queue_id)]
        held = (max(x.start_offset, h.hot_min), min(x.end_offset, h.hot_max))
        detail = (
            f"loss record says the broker deleted [{x.start_offset}, {x.end_offset}) "
            f"before it was tiered, but hot still holds [{held[0]}, {held[1]}) "
            f"(hot [{h.hot_min}, {h.hot_max})): it explains nothing"
        )
        out.append(Anomaly(x.topic, x.queue_id, x.start_offset,
                           FindingKind.IMPOSSIBLE_LOSS_RECORD, x.end_offset, x.count, x.key,
                           detail))  # fmt: skip
    for r in marks:
        q = (r.topic, r.queue_id)
        top = cold_max.get(q)
        cold = "no committed segment" if top is None else f"cold max {top}"
        detail = (
            f"retention record says the head was removed below {r.first_offset}, but "
            f"{cold} and hot max {hot[q].hot_max}: retention never removes a live "
            "queue's newest segment, nor anything past hot max; it explains nothing"
        )
        out.append(Anomaly(r.topic, r.queue_id, r.first_offset,
                           FindingKind.IMPOSSIBLE_RETENTION_RECORD, r.first_offset, 0, r.key,
                           detail))  # fmt: skip
    return out


def tiered_start(tiering: TieringRecord, topic: str, hot: HotFacts | None) -> int | None:
    """The first hot offset stored while an entry of ``tiering`` tiered ``topic``: the
    start hot proves for a queue with no init record (None: hot proves none — no entry
    ever tiered it, or every message hot holds was stored before one did)."""
    since = tiering.tiered_since(topic)
    if since is None or hot is None or since not in hot.stored_from:
        return None
    first = hot.stored_from[since]
    return first if first < hot.hot_max else None


@dataclass(frozen=True, slots=True)
class Stop:
    """Where the required range of a queue whose topic is excluded now ends, and why;
    ``record`` is the stop record's key (None: not on record, decided by message time)."""

    end: int
    because: str
    record: str | None


def tiered_end(
    tiering: TieringRecord, queue: Queue, stops: Sequence[StopMark], hot: HotFacts | None
) -> Stop | None:
    """The end of the required range of ``queue`` (None: the current rules tier its
    topic, or never did — the usual rules apply).

    Its topic was tiered and the current rules exclude it since ``E``
    (:meth:`TieringRecord.excluded_since`): the queue's stop record for ``E`` says where
    tiering stopped; without one, every message stored before ``E`` is required (the
    first offset stored from ``E`` on; with no hot queue, nothing can be proven:
    None)."""
    excluded = tiering.excluded_since(queue[0])
    if excluded is None:
        return None
    mark = next(
        (s for s in stops if (s.topic, s.queue_id) == queue and s.excluded_since_ms == excluded),
        None,
    )
    if mark is not None:
        return Stop(
            mark.stop_offset, f"tiering stopped at {mark.stop_offset} (stop record)", mark.key
        )
    if hot is None or excluded not in hot.stored_from:
        return None
    end = hot.stored_from[excluded]
    because = f"no stop record: the messages stored before {excluded} (to {end}) are required"
    return Stop(end, because, None)
