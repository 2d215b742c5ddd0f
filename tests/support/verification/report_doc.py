"""Reading a verification report back (``report.json``, as a parsed JSON document): the
anomalies it lists and its row for one queue. Only the document's keys are used, so the
tests read what the verifier wrote, not its Python objects."""

from __future__ import annotations

from typing import Any

from tieredstore.hot.store import QueueKey

__all__ = ["found", "queue_doc"]


def found(doc: dict[str, Any]) -> set[tuple[Any, ...]]:
    """The report's anomalies as (class, topic, queue, start, end, object key)."""
    return {
        (a["anomaly"], a["topic"], a["queue_id"], a["start"], a["end"], a["object_key"])
        for a in doc["anomalies"]
    }


def queue_doc(doc: dict[str, Any], q: QueueKey) -> dict[str, Any]:
    """The report's one row for queue ``q``."""
    rows: list[dict[str, Any]] = doc["queues"]
    (row,) = [r for r in rows if (r["topic"], r["queue_id"]) == (q.topic, q.queue_id)]
    return row
