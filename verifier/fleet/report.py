"""The fleet run's reports: one folder per broker, one page and one metrics file for all.

``--out`` receives:

* ``<cluster>/<broker>/`` — each broker's own report
  (:func:`tieredstore.verifier.reporting.report.write_reports`:
  ``report.json``, ``anomalies.parquet``, ``report.html``, ``verify.prom``); its
  ``parameters.hot`` names the fingerprint the broker was checked against;
* ``fleet.json`` — the fleet's verdict and one entry per broker, worst first::

      {"format_version": 1, "verdict", "exit_code", "started_ms", "finished_ms",
       "parameters": {"cold", "clusters", "lag_allowance", "max_fingerprint_age_s", "now_ms"},
       "workers": [...], "brokers": [{"cluster", "broker", "verdict", "exit_code",
       "incomplete", "notes", "fingerprint", "fingerprint_taken_ms", "queues", "anomalies",
       "anomaly_counts", "bytes_verified", "report"}]}

* ``fleet.html`` — one row per broker, worst first, linking to each broker's page;
* ``verify.prom`` — every broker's series (labels ``cluster``, ``broker``, ``level``:
  the metrics of :mod:`tieredstore.verifier.reporting.metrics_file`) and the fleet's own:
  ``tieredstore_verify_fleet_last_run_timestamp_seconds``,
  ``tieredstore_verify_fleet_exit_code`` and ``tieredstore_verify_fleet_brokers{verdict}``.

Every file is written to a temporary name and renamed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from tieredstore.humanize import human_bytes, iso_time
from tieredstore.verifier.fleet.job import FleetResult
from tieredstore.verifier.outcome import VerificationResult
from tieredstore.verifier.reporting.metrics_file import METRICS_FILE_NAME, verify_registry
from tieredstore.verifier.reporting.report import write_reports
from tieredstore.verifier.verdict import Verdict

__all__ = ["FleetPaths", "fleet_document", "fleet_registry", "write_fleet_reports"]

FLEET_FORMAT_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class FleetPaths:
    json: Path
    html: Path
    metrics: Path


def _href(r: VerificationResult) -> str:
    return f"{quote(r.options.cluster)}/{quote(r.options.broker)}/report.html"


def _broker_doc(r: VerificationResult) -> dict[str, Any]:
    counts = {k.value: n for k, n in r.counts().items() if n}
    fingerprint = str(r.options.hot) if r.reference_ts is not None else None
    return {
        "cluster": r.options.cluster,
        "broker": r.options.broker,
        "verdict": r.verdict.value,
        "exit_code": r.verdict.exit_code,
        "incomplete": r.incomplete,
        "notes": list(r.notes),
        "fingerprint": fingerprint,
        "fingerprint_taken_ms": r.reference_ts,
        "queues": r.totals.queues,
        "anomalies": len(r.anomalies),
        "anomaly_counts": counts,
        "bytes_verified": r.totals.bytes_compared,
        "report": _href(r),
    }


def fleet_document(result: FleetResult) -> dict[str, Any]:
    """The ``fleet.json`` document (module doc)."""
    opts = result.options
    return {
        "format_version": FLEET_FORMAT_VERSION,
        "verdict": result.verdict.value,
        "exit_code": result.verdict.exit_code,
        "started_ms": result.started_ms,
        "finished_ms": result.finished_ms,
        "parameters": {
            "cold": re.sub(r"//[^/@]*@", "//***@", opts.cold_url),
            "clusters": list(opts.clusters) or None,
            "lag_allowance": {
                "unit": opts.lag_allowance.unit.value,
                "value": opts.lag_allowance.value,
            },
            "max_fingerprint_age_s": opts.max_fingerprint_age_s,
            "now_ms": opts.now_ms,
        },
        "workers": list(result.workers),
        "brokers": [_broker_doc(r) for r in result.brokers],
    }


_CSS: Final = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; }
table { border-collapse: collapse; margin-top: .5em; width: 100%; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; font-size: .9em;
         overflow-wrap: anywhere; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.verdict { color: #fff; font-weight: bold; border-radius: 3px; padding: 0 .4em; }
"""


def _e(value: object) -> str:
    return escape("" if value is None else str(value))


def _badge(verdict: str) -> str:
    colour = Verdict(verdict).colour
    return f'<span class="verdict" style="background:{colour}">{_e(verdict)}</span>'


def _why(b: dict[str, Any]) -> str:
    if b["incomplete"]:
        return str(b["incomplete"])
    return ", ".join(f"{k} {n}" for k, n in b["anomaly_counts"].items())


def _row(b: dict[str, Any], now_ms: int) -> str:
    taken = b["fingerprint_taken_ms"]
    age = f"{(now_ms - taken) / 3_600_000:.1f} h" if taken is not None else "none"
    return (
        f"<tr><td>{_badge(b['verdict'])}</td><td>{_e(b['cluster'])}</td>"
        f'<td><a href="{_e(b["report"])}">{_e(b["broker"])}</a></td>'
        f"<td>{_e(_why(b))}</td><td class=num>{_e(age)}</td>"
        f"<td class=num>{b['queues']}</td><td class=num>{_e(human_bytes(b['bytes_verified']))}</td>"
        f"<td class=num>{b['anomalies']}</td></tr>"
    )


def render_fleet_html(doc: dict[str, Any]) -> str:
    """``fleet.html``: the fleet's verdict and one row per broker, worst first."""
    now = doc["parameters"]["now_ms"]
    head = (
        "<tr><th>verdict</th><th>cluster</th><th>broker</th><th>why</th>"
        "<th>fingerprint age</th><th>queues</th><th>bytes verified</th><th>anomalies</th></tr>"
    )
    rows = "".join(_row(b, now) for b in doc["brokers"])
    title = f"tieredstore fleet verification: {len(doc['brokers'])} brokers"
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{_CSS}</style></head><body><h1>{_e(title)}</h1>"
        f'<p id="verdict">{_badge(doc["verdict"])} exit code {doc["exit_code"]}; finished '
        f"{_e(iso_time(doc['finished_ms']))}; cold {_e(doc['parameters']['cold'])}; "
        f"{len(doc['workers'])} task location(s)</p>"
        f'<table id="brokers">{head}{rows}</table></body></html>\n'
    )


def fleet_registry(result: FleetResult) -> CollectorRegistry:
    registry = verify_registry(*result.brokers)
    Gauge(
        "tieredstore_verify_fleet_last_run_timestamp_seconds",
        "When the last fleet verification finished",
        registry=registry,
    ).set(result.finished_ms / 1000)
    Gauge(
        "tieredstore_verify_fleet_exit_code",
        "The last fleet verification's exit code (its worst broker's)",
        registry=registry,
    ).set(result.verdict.exit_code)
    brokers = Gauge(
        "tieredstore_verify_fleet_brokers",
        "Brokers of each verdict in the last fleet verification",
        ("verdict",),
        registry=registry,
    )
    for v in Verdict:
        brokers.labels(v.value).set(sum(1 for r in result.brokers if r.verdict is v))
    return registry


def write_fleet_reports(
    result: FleetResult, out: Path, *, metrics_file: Path | None = None
) -> FleetPaths:
    """Write every broker's report and the fleet's three files into ``out``, and the
    metrics to ``metrics_file`` too when given (a node-exporter textfile collector's)."""
    out.mkdir(parents=True, exist_ok=True)
    for r in result.brokers:
        write_reports(r, out / r.options.cluster / r.options.broker)
    doc = fleet_document(result)
    paths = FleetPaths(out / "fleet.json", out / "fleet.html", out / METRICS_FILE_NAME)
    _atomic_write(paths.json, json.dumps(doc, indent=2) + "\n")
    _atomic_write(paths.html, render_fleet_html(doc))
    registry = fleet_registry(result)
    write_to_textfile(str(paths.metrics), registry)
    if metrics_file is not None:
        write_to_textfile(str(metrics_file), registry)
    return paths


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
