"""Damage in a queue's committed history, made loud: what reconcile found, per queue.

Reconcile (:mod:`metadata.reconcile`) runs when the sidecar starts and reports, never
drops, what does not add up: a committed manifest missing, emptied, unparsable or of a
newer format, an object missing or of the wrong size, a gap or an overlap. Those are
damage to data cold had committed (findings of severity CORRUPT). Each is

* one ERROR line naming the finding, the key and the queue;
* the queue's ``status`` state DEGRADED, its note the first finding (saved beside the
  catalogue with the stopped queues, :mod:`dispatcher.stopped_file`, for ``tieredstore
  status``; served by ``/v1/queues``);
* ``tieredstore_queue_cold_damaged{topic, queue, kind} = 1`` (the alert
  ``TieredstoreColdDamaged``).

Findings that need the operator but lose nothing (NOT_ADOPTED, UNRECOGNISED, …) stay in
the reconcile summary. A finding whose key names no queue is logged, not attributed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from dispatcher.metrics import Metrics
from metadata.reconcile import ReconcileIssue
from tieredstore.errors import InvalidNameError
from tieredstore.hot_store import QueueKey
from tieredstore.layout import is_loss_key, parse_loss_key, parse_object_key

__all__ = ["Damaged", "report_damage"]

log = logging.getLogger(__name__)

#: Queues whose committed history is damaged, with the reason ``status`` shows.
Damaged = dict[QueueKey, str]


def _queue_of(key: str) -> QueueKey | None:
    try:
        if is_loss_key(key):
            q = parse_loss_key(key).queue
            return QueueKey(q.topic, q.queue_id)
        parsed = parse_object_key(key)
    except InvalidNameError:
        return None
    return QueueKey(parsed.topic, parsed.queue_id)


def report_damage(issues: Iterable[ReconcileIssue], metrics: Metrics) -> Damaged:
    """Log every damaging issue as an ERROR, set its gauge; return the damaged queues
    (each with its first finding as the reason)."""
    damaged: Damaged = {}
    for issue in issues:
        if not issue.kind.damage:
            continue
        queue = _queue_of(issue.key)
        where = f"queue {queue}" if queue is not None else "no queue"
        log.error(
            "cold damage (%s): %s; %s is DEGRADED until the damage is repaired",
            where, issue, queue if queue is not None else "nothing",
        )  # fmt: skip
        if queue is None:
            continue
        metrics.queue_damaged.labels(queue.topic, str(queue.queue_id), issue.kind.value).set(1)
        damaged.setdefault(queue, f"cold damage: {issue}")
    return damaged
