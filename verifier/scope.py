"""What each queue must hold, from the cold store's own records; and what is missing.

Pure Python on the driver, over small inputs: the collected queue summary (one row per
queue) and the provenance records of the listing (:mod:`tieredstore.provenance`).
Per queue:

* **tiered?** — the broker's tiering record's current topic rules decide; a topic they
  exclude has no required range (its hot data may stay untiered), and the report names
  the rule;
* **required start** — ``max(init offset, highest retention first offset)``; a queue
  that is tiered (it has segments, or its topic is included and hot holds data) with no
  init record is ``unproven_start`` (DIRTY), and its start is taken as what cold (or,
  with no segment, hot) shows;
* ``missing_head`` (CORRUPT) — cold starts above the required start and no accepted
  loss span covers the difference: checked whether or not hot still has those offsets;
* ``hot_not_covered`` (CORRUPT) for a queue with **no segment**: hot offsets from the
  required start (or the end of a loss span holding it) up to the lag cutoff. Queues
  with segments get theirs from :func:`verifier.checks.hot_not_covered` (the tail).

Worked example (lag cutoff 900, loss records none)::

    init  retention  cold [min, max)  hot [min, max)  findings
    0     -          [0, 800)         [0, 1000)       none (tail [800, 900) is the Spark check's)
    0     -          [200, 800)       [0, 1000)       missing_head [0, 200)
    0     300        [300, 800)       [0, 1000)       none (retention explains the head)
    0     -          none             [0, 1000)       hot_not_covered [0, 900)
    950   -          none             [0, 1000)       none (nothing required yet)
    none  -          [0, 800)         [0, 1000)       unproven_start
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from tieredstore.findings import FindingKind
from tieredstore.loss import LossRecord
from tieredstore.provenance import QueueInit, RetentionMark, TieringRecord
from verifier.outcome import Anomaly, QueueReport
from verifier.readers import loss_detail

__all__ = ["Requirements", "Span", "apply_requirements", "merge_spans"]

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

    @classmethod
    def of(
        cls,
        tiering: TieringRecord,
        inits: Iterable[QueueInit],
        retention: Iterable[RetentionMark],
        losses: Iterable[LossRecord],
    ) -> Requirements:
        latest: dict[Queue, RetentionMark] = {}
        for r in retention:
            q = (r.topic, r.queue_id)
            if q not in latest or r.first_offset > latest[q].first_offset:
                latest[q] = r
        records = list(losses)
        spans: dict[Queue, list[Span]] = {}
        for s in merge_spans(records):
            spans.setdefault((s.topic, s.queue_id), []).append(s)
        by_queue: dict[Queue, list[LossRecord]] = {}
        for x in records:
            by_queue.setdefault((x.topic, x.queue_id), []).append(x)
        inits_by_queue = {(i.topic, i.queue_id): i for i in inits}
        return cls(tiering, inits_by_queue, latest, spans, by_queue)

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


def _unproven(q: QueueReport) -> Anomaly:
    at = q.cold_min if q.cold_min is not None else (q.hot_min or 0)
    return _anomaly(
        q,
        FindingKind.UNPROVEN_START,
        at,
        at,
        f"no init record in cold: where the queue's history must start is not on record "
        f"(cold shows {at}); a sidecar of this version writes one while hot still holds "
        "that offset",
    )


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


def _nothing_tiered(q: QueueReport, req: Requirements, required: int | None) -> list[Anomaly]:
    """A queue with no segment: hot data older than the allowance that must be in cold."""
    if q.segments or not q.hot_present or q.lag_cutoff is None or q.hot_min is None:
        return []
    start = req.past_loss((q.topic, q.queue_id), q.hot_min if required is None else required)
    if q.lag_cutoff <= start:
        return []
    gone = max(0, min(q.hot_min, q.lag_cutoff) - start)
    detail = (
        f"no segment in cold: {q.lag_cutoff - start} offsets older than the lag allowance "
        f"must be tiered (hot [{q.hot_min}, {q.hot_max}); {gone} of them already deleted "
        "from hot)"
    )
    return [_anomaly(q, FindingKind.HOT_NOT_COVERED, start, q.lag_cutoff, detail)]


def _queue_findings(q: QueueReport, req: Requirements, required: int | None) -> list[Anomaly]:
    out = [] if (q.topic, q.queue_id) in req.inits else [_unproven(q)]
    return out + _missing_head(q, req, required) + _nothing_tiered(q, req, required)


def apply_requirements(
    queues: Sequence[QueueReport], req: Requirements
) -> tuple[tuple[QueueReport, ...], list[Anomaly]]:
    """Each queue with its required start and tiering rule filled in, and the findings
    of the module docstring."""
    out_q: list[QueueReport] = []
    found: list[Anomaly] = []
    for q in queues:
        decision = req.tiering.decide(q.topic)
        required, why = _required_start(q, req)
        init = req.inits.get((q.topic, q.queue_id))
        q = replace(
            q,
            tiered=decision.tiered or q.segments > 0,
            tiering_rule=decision.rule,
            required_start=required,
            required_because=why,
            init_offset=init.init_offset if init else None,
        )
        out_q.append(q)
        if q.tiered:
            found += _queue_findings(q, req, required)
    return tuple(out_q), found
