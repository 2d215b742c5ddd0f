"""What each queue must hold, from the cold store's own records; and what is missing.

Pure Python on the driver, over small inputs: the collected queue summary (one row per
queue), the provenance records of the listing (:mod:`tieredstore.cold.provenance`) once
checked against hot (below), and what hot proves of when its messages
were stored (:class:`HotFacts`). Per queue:

* **tiered?** — the broker's tiering record decides, per message time: a topic no entry
  ever tiered has no required range (its hot data may stay untiered), and the report
  names the rule; a topic the current rules exclude but an earlier entry tiered owes its
  history up to where its tiering stopped (**required end**: its stop record, or the
  first message stored after the exclusion), and only that;
* **required start** — ``max(init offset, highest retention first offset)``; a queue
  that is tiered (it has segments, or its topic is included and hot holds data) with no
  init record is ``unproven_start`` (DIRTY), and its start is taken as what cold (or,
  with no segment, hot) shows — except that messages hot holds which were stored while
  an entry tiered the topic are required all the same (``missing_head`` below them),
  and so is everything hot holds when the tiering record says the init policy was
  ``earliest`` throughout (:func:`earliest_start`);
* ``missing_head`` (CORRUPT) — cold starts above the required start and no accepted
  loss span covers the difference: checked whether or not hot still has those offsets;
* ``hot_not_covered`` (CORRUPT) for a queue with **no segment**, or with a required
  end: hot offsets from the required start (or cold max, or the end of a loss span
  holding it) up to the lag cutoff or the required end. Other queues with segments get
  theirs from :func:`tieredstore.verifier.checks.hot_not_covered` (the tail).

Worked example (lag cutoff 900, loss records none)::

    init  retention  cold [min, max)  hot [min, max)  findings
    0     -          [0, 800)         [0, 1000)       none (tail [800, 900) is the Spark check's)
    0     -          [200, 800)       [0, 1000)       missing_head [0, 200)
    0     300        [300, 800)       [0, 1000)       none (retention explains the head)
    0     -          none             [0, 1000)       hot_not_covered [0, 900)
    950   -          none             [0, 1000)       none (nothing required yet)
    none  -          [0, 800)         [0, 1000)       unproven_start
    none  -          [300, 800)       [0, 1000)       unproven_start, and missing_head
                                                      [100, 300) if hot's messages from
                                                      100 on were stored while tiered,
                                                      [0, 300) if the policy was always
                                                      earliest
    0     stop 500   none             [0, 1000)       hot_not_covered [0, 500)

**Records checked against what hot proves** (pure decisions over plain values, so any
source of hot facts — the hot files, a fingerprint — applies the same ones).

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
from dataclasses import dataclass, field, replace

from tieredstore.cold.loss import LossRecord
from tieredstore.cold.provenance import QueueInit, RetentionMark, StopMark, TieringRecord
from tieredstore.findings import FindingKind
from tieredstore.verifier.outcome import Anomaly, QueueReport
from tieredstore.verifier.readers import loss_detail

__all__ = [
    "HotFacts",
    "ProvenanceRecords",
    "Requirements",
    "Span",
    "Stop",
    "apply_requirements",
    "earliest_start",
    "impossible_init",
    "impossible_losses",
    "impossible_retention",
    "judge",
    "merge_spans",
    "record_anomalies",
    "stopped_queues",
    "tiered_end",
    "tiered_start",
]

Queue = tuple[str, int]


# -- records checked against what hot proves -------------------------------------------


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


# -- the required range ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Span:
    """Accepted-loss offsets ``[start, end)`` of one queue (loss records merged)."""

    topic: str
    queue_id: int
    start: int
    end: int


def merge_spans(losses: Iterable[LossRecord]) -> list[Span]:
    """Each queue's loss records merged into maximal contiguous or overlapping spans."""
    spans: list[Span] = []
    for x in sorted(losses, key=lambda r: (r.topic, r.queue_id, r.start_offset)):
        last = spans[-1] if spans else None
        if (
            last is not None
            and (last.topic, last.queue_id) == (x.topic, x.queue_id)
            and x.start_offset <= last.end
        ):
            spans[-1] = replace(last, end=max(last.end, x.end_offset))
        else:
            spans.append(Span(x.topic, x.queue_id, x.start_offset, x.end_offset))
    return spans


@dataclass(frozen=True)
class Requirements:
    """The listing's provenance records, indexed by queue."""

    tiering: TieringRecord
    inits: dict[Queue, QueueInit]
    retained_from: dict[Queue, RetentionMark]
    spans: dict[Queue, list[Span]]
    losses: dict[Queue, list[LossRecord]]
    stops: tuple[StopMark, ...] = ()
    hot: Mapping[Queue, HotFacts] = field(default_factory=dict)
    #: Init records hot contradicts (:func:`impossible_init`), and why.
    rejected: Mapping[Queue, tuple[QueueInit, str]] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        tiering: TieringRecord,
        inits: Iterable[QueueInit],
        retention: Iterable[RetentionMark],
        losses: Iterable[LossRecord],
        stops: Iterable[StopMark] = (),
        hot: Mapping[Queue, HotFacts] | None = None,
    ) -> Requirements:
        """Index the records; ``retention`` and ``losses`` are those that survived the
        checks against hot (module docstring): a record that contradicts hot
        explains nothing, and neither does an init record hot contradicts."""
        latest: dict[Queue, RetentionMark] = {}
        for r in retention:
            q = (r.topic, r.queue_id)
            if q not in latest or r.first_offset > latest[q].first_offset:
                latest[q] = r
        hot = dict(hot or {})
        rejected: dict[Queue, tuple[QueueInit, str]] = {}
        kept_inits: list[QueueInit] = []
        for i in inits:
            why = impossible_init(i, hot.get((i.topic, i.queue_id)))
            if why is None:
                kept_inits.append(i)
            else:
                rejected[(i.topic, i.queue_id)] = (i, why)
        records = list(losses)
        spans: dict[Queue, list[Span]] = {}
        for s in merge_spans(records):
            spans.setdefault((s.topic, s.queue_id), []).append(s)
        by_queue: dict[Queue, list[LossRecord]] = {}
        for x in records:
            by_queue.setdefault((x.topic, x.queue_id), []).append(x)
        inits_by_queue = {(i.topic, i.queue_id): i for i in kept_inits}
        return cls(tiering, inits_by_queue, latest, spans, by_queue, tuple(stops), hot, rejected)

    def covered(self, q: Queue, start: int, end: int) -> bool:
        """Whether one accepted-loss span holds all of ``[start, end)``."""
        return any(s.start <= start and s.end >= end for s in self.spans.get(q, ()))

    def past_loss(self, q: Queue, offset: int) -> int:
        """``offset``, or the end of the loss span that holds it."""
        return next((s.end for s in self.spans.get(q, ()) if s.start <= offset < s.end), offset)


def _anomaly(q: QueueReport, kind: FindingKind, start: int, end: int, detail: str) -> Anomaly:
    return Anomaly(q.topic, q.queue_id, start, kind, end, end - start, None, detail)


def _required_start(q: QueueReport, req: Requirements) -> tuple[int | None, str]:
    """The required start (None: not on record) and how it was decided, for the report."""
    key = (q.topic, q.queue_id)
    init, kept = req.inits.get(key), req.retained_from.get(key)
    if init is None and kept is None:
        return None, "no init record"
    start = max(init.init_offset if init else 0, kept.first_offset if kept else 0)
    why = f"init record {init.init_offset} ({init.policy})" if init else "no init record"
    if kept is not None and kept.first_offset >= start:
        why += f", retention record: head removed below {kept.first_offset}"
    return start, why


def _unproven(q: QueueReport, req: Requirements) -> Anomaly:
    at = q.cold_min if q.cold_min is not None else (q.hot_min or 0)
    rejected = req.rejected.get((q.topic, q.queue_id))
    why = "no init record in cold" if rejected is None else f"init record rejected: {rejected[1]}"
    return Anomaly(
        q.topic, q.queue_id, at, FindingKind.UNPROVEN_START, at, 0,
        None if rejected is None else rejected[0].key,
        f"{why}: where the queue's history must start is not on record (cold shows {at}); "
        "a sidecar of this version writes one while hot still holds that offset",
    )  # fmt: skip


def _unproven_stop(q: QueueReport, stop: Stop | None) -> list[Anomaly]:
    if stop is None or stop.record is not None:
        return []
    detail = (
        "its topic is excluded now, after an earlier tiering-record entry tiered it, and "
        f"no stop record says where its tiering stopped; {stop.because}"
    )
    return [_anomaly(q, FindingKind.UNPROVEN_STOP, stop.end, stop.end, detail)]


def _missing_head(q: QueueReport, req: Requirements, required: int | None) -> list[Anomaly]:
    cold_min = q.cold_min
    if cold_min is None or required is None or cold_min <= required:
        return []
    if req.covered((q.topic, q.queue_id), required, cold_min):
        # Accepted losses at the head: the Spark check leaves out those ending at or
        # below cold min (history, it assumes); in the required range they are not.
        return [
            Anomaly(q.topic, q.queue_id, x.start_offset, FindingKind.LOST_BEFORE_TIERING,
                    x.end_offset, x.count, x.key, loss_detail(x))
            for x in req.losses.get((q.topic, q.queue_id), ())
            if required < x.end_offset <= cold_min
        ]  # fmt: skip
    detail = (
        f"cold starts at {cold_min} but the queue must be in cold from {required}; no "
        f"retention or loss record explains [{required}, {cold_min})"
    )
    return [_anomaly(q, FindingKind.MISSING_HEAD, required, cold_min, detail)]


def _proven_start(q: QueueReport, req: Requirements, required: int | None) -> int | None:
    """Where the queue must start in cold: the required start, or, with no init or
    retention record, the first hot message stored while an entry tiered its topic —
    or the hot min, when the tiering record says every queue was initialised at its hot
    min (:func:`earliest_start`)."""
    if required is not None:
        return required
    hot = req.hot.get((q.topic, q.queue_id))
    starts = [tiered_start(req.tiering, q.topic, hot), earliest_start(req.tiering, hot)]
    return min((s for s in starts if s is not None), default=None)


def earliest_start(tiering: TieringRecord, hot: HotFacts | None) -> int | None:
    """The start a queue with no init record must have in cold when the broker's init
    policy was ``earliest`` throughout (:attr:`TieringRecord.always_earliest`): the hot
    min (None: not so, or no hot messages). The queue was initialised at the hot min of
    the day it was first seen, and the hot min never goes down, so every offset hot holds
    now was required; cold starting above it is ``missing_head`` (CORRUPT) unless a
    retention or loss record explains it. The one rule both the single-broker job and
    the fleet job apply (through :func:`judge`)."""
    if not tiering.always_earliest or hot is None or hot.hot_min >= hot.hot_max:
        return None
    return hot.hot_min


def _nothing_tiered(
    q: QueueReport, req: Requirements, required: int | None, stop: Stop | None
) -> list[Anomaly]:
    """A queue with no segment: hot data older than the allowance (before the required
    end, if any) that must be in cold."""
    if q.segments or not q.hot_present or q.lag_cutoff is None or q.hot_min is None:
        return []
    start = req.past_loss((q.topic, q.queue_id), q.hot_min if required is None else required)
    end = _required_end(q, stop)
    if end is None or end <= start:
        return []
    gone = max(0, min(q.hot_min, end) - start)
    detail = (
        f"no segment in cold: {end - start} offsets older than the lag allowance "
        f"must be tiered (hot [{q.hot_min}, {q.hot_max}); {gone} of them already deleted "
        "from hot)"
    )
    if stop is not None:
        detail += f"; {stop.because}"
    return [_anomaly(q, FindingKind.HOT_NOT_COVERED, start, end, detail)]


def _stopped_tail(q: QueueReport, req: Requirements, stop: Stop | None) -> list[Anomaly]:
    """A queue with segments whose topic is excluded now: ``[cold max, required end)``
    (past an accepted loss holding cold max) is missing. Replaces the Spark check's tail,
    which knows nothing of the rules (:func:`stopped_queues`)."""
    if stop is None or not q.segments or q.cold_max is None or q.cold_min is None:
        return []
    start = req.past_loss((q.topic, q.queue_id), q.cold_max)
    end = _required_end(q, stop)
    if end is None or end <= start:
        return []
    detail = (
        f"{end - start} offsets owed from before the topic was excluded are not in cold "
        f"(cold [{q.cold_min}, {q.cold_max})); {stop.because}"
    )
    return [_anomaly(q, FindingKind.HOT_NOT_COVERED, start, end, detail)]


def _required_end(q: QueueReport, stop: Stop | None) -> int | None:
    """Where the owed offsets end: the lag cutoff; for a stopped queue its stop record
    (committed then: no lag allowance), or, without one, the messages stored before the
    exclusion that are older than the allowance."""
    if stop is None or stop.record is None:
        ends = [e for e in (q.lag_cutoff, None if stop is None else stop.end) if e is not None]
        return min(ends) if ends else None
    return stop.end


def _queue_findings(
    q: QueueReport, req: Requirements, required: int | None, stop: Stop | None
) -> list[Anomaly]:
    out = [] if (q.topic, q.queue_id) in req.inits else [_unproven(q, req)]
    out += _unproven_stop(q, stop)
    proven = _proven_start(q, req, required)
    return (
        out
        + _missing_head(q, req, proven)
        + _nothing_tiered(q, req, required, stop)
        + _stopped_tail(q, req, stop)
    )


def _stop(q: QueueReport, req: Requirements) -> Stop | None:
    if req.tiering.decide(q.topic).tiered:
        return None
    queue = (q.topic, q.queue_id)
    return tiered_end(req.tiering, queue, req.stops, req.hot.get(queue))


def stopped_queues(queues: Iterable[QueueReport]) -> set[Queue]:
    """The queues whose required range ends before their hot max (a ``required_end``):
    their tail is this module's to judge, not the Spark check's."""
    return {(q.topic, q.queue_id) for q in queues if q.required_end is not None}


def apply_requirements(
    queues: Sequence[QueueReport], req: Requirements
) -> tuple[tuple[QueueReport, ...], list[Anomaly]]:
    """Each queue with its required range and tiering rule filled in, and the findings
    of the module docstring."""
    out_q: list[QueueReport] = []
    found: list[Anomaly] = []
    for q in queues:
        decision = req.tiering.decide(q.topic)
        required, why = _required_start(q, req)
        init = req.inits.get((q.topic, q.queue_id))
        stop = _stop(q, req)
        owed = stop is not None and stop.end > (required or 0)
        q = replace(
            q,
            tiered=decision.tiered or q.segments > 0 or owed,
            tiering_rule=decision.rule,
            required_start=required,
            required_because=why if stop is None else f"{why}; {stop.because}",
            required_end=None if stop is None else stop.end,
            init_offset=init.init_offset if init else None,
        )
        out_q.append(q)
        if q.tiered:
            found += _queue_findings(q, req, required, stop)
    return tuple(out_q), found


@dataclass(frozen=True)
class ProvenanceRecords:
    """The broker's provenance records as listed (:mod:`tieredstore.cold.provenance`)."""

    tiering: TieringRecord
    inits: Sequence[QueueInit]
    retention: Sequence[RetentionMark]
    stops: Sequence[StopMark]


def judge(
    queues: Sequence[QueueReport],
    anomalies: Iterable[Anomaly],
    records: ProvenanceRecords,
    losses: Sequence[LossRecord],
    impossible: Sequence[LossRecord],
    hot: Mapping[Queue, HotFacts],
) -> tuple[tuple[QueueReport, ...], list[Anomaly]]:
    """The whole decision of this module, over plain values, for any source of hot facts.

    ``queues`` and ``anomalies`` are what the segment checks found (queue summary and
    ANOMALIES); ``losses`` every valid loss record listed, ``impossible`` those of them
    :func:`impossible_losses` found (the caller left them out of the segment checks'
    accepted losses). Returns each queue with its required range, and ``anomalies``
    with: the records that contradict hot or cold, the findings of the required range,
    and — for queues whose required range ends early — the required-range tail in place
    of the segment checks' ``hot_not_covered`` (unsorted).
    """
    cold_max = {(q.topic, q.queue_id): q.cold_max for q in queues if q.cold_max is not None}
    bad_marks = impossible_retention(records.retention, cold_max, hot)
    req = Requirements.of(
        records.tiering,
        records.inits,
        [r for r in records.retention if r not in bad_marks],
        [x for x in losses if x not in impossible],
        records.stops,
        hot,
    )
    judged, found = apply_requirements(queues, req)
    found += record_anomalies(impossible, bad_marks, cold_max, hot)
    stopped = stopped_queues(judged)
    kept = [
        a for a in anomalies
        if not (a.anomaly is FindingKind.HOT_NOT_COVERED and (a.topic, a.queue_id) in stopped)
    ]  # fmt: skip
    return judged, kept + found
