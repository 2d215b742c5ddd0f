"""One rewritten stderr line for the long commands (``restore``, ``export``).

Every progress line says sizes in binary units (:mod:`tieredstore.humanize`), redraws at
most four times a second, pads over what a longer line left, and is ended before any
log line (the caller hooks :meth:`RewrittenLine.close` into
:func:`tieredstore.logs.before_each_line`). ``--progress auto`` draws only on a TTY.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Final, TextIO

from tieredstore.humanize import human_seconds

__all__ = ["RewrittenLine", "add_progress_argument", "eta", "progress_enabled"]

_REDRAW: Final = 0.25


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
