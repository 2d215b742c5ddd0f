"""Progress lines for the long commands: ``run --once``'s catch-up, ``restore``, ``export``.

:class:`RewrittenLine` is the one way to draw them: one stderr line rewritten in place
(``\r``), at most four times a second, padded over what a longer line left, sizes in
binary units (:mod:`tieredstore.humanize`), ended before any log line (the caller hooks
:meth:`RewrittenLine.close` into :func:`tieredstore.logs.before_each_line`); ``--progress
auto`` (:func:`add_progress_argument`) draws only on a TTY.

``run --once`` shows how far it is and how far it has to go, as ``restore`` does::

    tiered 12 segments, 45,000/120,000 messages (37 %), 12.0 MiB (3.1 MiB/s), ETA 24.5 s

With ``tiering.batching`` on, the segments that went into batch objects are said apart:
``tiered 2 segments, 1,024 batch slices, ...``.

The total is what the pass has to tier: for every ACTIVE queue, from where it stood
when the pass began (its cold commit then, or its init offset for a queue the pass
found) to the hot store's end (:func:`pass_total` over the catalogue and the hot
store), measured again at most once a second, so messages the broker appends
meanwhile raise it. The ETA divides what remains by the message rate so far.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Final, TextIO

from tieredstore.dispatcher.tiering.planner import SegmentPlan
from tieredstore.dispatcher.tiering.tick_report import TickReport
from tieredstore.errors import TieredStoreError
from tieredstore.hot.store import HotStore
from tieredstore.humanize import human_bytes, human_rate, human_seconds
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueState

__all__ = [
    "ProgressLine",
    "RewrittenLine",
    "add_progress_argument",
    "eta",
    "pass_total",
    "progress_enabled",
    "tiered_words",
]

#: Redraws at most this often (seconds); the backlog is measured at most once a second.
_REDRAW: Final = 0.25
_REMEASURE: Final = 1.0


def add_progress_argument(p: argparse.ArgumentParser) -> None:
    """``--progress auto|on|off`` (auto: only when stderr is a terminal)."""
    p.add_argument(
        "--progress",
        choices=["auto", "on", "off"],
        default="auto",
        help="progress line on stderr (auto: only on a TTY)",
    )


def progress_enabled(args: argparse.Namespace, stream: TextIO | None = None) -> bool:
    """Whether ``--progress`` asks for a line on ``stream`` (stderr by default)."""
    stream = stream or sys.stderr
    return bool(args.progress == "on" or (args.progress == "auto" and stream.isatty()))


def eta(done: float, total: float, elapsed: float) -> str:
    """``ETA 12.3 s`` from the rate so far; ``ETA unknown`` before anything is done."""
    if done <= 0 or elapsed <= 0:
        return "ETA unknown"
    return f"ETA {human_seconds(max(total - done, 0) / (done / elapsed))}"


class RewrittenLine:
    """Draws ``text`` over the previous one (``\\r``), throttled (module doc).

    ``clock`` gives monotonic seconds (tests pass their own); :attr:`elapsed` counts
    from the line's creation.
    """

    def __init__(
        self,
        enabled: bool,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self._clock = clock
        self._started = clock()
        self._last: float | None = None
        self._width = 0
        self._shown = False

    @property
    def elapsed(self) -> float:
        return self._clock() - self._started

    def due(self) -> bool:
        """Whether a redraw now would be shown (enabled, not drawn in the last 0.25 s)."""
        now = self._clock()
        return self.enabled and (self._last is None or now - self._last >= _REDRAW)

    def draw(self, text: str, *, last: bool = False) -> None:
        """Show ``text`` if :meth:`due`, or (``last``: the final state) if enabled."""
        if not (self.due() or (last and self.enabled)):
            return
        self._last = self._clock()
        pad = " " * max(self._width - len(text), 0)
        self._width = len(text)
        self.stream.write(f"\r{text}{pad}")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        """End the line (if drawn); the next draw starts a new one."""
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False
            self._width = 0


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


def tiered_words(segments: int, slices: int) -> str:
    """``"12 segments"``, or with batch slices ``"2 segments, 1,024 batch slices"``: what a
    progress or summary line says was committed (a slice is no segment of its own)."""
    said = _counted(segments, "segment")
    return f"{said}, {_counted(slices, 'batch slice')}" if slices else said


def _counted(n: int, noun: str) -> str:
    """``"1 segment"``, ``"1,024 segments"``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


class ProgressLine:
    """The catch-up's :class:`RewrittenLine`: segments and batch slices, messages (of the
    total), MiB tiered, the rate and the ETA (module doc).

    Disabled (the default when stderr is not a TTY) it only counts, so logs stay clean
    and the total is never measured. ``total`` measures the pass's total in messages
    (None: no total, no ETA); ``clock`` gives monotonic seconds (tests pass their own).
    It counts as a tick's report does (:meth:`TickReport.count
    <tieredstore.dispatcher.tiering.tick_report.TickReport.count>`, into :attr:`counts`).
    """

    def __init__(
        self,
        *,
        enabled: bool,
        stream: TextIO | None = None,
        total: Callable[[], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.line = RewrittenLine(enabled, stream, clock)
        #: What was committed so far: segments, batch slices, messages and bytes.
        self.counts = TickReport()
        self._measure_total = total
        self._clock = clock
        self._measured: float | None = None
        self._total: int | None = None

    def measure(self, total: Callable[[], int]) -> None:
        """From now on, give a total and an ETA: ``total()`` is the pass's total."""
        self._measure_total = total

    def update(self, plan: SegmentPlan, sliced: bool) -> None:
        """Count one committed segment (or batch slice: ``sliced``); redraw if enabled and
        due. The sidecar's commit observer
        (:data:`~tieredstore.dispatcher.tiering.rounds.OnCommitted`)."""
        self.add(plan.count, plan.nbytes, sliced=sliced)

    def add(self, messages: int, nbytes: int, *, sliced: bool = False) -> None:
        """Count one committed segment (or batch slice: ``sliced``) of ``messages``
        messages and ``nbytes`` bytes; redraw if enabled and due."""
        self.counts.count(messages, nbytes, sliced=sliced)
        if self.line.due():
            self._measure()
            self.line.draw(self.text())

    def _measure(self) -> None:
        now = self._clock()
        if self._measure_total is None:
            return
        if self._measured is not None and now - self._measured < _REMEASURE:
            return
        self._measured = now
        self._total = max(self._measure_total(), self.counts.messages)

    def text(self) -> str:
        """The progress line as of now."""
        counts, elapsed = self.counts, max(self.line.elapsed, 1e-9)
        done, rate = human_bytes(counts.bytes), human_rate(counts.bytes / elapsed)
        tiered = tiered_words(counts.segments, counts.slices)
        if self._total is None:
            return f"tiered {tiered}, {counts.messages:,} messages, {done} ({rate})"
        pct = 100 * counts.messages // max(self._total, 1)
        return (
            f"tiered {tiered}, {counts.messages:,}/{self._total:,} messages "
            f"({pct} %), {done} ({rate}), {eta(counts.messages, self._total, elapsed)}"
        )

    def close(self) -> None:
        """End the progress line (if one was drawn); the next update starts a new one.

        Also called before every log line (:func:`tieredstore.logs.before_each_line`),
        so a log line never continues the progress line.
        """
        self.line.close()
