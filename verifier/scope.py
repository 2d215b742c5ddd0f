"""What each queue must hold, from the cold store's own records; and what is missing.

Pure Python on the driver, over small inputs: the collected queue summary (one row per
queue), the provenance records of the listing (:mod:`tieredstore.provenance`) once
checked against hot (:mod:`verifier.evidence`), and what hot proves of when its messages
were stored (:class:`~verifier.evidence.HotFacts`). Per queue:

* **tiered?** — the broker's tiering record decides, per message time: a topic no entry
  ever tiered has no required range (its hot data may stay untiered), and the report
  names the rule; a topic the current rules exclude but an earlier entry tiered owes its
  history up to where its tiering stopped (**required end**: its stop record, or the
  first message stored after the exclusion), and only that;
* **required start** — ``max(init offset, highest retention first offset)``; a queue
  that is tiered (it has segments, or its topic is included and hot holds data) with no
  init record is ``unproven_start`` (DIRTY), and its start is taken as what cold (or,
  with no segment, hot) shows — except that messages hot holds which were stored while
  an entry tiered the topic are required all the same (``missing_head`` below them);
* ``missing_head`` (CORRUPT) — cold starts above the required start and no accepted
  loss span covers the difference: checked whether or not hot still has those offsets;
* ``hot_not_covered`` (CORRUPT) for a queue with **no segment**, or with a required
  end: hot offsets from the required start (or cold max, or the end of a loss span
  holding it) up to the lag cutoff or the required end. Other queues with segments get
  theirs from :func:`verifier.checks.hot_not_covered` (the tail).

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
                                                      100 on were stored while tiered
    0     stop 500   none             [0, 1000)       hot_not_covered [0, 500)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from tieredstore.findings import FindingKind
from tieredstore.loss import LossRecord
from tieredstore.provenance import QueueInit, RetentionMark, StopMark, TieringRecord
from verifier.evidence import HotFacts, Stop, impossible_init, tiered_end, tiered_start
from verifier.outcome import Anomaly, QueueReport
from verifier.readers import loss_detail

__all__ = ["Requirements", "Span", "apply_requirements", "merge_spans", "stopped_queues"]

Queue = tuple[str, int]


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
    #: Init records hot contradicts (:func:`~verifier.evidence.impossible_init`), why.
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
        checks against hot (:mod:`verifier.evidence`): a record that contradicts hot
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
    retention record, the first hot message stored while an entry tiered its topic."""
    if required is not None:
        return required
    return tiered_start(req.tiering, q.topic, req.hot.get((q.topic, q.queue_id)))


def _nothing_tiered(
    q: QueueReport, req: Requirements, required: int | None, stop: Stop | None
) -> list[Anomaly]:
    """A queue with no segment: hot data older than the allowance (before the required
    end, if any) that must be in cold."""
    if q.segments or not q.hot_present or q.lag_cutoff is None or q.hot_min is None:
        return []
    start = req.past_loss((q.topic, q.queue_id), q.hot_min if required is None else required)
    end = q.lag_cutoff if stop is None else min(q.lag_cutoff, stop.end)
    if end <= start:
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
    if stop.end <= start:
        return []
    detail = (
        f"{stop.end - start} offsets tiered before the topic was excluded are not in cold "
        f"(cold [{q.cold_min}, {q.cold_max})); {stop.because}"
    )
    return [_anomaly(q, FindingKind.HOT_NOT_COVERED, start, stop.end, detail)]


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
