"""Ctrl-C and SIGTERM during a verification: stop Spark's jobs, say so in one line.

PySpark replaces the SIGINT handler when its context starts (to cancel jobs and raise
KeyboardInterrupt); the cancelled job then surfaces as a ``Py4JError`` ("An error
occurred while calling ...") that reads like a failure of the verifier, and py4j logs
the broken calls with their tracebacks. :class:`StopOnSignal` records which signal
arrived, so the caller reports an interruption (exit 128 + the signal) whatever
exception the stop produced, and silences py4j's logger once a stop is under way.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from types import FrameType
from typing import Any, Protocol

__all__ = ["StopOnSignal"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _Context(Protocol):
    def cancelAllJobs(self) -> None: ...  # noqa: N802 (PySpark's name)


class StopOnSignal:
    """A context manager: while active, SIGINT/SIGTERM cancel Spark's jobs (once a
    context is :meth:`watch`-ed) and raise KeyboardInterrupt; :attr:`signal` says which
    arrived (None: none did). The previous handlers are restored on exit."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self._context: _Context | None = None
        self._deferred = False
        self._previous: dict[signal.Signals, Any] = {}

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():  # else: not ours to set
            self._previous = {s: signal.getsignal(s) for s in _SIGNALS}
            self._arm()
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def defer(self) -> None:
        """Until :meth:`watch`, only note a signal: interrupting PySpark while it starts
        its JVM can leave the process waiting on the half-made gateway."""
        self._deferred = True

    def watch(self, context: _Context) -> None:
        """Cancel this SparkContext's jobs on a stop (and take SIGINT back from PySpark);
        a signal noted while Spark started stops the run now."""
        self._context = context
        self._deferred = False
        self._arm()
        if self.signal is not None:
            self._stop()

    def _arm(self) -> None:
        if not self._previous:  # entered off the main thread: signals stay as they are
            return
        for sig in _SIGNALS:
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        first = self.signal is None
        self.signal = self.signal or signal.Signals(signum)
        if self._deferred:
            return
        if first:
            self._stop()
        raise KeyboardInterrupt

    def _stop(self) -> None:
        # The calls that the stop breaks are not news: keep their tracebacks quiet.
        logging.getLogger("py4j").setLevel(logging.CRITICAL + 1)
        if self._context is not None:
            with contextlib.suppress(Exception):  # the JVM may already be going away
                self._context.cancelAllJobs()
        raise KeyboardInterrupt

    def exit_code(self) -> int:
        """128 + the signal that stopped the run."""
        return 128 + int(self.signal or signal.SIGINT)
