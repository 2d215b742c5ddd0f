"""What one tick (or a whole catch-up pass) did, and how a queue task's error is recorded.

:func:`record_error` is the one place that decides which errors a tick absorbs (ours:
counted, logged, the queue retried next tick) and which stop the dispatcher (a lost
lease, cancellation, a bug).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from tieredstore.dispatcher.metrics import Metrics
from tieredstore.dispatcher.tiering.planner import HotDataLost
from tieredstore.errors import (
    ColdStoreAccessError,
    LeaseLapsedError,
    LeaseLostError,
    RetryableError,
    TieredStoreError,
)
from tieredstore.hot.store import QueueKey

__all__ = ["TickReport", "record_error"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class TickReport:
    """What one tick (or a whole catch-up pass) did: ``segments`` per-queue segments and
    ``slices`` batch slices (in ``batches`` batch objects) committed, holding
    ``messages`` messages and ``bytes`` bytes in all."""

    segments: int = 0
    slices: int = 0
    batches: int = 0
    messages: int = 0
    bytes: int = 0
    new_queues: list[QueueKey] = field(default_factory=list)
    diverged: list[QueueKey] = field(default_factory=list)
    lost: list[HotDataLost] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: Queue tasks that stopped because the lease lapsed (retried once it is reclaimed).
    lapsed: int = 0
    #: A stop (SIGINT/SIGTERM) ended the pass before it tiered everything: what it
    #: reports was committed, the rest was not attempted or was abandoned uncommitted.
    interrupted: bool = False
    #: Set by an interrupted catch-up only: segments in flight abandoned uncommitted (the
    #: deadline passed, or a second stop asked for it), and what hot still holds untiered
    #: in ACTIVE queues after the stop (0 and 0: the pass had in fact finished).
    abandoned: int = 0
    left_messages: int = 0
    left_queues: int = 0

    @property
    def idle(self) -> bool:
        """Nothing tiered and nothing abandoned to a lapsed lease: a catch-up is done."""
        return self.segments == 0 and self.slices == 0 and not self.lapsed

    @property
    def committed(self) -> str:
        """What was committed, said as the operator sees it in cold: ``"3 segments"``,
        or ``"0 segments, 1024 batch slices in 64 batch objects"``."""
        said = f"{self.segments} segment{'s' if self.segments != 1 else ''}"
        if self.slices:
            said += (
                f", {self.slices} batch slice{'s' if self.slices != 1 else ''} in "
                f"{self.batches} batch object{'s' if self.batches != 1 else ''}"
            )
        return said

    def count(self, messages: int, nbytes: int, *, sliced: bool) -> None:
        """Count one committed segment (or batch slice: ``sliced``) of ``messages``
        messages and ``nbytes`` bytes."""
        if sliced:
            self.slices += 1
        else:
            self.segments += 1
        self.messages += messages
        self.bytes += nbytes

    def count_since(self, before: TickReport, after: TickReport) -> None:
        """Take segments, slices, batches, messages and bytes as ``after`` less
        ``before`` (two readings of a running count)."""
        self.segments = after.segments - before.segments
        self.slices = after.slices - before.slices
        self.batches = after.batches - before.batches
        self.messages = after.messages - before.messages
        self.bytes = after.bytes - before.bytes

    def merge(self, other: TickReport) -> None:
        self.segments += other.segments
        self.slices += other.slices
        self.batches += other.batches
        self.messages += other.messages
        self.bytes += other.bytes
        self.new_queues += other.new_queues
        self.diverged += other.diverged
        self.lost += other.lost
        self.errors += other.errors
        self.lapsed += other.lapsed
        self.interrupted = self.interrupted or other.interrupted


def record_error(exc: BaseException, report: TickReport, metrics: Metrics) -> None:
    """Count and log a queue task's error; the queue is retried next tick.

    Only our own errors are recorded; a lost lease, cancellation or a bug propagates
    and stops the dispatcher.
    """
    if isinstance(exc, LeaseLostError) or not isinstance(exc, TieredStoreError):
        raise exc
    if isinstance(exc, LeaseLapsedError):  # the segment was abandoned; not a failure
        metrics.errors.labels(type(exc).__name__).inc()
        report.lapsed += 1
        return
    metrics.errors.labels(type(exc).__name__).inc()
    report.errors.append(str(exc))
    if isinstance(
        exc, ColdStoreAccessError
    ):  # one ERROR per fault: tieredstore.dispatcher.cold_access
        log.debug("tiering failed: %s", exc)
        return
    level = logging.WARNING if isinstance(exc, RetryableError) else logging.ERROR
    log.log(level, "tiering failed: %s", exc)
