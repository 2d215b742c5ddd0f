"""A one-line progress display for long catch-up runs (stderr, only when enabled)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from dispatcher.planner import SegmentPlan

__all__ = ["ProgressLine"]


class ProgressLine:
    """Rewrites one stderr line with segments, messages and MB tiered, and the rate.

    Disabled (the default when stderr is not a TTY) it only counts, so logs stay clean.
    Redraws are throttled to four a second.
    """

    def __init__(self, *, enabled: bool, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.segments = 0
        self.messages = 0
        self.bytes = 0
        self._started = time.monotonic()
        self._last_draw = 0.0
        self._shown = False

    def update(self, plan: SegmentPlan) -> None:
        """Count one committed segment; redraw if enabled and due."""
        self.segments += 1
        self.messages += plan.count
        self.bytes += plan.nbytes
        now = time.monotonic()
        if not self.enabled or now - self._last_draw < 0.25:
            return
        self._last_draw = now
        mb = self.bytes / 1e6
        rate = mb / max(now - self._started, 1e-9)
        self.stream.write(
            f"\rtiered {self.segments:,} segments, {self.messages:,} messages, "
            f"{mb:,.1f} MB ({rate:,.1f} MB/s)"
        )
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        """End the progress line (if one was drawn); the next update starts a new one.

        Also called before every log line (:func:`tieredstore.logs.before_each_line`),
        so a log line never continues the progress line.
        """
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False
