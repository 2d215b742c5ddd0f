"""One INFO line per interval while the sidecar works: what it tiered, its errors, the lag.

A sidecar that commits a thousand segments in ten minutes and logs nothing looks hung;
one line per segment would drown everything else. So every ``log.summary_interval``
(on the injected clock) :func:`log_summaries` compares the tiering counters with the
last line and, when something happened (a segment committed or an error counted),
logs one line (here cut in two)::

    tiered 120 segments, 61,440 messages, 42.0 MiB in the last 1 m 00 s; 0 errors;
    lag 812 messages, oldest 3.2 s

With ``tiering.batching`` on, batch slices are said apart from segments (``tiered 2
segments, 1,024 batch slices, ...``, :func:`~tieredstore.cli.sidecar.progress.tiered_words`).

An idle sidecar stays quiet (its gauges still show it). The numbers come from the
:class:`~tieredstore.dispatcher.metrics.Metrics` the dispatcher already keeps, so the line can never
disagree with ``/metrics``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from prometheus_client.metrics import MetricWrapperBase

from tieredstore.cli.sidecar.progress import tiered_words
from tieredstore.clock import Clock
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.humanize import human_bytes, human_seconds

__all__ = ["Summary", "Totals", "log_summaries"]

log = logging.getLogger("tieredstore.summary")


def _samples(metric: MetricWrapperBase, suffix: str) -> list[float]:
    return [s.value for m in metric.collect() for s in m.samples if s.name.endswith(suffix)]


@dataclass(frozen=True, slots=True)
class Totals:
    """The tiering counters at one moment (since the process started)."""

    segments: float = 0.0  # segments and batch slices (the metric counts both)
    slices: float = 0.0
    messages: float = 0.0
    bytes: float = 0.0
    errors: float = 0.0

    @classmethod
    def read(cls, metrics: Metrics) -> Totals:
        return cls(
            segments=sum(_samples(metrics.segments_tiered, "_total")),
            slices=sum(_samples(metrics.slices_tiered, "_total")),
            messages=sum(_samples(metrics.messages_tiered, "_total")),
            bytes=sum(_samples(metrics.bytes_tiered, "_total")),
            errors=sum(_samples(metrics.errors, "_total")),
        )


class Summary:
    """The difference between the counters now and at the last line."""

    def __init__(self, metrics: Metrics, now_s: float) -> None:
        self.metrics = metrics
        self._last = Totals.read(metrics)
        self._since = now_s

    def line(self, now_s: float) -> str | None:
        """The summary since the last call, or None when nothing was tiered or failed."""
        now = Totals.read(self.metrics)
        last, self._last = self._last, now
        since, self._since = self._since, now_s
        committed, errors = int(now.segments - last.segments), int(now.errors - last.errors)
        if not committed and not errors:
            return None
        slices = int(now.slices - last.slices)
        lag = int(sum(_samples(self.metrics.lag_messages, "lag_messages")))
        oldest = max(_samples(self.metrics.lag_seconds, "lag_seconds"), default=0.0)
        return (
            f"tiered {tiered_words(committed - slices, slices)}, "
            f"{int(now.messages - last.messages):,} messages, "
            f"{human_bytes(int(now.bytes - last.bytes))} in the last "
            f"{human_seconds(now_s - since)}; {errors} errors; lag {lag:,} messages, "
            f"oldest {human_seconds(oldest) or '0 ms'}"
        )


async def log_summaries(metrics: Metrics, clock: Clock, interval: float) -> None:
    """Log :meth:`Summary.line` every ``interval`` seconds on ``clock`` until cancelled."""
    summary = Summary(metrics, clock.now_ms() / 1000)
    while True:
        await clock.sleep(interval)
        text = summary.line(clock.now_ms() / 1000)
        if text is not None:
            log.info("%s", text)
