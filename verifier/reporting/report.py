"""Report writers: ``report.json``, ``anomalies.parquet`` and ``report.html``.

``report.json`` (format version 1) is the machine-readable verdict::

    {"format_version": 1, "verdict": "CLEAN|DIRTY|INCOMPLETE|CORRUPT", "exit_code"
     (tieredstore.verifier.verdict), "incomplete": what could not be proven (a fleet run) | null,
     "notes": [what the run noticed that decides no verdict, e.g. a future-dated
     fingerprint],
     "parameters": {...}, "reference_ts": <the verifier's clock at the start (epoch ms)>,
     "totals": {...}, "anomaly_counts": {"gap": 0, ...},
     "topics": [{"topic", "queues", "status", "statuses": {status: count}, "segments",
                 "cold_messages", "cold_bytes", "lag_messages", "max_lag_seconds",
                 "bytes_compared", "cold_only", "anomalies"}],
     "queues": [{"topic", "queue_id", "status", "hot": {"min", "max"} | null,
                 "cold": {"min", "max"} | null, "init_offset" (the init record's),
                 "required_start", "required_because", "required_end" (null: the hot
                 max; set when the topic is excluded now after being tiered),
                 "tiering": {"tiered", "rule"},
                 "scope": {"start", "end"},
                 "segments", "lag": {"messages", "seconds"}, "cold_only", ...}],
     "anomalies": [{"anomaly", "severity", "topic", "queue_id", "start", "end", "count",
                    "object_key", "detail"}],
     "unrecognised_objects": [...]}

Queue ``status``: ``corrupt`` / ``dirty`` (it has anomalies of that severity), ``ok``,
``untiered`` (hot only: nothing of it in cold, all of it within the lag allowance),
``excluded`` (hot only, its topic excluded by the recorded topic rules, named in
``tiering.rule``) or ``cold_only`` (the broker has no such queue any more). A topic's
``status`` is the worst of its queues' (in that order: corrupt, dirty, untiered,
excluded, cold_only, ok). ``anomalies.parquet`` holds the same anomaly
rows (ANOMALIES schema). ``verify.prom`` is the verdict for Prometheus
(:mod:`tieredstore.verifier.reporting.metrics_file`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq

from tieredstore.verifier import schemas
from tieredstore.verifier.outcome import Anomaly, QueueReport, VerificationResult
from tieredstore.verifier.reporting.html import render_html
from tieredstore.verifier.reporting.metrics_file import METRICS_FILE_NAME, write_metrics_file
from tieredstore.verifier.verdict import Verdict, verdict_of

__all__ = [
    "REPORT_FORMAT_VERSION",
    "ReportPaths",
    "anomalies_table",
    "queue_status",
    "report_document",
    "topic_summaries",
    "write_reports",
]

REPORT_FORMAT_VERSION: Final = 1
#: Queue statuses, worst first: a topic shows the worst of its queues'.
STATUS_ORDER: Final = ("corrupt", "dirty", "untiered", "excluded", "cold_only", "ok")


@dataclass(frozen=True, slots=True)
class ReportPaths:
    """Where :func:`write_reports` put the four files."""

    json: Path
    parquet: Path
    html: Path
    metrics: Path


def _redact(url: str) -> str:
    return re.sub(r"//[^/@]*@", "//***@", url)


def queue_status(q: QueueReport, anomalies: list[Anomaly]) -> str:
    """``corrupt`` / ``dirty`` / ``ok`` / ``untiered`` / ``excluded`` / ``cold_only``
    (module doc)."""
    verdict = verdict_of(a.anomaly for a in anomalies)
    if verdict is not Verdict.CLEAN:
        return str(verdict.value).lower()
    if q.cold_min is None:
        return "untiered" if q.tiered else "excluded"
    if not q.hot_present:
        return "cold_only"
    return "ok"


def _anomaly_doc(a: Anomaly) -> dict[str, Any]:
    return {
        "anomaly": a.anomaly.value,
        "severity": a.anomaly.severity.value,
        "topic": a.topic,
        "queue_id": a.queue_id,
        "start": a.start,
        "end": a.end,
        "count": a.count,
        "object_key": a.object_key,
        "detail": a.detail,
    }


def _queue_doc(q: QueueReport, anomalies: list[Anomaly]) -> dict[str, Any]:
    scope = q.scope
    return {
        "topic": q.topic,
        "queue_id": q.queue_id,
        "status": queue_status(q, anomalies),
        "hot": {"min": q.hot_min, "max": q.hot_max} if q.hot_present else None,
        "cold": {"min": q.cold_min, "max": q.cold_max} if q.cold_min is not None else None,
        "init_offset": q.init_offset,
        "required_start": q.required_start,
        "required_because": q.required_because,
        "required_end": q.required_end,
        "tiering": {"tiered": q.tiered, "rule": q.tiering_rule},
        "scope": {"start": scope[0], "end": scope[1]} if scope else None,
        "segments": q.segments,
        "cold_messages": q.cold_messages,
        "cold_bytes": q.cold_bytes,
        "lag": {"messages": q.lag_messages, "seconds": q.lag_seconds},
        "units_compared": q.units_compared,
        "bytes_compared": q.bytes_compared,
        "cold_only": q.cold_only,
        "pending_objects": q.pending_objects,
        "anomalies": len(anomalies),
    }


def by_queue(result: VerificationResult) -> dict[tuple[str, int], list[Anomaly]]:
    """The anomalies of each (topic, queue id)."""
    out: dict[tuple[str, int], list[Anomaly]] = {}
    for a in result.anomalies:
        out.setdefault((a.topic, a.queue_id), []).append(a)
    return out


def topic_summaries(queues: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One summary per topic of report.json's ``queues`` entries, in topic order."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for q in queues:
        grouped.setdefault(q["topic"], []).append(q)
    out = []
    for topic in sorted(grouped):
        qs = grouped[topic]
        statuses = Counter(q["status"] for q in qs)
        lags = [q["lag"]["seconds"] for q in qs if q["lag"]["seconds"] is not None]
        out.append(
            {
                "topic": topic,
                "queues": len(qs),
                "status": next(s for s in STATUS_ORDER if statuses[s]),
                "statuses": {s: statuses[s] for s in STATUS_ORDER if statuses[s]},
                "segments": sum(q["segments"] for q in qs),
                "cold_messages": sum(q["cold_messages"] for q in qs),
                "cold_bytes": sum(q["cold_bytes"] for q in qs),
                "lag_messages": sum(q["lag"]["messages"] for q in qs),
                "max_lag_seconds": max(lags) if lags else None,
                "bytes_compared": sum(q["bytes_compared"] for q in qs),
                "cold_only": sum(q["cold_only"] for q in qs),
                "anomalies": sum(q["anomalies"] for q in qs),
            }
        )
    return out


def report_document(result: VerificationResult) -> dict[str, Any]:
    """The ``report.json`` document (see the module doc)."""
    opts = result.options
    per_queue = by_queue(result)
    queues = [_queue_doc(q, per_queue.get((q.topic, q.queue_id), [])) for q in result.queues]
    return {
        "format_version": REPORT_FORMAT_VERSION,
        "verdict": result.verdict.value,
        "exit_code": result.verdict.exit_code,
        "incomplete": result.incomplete,
        "notes": list(result.notes),
        "started_ms": result.started_ms,
        "finished_ms": result.finished_ms,
        "parameters": {
            "hot": str(opts.hot),
            "cold": _redact(opts.cold_url),
            "cluster": opts.cluster,
            "broker": opts.broker,
            "level": opts.level.value,
            "lag_allowance": {
                "unit": opts.lag_allowance.unit.value,
                "value": opts.lag_allowance.value,
            },
            "orphan_grace_s": opts.orphan_grace_s,
            "catalogue": str(opts.metadata_dir.resolve()) if opts.metadata_dir else None,
            "now_ms": opts.now_ms,
        },
        "reference_ts": result.reference_ts,
        "totals": {
            name: getattr(result.totals, name) for name in result.totals.__dataclass_fields__
        },
        "anomaly_counts": {c.value: n for c, n in result.counts().items()},
        "severity_counts": dict(
            Counter(a.anomaly.severity.value for a in result.anomalies).most_common()
        ),
        "topics": topic_summaries(queues),
        "queues": queues,
        "anomalies": [_anomaly_doc(a) for a in result.anomalies],
        "unrecognised_objects": list(result.unrecognised),
    }


def anomalies_table(result: VerificationResult) -> pa.Table:
    """The anomalies as an Arrow table with the ANOMALIES schema."""
    rows = [
        {
            "anomaly": a.anomaly.value,
            "severity": a.anomaly.severity.value,
            "topic": a.topic,
            "queue_id": a.queue_id,
            "start_offset": a.start,
            "end_offset": a.end,
            "count": a.count,
            "object_key": a.object_key,
            "detail": a.detail,
        }
        for a in result.anomalies
    ]
    return pa.Table.from_pylist(rows, schema=schemas.arrow_schema(schemas.ANOMALIES))


def write_reports(
    result: VerificationResult, out: Path, *, history_href: str | None = None
) -> ReportPaths:
    """Write the four reports into ``out`` (created if needed); return their paths.

    Each file is written to a temporary name and renamed, so a reader never sees half a
    report. ``history_href`` links the page to a history page.
    """
    out.mkdir(parents=True, exist_ok=True)
    paths = ReportPaths(
        out / "report.json",
        out / "anomalies.parquet",
        out / "report.html",
        out / METRICS_FILE_NAME,
    )
    doc = report_document(result)
    _atomic_write(paths.json, (json.dumps(doc, indent=2) + "\n").encode())
    tmp = paths.parquet.with_name(f".{paths.parquet.name}.tmp")
    pq.write_table(anomalies_table(result), tmp)
    tmp.replace(paths.parquet)
    _atomic_write(paths.html, render_html(result, doc, history_href=history_href).encode())
    write_metrics_file(result, paths.metrics)
    return paths


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
