"""The verdict for Prometheus: a node-exporter textfile-collector file (``verify.prom``).

node_exporter's textfile collector (``--collector.textfile.directory``) exports every
``*.prom`` file in one directory; a pushgateway accepts the same text. Each run writes
the file next to its report and, with ``--metrics-file PATH``, to ``PATH`` too (point it
into the collector's directory). The file is written to a temporary name and renamed, so
a scrape never sees half of it.

Every series has the labels ``cluster``, ``broker`` and ``level`` (offsets, content):

==================================================  =====================================
metric                                              value
==================================================  =====================================
``tieredstore_verify_last_run_timestamp_seconds``   when the run finished (epoch seconds)
``tieredstore_verify_duration_seconds``             how long it took
``tieredstore_verify_verdict{verdict}``             1 for the run's verdict, 0 for each
                                                    other one (:mod:`tieredstore.verifier.verdict`)
``tieredstore_verify_exit_code``                    the verdict's exit code
``tieredstore_verify_bytes_verified``               hot bytes compared with cold
``tieredstore_verify_units_verified``               consume-queue units compared
``tieredstore_verify_cold_bytes``                   commit-log bytes in committed segments
``tieredstore_verify_queues``                       queues seen (hot or cold)
``tieredstore_verify_segments``                     committed segments
``tieredstore_verify_lag_messages``                 untiered hot messages (all queues)
``tieredstore_verify_max_lag_seconds``              the oldest untiered message's age
``tieredstore_verify_anomalies{anomaly}``           anomalies of each class (0 included)
==================================================  =====================================

A run that could not produce a verdict (exit 3) writes nothing: the previous file stays,
and its timestamp grows old — which is what the "verification too old" alert watches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from tieredstore.verifier.outcome import VerificationResult
from tieredstore.verifier.verdict import Verdict
from tieredstore.verifier.vocabulary import VERIFIER_KINDS

__all__ = ["METRICS_FILE_NAME", "verify_registry", "write_metrics_file"]

#: The file written next to the report (``--out``).
METRICS_FILE_NAME = "verify.prom"

_LABELS = ("cluster", "broker", "level")
_EXIT_HELP = ", ".join(
    f"{v.exit_code} {v.value}" for v in sorted(Verdict, key=lambda v: v.exit_code)
)


_SERIES: Final = (
    ("tieredstore_verify_last_run_timestamp_seconds", "When the last verification finished"),
    ("tieredstore_verify_duration_seconds", "How long the last verification took"),
    ("tieredstore_verify_exit_code", _EXIT_HELP),
    ("tieredstore_verify_bytes_verified", "Hot bytes compared with cold"),
    ("tieredstore_verify_units_verified", "Consume-queue units compared with cold"),
    ("tieredstore_verify_cold_bytes", "Commit-log bytes in committed segments"),
    ("tieredstore_verify_queues", "Queues seen, hot or cold"),
    ("tieredstore_verify_segments", "Committed segments"),
    ("tieredstore_verify_lag_messages", "Untiered hot messages"),
    ("tieredstore_verify_max_lag_seconds", "Age of the oldest untiered hot message"),
)


def _values(result: VerificationResult) -> tuple[float, ...]:
    """The run's value of each of :data:`_SERIES`, in that order."""
    totals = result.totals
    lags = [q.lag_seconds for q in result.queues if q.lag_seconds is not None]
    return (
        result.finished_ms / 1000,
        (result.finished_ms - result.started_ms) / 1000,
        result.verdict.exit_code,
        totals.bytes_compared,
        totals.units_compared,
        sum(q.cold_bytes for q in result.queues),
        totals.queues,
        totals.segments,
        totals.lag_messages,
        max(lags, default=0.0),
    )


def verify_registry(*results: VerificationResult) -> CollectorRegistry:
    """The runs' metrics (see the module doc) in a registry of their own: one series
    per metric and broker (a fleet run has one result per broker)."""
    registry = CollectorRegistry()
    gauges = [Gauge(name, doc, _LABELS, registry=registry) for name, doc in _SERIES]
    verdict = Gauge(
        "tieredstore_verify_verdict",
        "1 for the last verification's verdict",
        (*_LABELS, "verdict"),
        registry=registry,
    )
    anomalies = Gauge(
        "tieredstore_verify_anomalies",
        "Anomalies of each class found by the last verification",
        (*_LABELS, "anomaly"),
        registry=registry,
    )
    for result in results:
        opts = result.options
        labels = (opts.cluster, opts.broker, opts.level.value)
        for gauge, value in zip(gauges, _values(result), strict=True):
            gauge.labels(*labels).set(value)
        for v in Verdict:
            verdict.labels(*labels, v.value).set(1 if v is result.verdict else 0)
        counts = result.counts()
        for cls in VERIFIER_KINDS:
            anomalies.labels(*labels, cls.value).set(counts[cls])
    return registry


def write_metrics_file(result: VerificationResult, path: Path) -> Path:
    """Write the run's metrics to ``path`` atomically (its directory must exist)."""
    write_to_textfile(str(path), verify_registry(result))
    return path
