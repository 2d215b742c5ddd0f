"""``history.html``: the trend over the last runs, when reports are dated folders.

A nightly job that writes each run to its own folder under one root
(``--out /var/tmp/verify/$(date +%F)``) gets, in that root, a page with one row per run
(newest first: when, level, verdict, bytes verified, queues, lag, anomalies, a link to
the run's ``report.html``) and two bar charts (bytes verified, untiered messages), each
bar coloured by its run's verdict, with a value axis, the runs' dates and each bar's
value. The title names the cluster/broker the runs verified; runs of more than one
broker under one root (a shared ``--out`` root) get a broker column and a warning that
their trends are mixed. An offsets-level run reads
no message bytes: it shows "not read (offsets)" (a grey stub in the chart), never
"0 B verified". A run is any direct subfolder holding a readable
``report.json``; runs are ordered by their finish time. A folder whose ``report.json``
does not read is left out (the page says how many). One self-contained page: inline
CSS and SVG, no script.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from tieredstore.humanize import human_bytes, human_seconds, iso_time
from tieredstore.verifier.verdict import Verdict, colour_of

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
#: The charts' drawing box (SVG user units): plot area plus room for the axes' labels.
_CHART_W: Final = 720
_CHART_H: Final = 170
_LEFT: Final = 70  # y-axis labels
_BOTTOM: Final = 40  # date labels
_TOP: Final = 16  # value labels above the bars


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run, as its report.json tells it."""

    folder: str
    finished_ms: int
    cluster: str
    broker: str
    level: str
    verdict: str
    bytes_verified: int
    queues: int
    lag_messages: int
    max_lag_seconds: float | None
    anomalies: int

    @property
    def where(self) -> str:
        """``cluster/broker``: what the run verified."""
        return f"{self.cluster}/{self.broker}"

    @property
    def reads_bytes(self) -> bool:
        """Only the content level reads message bytes: an offsets run verifies none, and
        "0 B verified" would read as "nothing checked"."""
        return self.level != "offsets"

    @classmethod
    def from_report(cls, folder: str, doc: dict[str, Any]) -> RunSummary:
        """Read a report.json document (KeyError/TypeError/ValueError if it is not one)."""
        lags = [q["lag"]["seconds"] for q in doc["queues"] if q["lag"]["seconds"] is not None]
        totals = doc["totals"]
        return cls(
            folder=folder,
            finished_ms=int(doc["finished_ms"]),
            cluster=str(doc["parameters"]["cluster"]),
            broker=str(doc["parameters"]["broker"]),
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
svg.chart { width: 100%; max-width: 720px; height: auto; display: block; }
svg.chart text { font: 11px system-ui, sans-serif; fill: #444; }
svg.chart line { stroke: #999; stroke-width: 1; }
""" + (
    ".warning { background: #fff3e0; border-left: 4px solid "
    f"{Verdict.DIRTY.colour}; padding: .4em .8em; }}\n"
)


def _e(value: object) -> str:
    return escape("" if value is None else str(value))


@dataclass(frozen=True, slots=True)
class _Series:
    """One chart: a value per run (None: not measured in that run), and how to say it."""

    label: str
    values: list[float | None]
    say: Callable[[float], str]
    missing: str  # what a run without a value says on hover (its bar is a grey stub)
    short: str = ""  # ... and over its bar
    mixed: bool = False  # runs of several brokers: each hover names its broker


def _bar(i: int, step: float, run: RunSummary, v: float | None, top: float, s: _Series) -> str:
    plot_h = _CHART_H - _BOTTOM - _TOP
    x = _LEFT + i * step + 1
    w = max(step - 2, 1)
    text = s.missing if v is None else s.say(v)
    label = s.short if v is None else text
    h = 2.0 if v is None else max(v / top * plot_h, 1.0)
    y = _CHART_H - _BOTTOM - h
    colour = "#bbb" if v is None else colour_of(run.verdict)
    hover = f"{iso_time(run.finished_ms)} {run.verdict} ({run.level}): {text}"
    if s.mixed:
        hover = f"{run.where} {hover}"
    bar = (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{colour}">'
        f"<title>{_e(hover)}</title></rect>"
    )
    if step >= 44:  # room to print the value over the bar
        bar += f'<text x="{x + w / 2:.1f}" y="{y - 3:.1f}" text-anchor="middle">{_e(label)}</text>'
    return bar


def _axes(runs: list[RunSummary], step: float, top: float, s: _Series) -> str:
    base = _CHART_H - _BOTTOM
    parts = [
        f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{base}"/>',
        f'<line x1="{_LEFT}" y1="{base}" x2="{_CHART_W}" y2="{base}"/>',
        f'<text x="{_LEFT - 4}" y="{_TOP + 4}" text-anchor="end">{_e(s.say(top))}</text>',
        f'<text x="{_LEFT - 4}" y="{base}" text-anchor="end">0</text>',
    ]
    every = max(1, round(70 / step))  # a date label every ~70 units: they never overlap
    for i, run in enumerate(runs):
        if i % every == 0 or (i == len(runs) - 1 and (len(runs) - 1) % every >= every / 2):
            day = iso_time(run.finished_ms)[:10]
            x = _LEFT + i * step + step / 2
            parts.append(f'<text x="{x:.1f}" y="{base + 14}" text-anchor="middle">{day}</text>')
    parts.append(
        f'<text x="{(_LEFT + _CHART_W) / 2:.0f}" y="{_CHART_H - 6}" text-anchor="middle">'
        f"run finished (UTC date)</text>"
    )
    return "".join(parts)


def _chart(runs: list[RunSummary], s: _Series) -> str:
    """A bar per run (coloured by its verdict), with a value axis, dates and values."""
    top = max((v for v in s.values if v is not None), default=0.0) or 1.0
    step = (_CHART_W - _LEFT) / max(len(runs), 1)
    bars = "".join(
        _bar(i, step, run, v, top, s) for i, (run, v) in enumerate(zip(runs, s.values, strict=True))
    )
    return (
        f'<svg class="chart" viewBox="0 0 {_CHART_W} {_CHART_H}" role="img"'
        f' aria-label="{_e(s.label)}">{_axes(runs, step, top, s)}{bars}</svg>'
    )


_NOT_READ: Final = "not read (offsets)"


def _row(run: RunSummary, *, mixed: bool = False) -> str:
    colour = colour_of(run.verdict)
    href = quote(run.folder) + "/report.html"
    verified = human_bytes(run.bytes_verified) if run.reads_bytes else _NOT_READ
    return (
        "<tr>"
        f"<td>{_e(iso_time(run.finished_ms).replace('T', ' '))}</td>"
        + (f"<td>{_e(run.where)}</td>" if mixed else "")
        + f'<td><a href="{_e(href)}">{_e(run.folder)}</a></td><td>{_e(run.level)}</td>'
        f'<td><span class="verdict" style="background:{colour}">{_e(run.verdict)}</span></td>'
        f"<td class=num>{_e(verified)}</td>"
        f"<td class=num>{run.queues}</td><td class=num>{run.lag_messages}</td>"
        f"<td class=num>{_e(human_seconds(run.max_lag_seconds))}</td>"
        f"<td class=num>{run.anomalies}</td>"
        "</tr>"
    )


def _bytes_series(runs: list[RunSummary], mixed: bool) -> _Series:
    values = [float(r.bytes_verified) if r.reads_bytes else None for r in runs]
    return _Series(
        "bytes verified per run",
        values,
        lambda v: human_bytes(int(v)),
        _NOT_READ,
        "offsets",
        mixed,
    )


def _lag_series(runs: list[RunSummary], mixed: bool) -> _Series:
    values: list[float | None] = [float(r.lag_messages) for r in runs]
    return _Series("untiered messages per run", values, lambda v: f"{int(v):,} msgs", "", "", mixed)


def _mixed_warning(brokers: list[str]) -> str:
    """Runs of several brokers under one root: their numbers do not make one trend."""
    if len(brokers) < 2:
        return ""
    return (
        f'<p id="mixed-brokers" class="warning">Warning: these runs verified '
        f"{len(brokers)} brokers ({_e(', '.join(brokers))}); the charts mix their numbers "
        "into one trend. Give each broker a report root of its own (--out "
        ".../verify/&lt;broker&gt;/$(date +%F)).</p>"
    )


def render_history(runs: list[RunSummary], *, root: Path, unreadable: int = 0) -> str:
    """The history page for ``runs`` (oldest first; the table lists the newest first)."""
    brokers = sorted({r.where for r in runs})
    mixed = len(brokers) > 1
    head = (
        "<tr><th>finished (UTC)</th>"
        + ("<th>broker</th>" if mixed else "")
        + "<th>report</th><th>level</th><th>verdict</th>"
        "<th>bytes verified</th><th>queues</th><th>lag (messages)</th><th>oldest lag</th>"
        "<th>anomalies</th></tr>"
    )
    rows = "".join(_row(r, mixed=mixed) for r in reversed(runs))
    note = (
        f"<p>{unreadable} report folder(s) under this root could not be read.</p>"
        if unreadable
        else ""
    )
    title = f"tieredstore verification history: {', '.join(brokers)}"
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{_CSS}</style></head><body><h1>{_e(title)}</h1>"
        f"<p>The last {len(runs)} runs in {_e(root.resolve())}, from "
        f"{_e(iso_time(runs[0].finished_ms))} "
        f"to {_e(iso_time(runs[-1].finished_ms))}.</p>{_mixed_warning(brokers)}"
        f"<h2>Bytes verified</h2>{_chart(runs, _bytes_series(runs, mixed))}"
        f"<h2>Untiered messages (lag)</h2>{_chart(runs, _lag_series(runs, mixed))}"
        f'<h2>Runs</h2><table id="runs">{head}{rows}</table>{note}'
        "</body></html>\n"
    )
