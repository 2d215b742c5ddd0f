"""``history.html``: the trend over the last runs, when reports are dated folders.

A nightly job that writes each run to its own folder under one root
(``--out /var/tmp/verify/$(date +%F)``) gets, in that root, a page with one row per run
(newest first: when, level, verdict, bytes verified, queues, lag, anomalies, a link to
the run's ``report.html``) and two bar charts (bytes verified, untiered messages), each
bar coloured by its run's verdict. A run is any direct subfolder holding a readable
``report.json``; runs are ordered by their finish time. A folder whose ``report.json``
does not read is left out (the page says how many). One self-contained page: inline
CSS and SVG, no script.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from tieredstore.humanize import human_bytes, human_seconds, iso_time

__all__ = [
    "DEFAULT_HISTORY_RUNS",
    "HISTORY_FILE_NAME",
    "RunSummary",
    "find_runs",
    "history_applies",
    "render_history",
    "write_history",
]

DEFAULT_HISTORY_RUNS: Final = 30
HISTORY_FILE_NAME: Final = "history.html"
_REPORT: Final = "report.json"
_VERDICT_COLOURS: Final = {"CLEAN": "#2e7d32", "DIRTY": "#b26a00", "CORRUPT": "#c62828"}
_CHART_W: Final = 600
_CHART_H: Final = 80


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run, as its report.json tells it."""

    folder: str
    finished_ms: int
    level: str
    verdict: str
    bytes_verified: int
    queues: int
    lag_messages: int
    max_lag_seconds: float | None
    anomalies: int

    @classmethod
    def from_report(cls, folder: str, doc: dict[str, Any]) -> RunSummary:
        """Read a report.json document (KeyError/TypeError/ValueError if it is not one)."""
        lags = [q["lag"]["seconds"] for q in doc["queues"] if q["lag"]["seconds"] is not None]
        totals = doc["totals"]
        return cls(
            folder=folder,
            finished_ms=int(doc["finished_ms"]),
            level=str(doc["parameters"]["level"]),
            verdict=str(doc["verdict"]),
            bytes_verified=int(totals["bytes_compared"]),
            queues=int(totals["queues"]),
            lag_messages=int(totals["lag_messages"]),
            max_lag_seconds=max(lags) if lags else None,
            anomalies=len(doc["anomalies"]),
        )


def _read_run(folder: Path) -> RunSummary | None:
    try:
        doc = json.loads((folder / _REPORT).read_text(encoding="utf-8"))
        return RunSummary.from_report(folder.name, doc)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _run_folders(root: Path) -> list[Path]:
    try:
        children = list(root.iterdir())
    except OSError:
        return []
    return sorted(c for c in children if c.is_dir() and (c / _REPORT).is_file())


def find_runs(root: Path) -> tuple[list[RunSummary], int]:
    """The runs under ``root`` (oldest first) and how many report folders did not read."""
    found = [_read_run(f) for f in _run_folders(root)]
    runs = sorted((r for r in found if r is not None), key=lambda r: (r.finished_ms, r.folder))
    return runs, sum(1 for r in found if r is None)


def history_applies(root: Path, current: Path) -> bool:
    """Whether ``root`` holds a report folder other than ``current``: then the run in
    ``current`` is one of several and gets a history page."""
    return any(f.resolve() != current.resolve() for f in _run_folders(root))


def write_history(root: Path, *, last: int = DEFAULT_HISTORY_RUNS) -> Path | None:
    """Write ``root/history.html`` over the last ``last`` runs if ``root`` holds at least
    two; return its path (None: fewer than two runs, nothing written)."""
    runs, unreadable = find_runs(root)
    if len(runs) < 2:
        return None
    path = root / HISTORY_FILE_NAME
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(render_history(runs[-last:], root=root, unreadable=unreadable), "utf-8")
    tmp.replace(path)
    return path


# -- rendering ------------------------------------------------------------------------

_CSS: Final = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin-top: .5em; width: 100%; table-layout: fixed; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; font-size: .9em;
         overflow-wrap: anywhere; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.verdict { color: #fff; font-weight: bold; border-radius: 3px; padding: 0 .4em; }
svg.chart { width: 100%; max-width: 600px; height: 80px; display: block; }
"""


def _e(value: object) -> str:
    return escape("" if value is None else str(value))


def _chart(runs: list[RunSummary], value: str, label: str) -> str:
    values = [float(getattr(r, value)) for r in runs]
    top = max(values, default=0.0) or 1.0
    step = _CHART_W / max(len(runs), 1)
    bars = []
    for i, (run, v) in enumerate(zip(runs, values, strict=True)):
        h = max(v / top * (_CHART_H - 2), 1.0)
        title = f"{iso_time(run.finished_ms)} {run.verdict}: {v:g}"
        bars.append(
            f'<rect x="{i * step + 1:.1f}" y="{_CHART_H - h:.1f}" width="{max(step - 2, 1):.1f}"'
            f' height="{h:.1f}" fill="{_VERDICT_COLOURS.get(run.verdict, "#777")}">'
            f"<title>{_e(title)}</title></rect>"
        )
    return (
        f'<svg class="chart" viewBox="0 0 {_CHART_W} {_CHART_H}" preserveAspectRatio="none"'
        f' role="img" aria-label="{_e(label)}">{"".join(bars)}</svg>'
    )


def _row(run: RunSummary) -> str:
    colour = _VERDICT_COLOURS.get(run.verdict, "#777")
    href = quote(run.folder) + "/report.html"
    return (
        "<tr>"
        f"<td>{_e(iso_time(run.finished_ms))}</td>"
        f'<td><a href="{_e(href)}">{_e(run.folder)}</a></td><td>{_e(run.level)}</td>'
        f'<td><span class="verdict" style="background:{colour}">{_e(run.verdict)}</span></td>'
        f"<td class=num>{_e(human_bytes(run.bytes_verified))}</td>"
        f"<td class=num>{run.queues}</td><td class=num>{run.lag_messages}</td>"
        f"<td class=num>{_e(human_seconds(run.max_lag_seconds))}</td>"
        f"<td class=num>{run.anomalies}</td>"
        "</tr>"
    )


def render_history(runs: list[RunSummary], *, root: Path, unreadable: int = 0) -> str:
    """The history page for ``runs`` (oldest first; the table lists the newest first)."""
    head = (
        "<tr><th>finished (UTC)</th><th>report</th><th>level</th><th>verdict</th>"
        "<th>bytes verified</th><th>queues</th><th>lag (messages)</th><th>oldest lag</th>"
        "<th>anomalies</th></tr>"
    )
    rows = "".join(_row(r) for r in reversed(runs))
    note = (
        f"<p>{unreadable} report folder(s) under this root could not be read.</p>"
        if unreadable
        else ""
    )
    title = f"tieredstore verification history: {root.name or root}"
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{_CSS}</style></head><body><h1>{_e(title)}</h1>"
        f"<p>The last {len(runs)} runs, from {_e(iso_time(runs[0].finished_ms))} "
        f"to {_e(iso_time(runs[-1].finished_ms))}.</p>"
        f"<h2>Bytes verified</h2>{_chart(runs, 'bytes_verified', 'bytes verified per run')}"
        f"<h2>Untiered messages (lag)</h2>{_chart(runs, 'lag_messages', 'lag per run')}"
        f'<h2>Runs</h2><table id="runs">{head}{rows}</table>{note}'
        "</body></html>\n"
    )
