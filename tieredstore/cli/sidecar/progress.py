"""A one-line progress display for long catch-up runs (stderr, only when enabled).

``run --once`` shows how far it is and how far it has to go, as ``restore`` does::

    tiered 12 segments, 45,000/120,000 messages (37 %), 12.0 MiB (3.1 MiB/s), ETA 24.5 s

The total is what the pass has to tier: for every ACTIVE queue, from where it stood
when the pass began (its cold commit then, or its init offset for a queue the pass
found) to the hot store's end (:func:`pass_total` over the catalogue and the hot
store), measured again at most once a second, so messages the broker appends
meanwhile raise it. The ETA divides
what remains by the message rate so far. Sizes are binary (MiB), as everywhere
(:mod:`tieredstore.humanize`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Final, TextIO

from dispatcher.planner import SegmentPlan
from metadata.catalogue import Catalogue
from metadata.rows import QueueState
from tieredstore.errors import TieredStoreError
from tieredstore.hot_store import HotStore
from tieredstore.humanize import human_bytes, human_rate, human_seconds

__all__ = ["ProgressLine", "pass_total"]

#: Redraws at most this often (seconds); the backlog is measured at most once a second.
_REDRAW: Final = 0.25
_REMEASURE: Final = 1.0


def pass_total(catalogue: Catalogue, hot: HotStore) -> Callable[[], int]:
    """The messages a catch-up pass starting now has to tier, as a function to call
    during the pass (a queue whose hot range does not read counts 0: it is not tiered
    either). The catalogue's cold commits are taken now, as the pass's start."""
    start = {(r.topic, r.queue_id): r.cold_commit for r in catalogue.queues.all()}

    def total() -> int:
        count = 0
        for row in catalogue.queues.all():
            if row.state is not QueueState.ACTIVE:
                continue
            try:
                rng = hot.queue_range(row.topic, row.queue_id)
            except TieredStoreError:
                continue
            base = start.get((row.topic, row.queue_id), row.init_offset)
            count += max(rng.max - max(base, rng.min), 0)
        return count

    return total


class ProgressLine:
    """Rewrites one stderr line with segments, messages (of the total), MiB tiered, the
    rate and the ETA (module doc).

    Disabled (the default when stderr is not a TTY) it only counts, so logs stay clean
    and the backlog is never measured. Redraws are throttled to four a second.
    ``total`` measures the pass's total in messages (None: no total, no ETA);
    ``clock`` gives monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        *,
        enabled: bool,
        stream: TextIO | None = None,
        total: Callable[[], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.segments = 0
        self.messages = 0
        self.bytes = 0
        self._measure_total = total
        self._clock = clock
        self._started = clock()
        self._last_draw: float | None = None
        self._measured: float | None = None
        self._total: int | None = None
        self._width = 0
        self._shown = False

    def measure(self, total: Callable[[], int]) -> None:
        """From now on, give a total and an ETA: ``total()`` is the pass's total."""
        self._measure_total = total

    def update(self, plan: SegmentPlan) -> None:
        """Count one committed segment; redraw if enabled and due."""
        self.add(plan.count, plan.nbytes)

    def add(self, messages: int, nbytes: int) -> None:
        """Count one committed segment of ``messages`` messages and ``nbytes`` bytes;
        redraw if enabled and due."""
        self.segments += 1
        self.messages += messages
        self.bytes += nbytes
        now = self._clock()
        if not self.enabled or (self._last_draw is not None and now - self._last_draw < _REDRAW):
            return
        self._last_draw = now
        self._measure(now)
        text = self.text(now)
        pad = " " * max(self._width - len(text), 0)  # over what a longer line left
        self._width = len(text)
        self.stream.write(f"\r{text}{pad}")
        self.stream.flush()
        self._shown = True

    def _measure(self, now: float) -> None:
        if self._measure_total is None:
            return
        if self._measured is not None and now - self._measured < _REMEASURE:
            return
        self._measured = now
        self._total = max(self._measure_total(), self.messages)

    def text(self, now: float) -> str:
        """The progress line as of ``now`` (monotonic seconds)."""
        elapsed = max(now - self._started, 1e-9)
        done = human_bytes(self.bytes)
        rate = human_rate(self.bytes / elapsed)
        if self._total is None or self._total < self.messages:
            return f"tiered {self.segments:,} segments, {self.messages:,} messages, {done} ({rate})"
        left = self._total - self.messages
        pct = 100 * self.messages // max(self._total, 1)
        eta = left / (self.messages / elapsed) if self.messages else None
        return (
            f"tiered {self.segments:,} segments, {self.messages:,}/{self._total:,} messages "
            f"({pct} %), {done} ({rate}), ETA {human_seconds(eta) or 'unknown'}"
        )

    def close(self) -> None:
        """End the progress line (if one was drawn); the next update starts a new one.

        Also called before every log line (:func:`tieredstore.logs.before_each_line`),
        so a log line never continues the progress line.
        """
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False
            self._width = 0
