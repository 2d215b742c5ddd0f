"""The verifier's decisions, sans IO: what both jobs (the single-broker Spark job and the
fleet job's per-queue tasks) decide from the same facts, each over its own I/O."""

from tieredstore.verifier.decision.link import (
    ObjectRead,
    content_judged,
    judged,
    object_findings,
    reads_whole,
    span_read,
)
from tieredstore.verifier.decision.queue import RULES, Link, QueueFinding, QueueLinks, decide

__all__ = [
    "RULES",
    "Link",
    "ObjectRead",
    "QueueFinding",
    "QueueLinks",
    "content_judged",
    "decide",
    "judged",
    "object_findings",
    "reads_whole",
    "span_read",
]
