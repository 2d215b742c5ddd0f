"""``report.html``: one self-contained page (inline CSS and SVG, no script, no CDN).

Sections: the verdict and run parameters, totals, a table of queues each with a coverage
bar, and the anomaly list. A coverage bar spans the queue's offsets from the lowest to
the highest offset either side knows::

    grey   hot, not in scope (hot offsets below the first segment)
    teal   cold only (tiered, since deleted from hot)
    green  in cold and in hot (verified)
    amber  lag (untiered, within the allowance)
    red    an anomaly's range (drawn last, at least 2 px wide)

Everything shown comes from the ``report.json`` document, so the two never disagree.
"""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import Any, Final

from verifier.result import VerificationResult

__all__ = ["MAX_ANOMALY_ROWS", "render_html"]

#: The page lists at most this many anomalies; the rest are in anomalies.parquet.
MAX_ANOMALY_ROWS: Final = 2000
_BAR_W: Final = 480
_BAR_H: Final = 14
_COLOURS: Final = {
    "not_in_scope": "#d0d0d0",
    "cold_only": "#7fc8c0",
    "verified": "#4caf50",
    "lag": "#f0b400",
    "anomaly": "#d32f2f",
}
_VERDICT_COLOURS: Final = {"CLEAN": "#2e7d32", "DIRTY": "#b26a00", "CORRUPT": "#c62828"}

_CSS: Final = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
.verdict { display: inline-block; padding: .25em .8em; color: #fff; border-radius: 4px;
           font-weight: bold; }
table { border-collapse: collapse; margin-top: .5em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; font-size: .9em;
         vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.status-corrupt { color: #c62828; font-weight: bold; }
.status-dirty { color: #b26a00; font-weight: bold; }
.legend span { display: inline-block; margin-right: 1em; font-size: .85em; }
.legend i { display: inline-block; width: 1em; height: .8em; margin-right: .3em;
            vertical-align: middle; }
code { font-size: .85em; word-break: break-all; }
td.range { white-space: nowrap; }
"""


def _e(value: object) -> str:
    return escape("" if value is None else str(value))


def _time(ms: int | None) -> str:
    if ms is None:
        return ""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="seconds")


def _rect(x0: float, x1: float, colour: str, title: str, *, min_w: float = 0.0) -> str:
    w = max(x1 - x0, min_w)
    return (
        f'<rect x="{x0:.2f}" y="0" width="{w:.2f}" height="{_BAR_H}" fill="{colour}">'
        f"<title>{_e(title)}</title></rect>"
    )


def _bar(q: dict[str, Any], anomalies: list[dict[str, Any]]) -> str:
    hot, cold = q["hot"], q["cold"]
    points = [r[k] for r in (hot, cold) if r for k in ("min", "max")]
    points += [a[k] for a in anomalies for k in ("start", "end") if a[k] is not None]
    if not points or max(points) <= min(points):
        return f'<svg width="{_BAR_W}" height="{_BAR_H}" role="img"></svg>'
    lo, hi = min(points), max(points)

    def x(offset: int) -> float:
        return float((offset - lo) * _BAR_W / (hi - lo))

    parts = []
    if hot:
        parts.append(_rect(x(hot["min"]), x(hot["max"]), _COLOURS["not_in_scope"],
                           f"hot [{hot['min']}, {hot['max']})"))  # fmt: skip
    if cold:
        if hot:
            split = min(max(hot["min"], cold["min"]), cold["max"])
            parts.append(_rect(x(cold["min"]), x(split), _COLOURS["cold_only"],
                               f"cold only [{cold['min']}, {split})"))  # fmt: skip
            end = min(cold["max"], hot["max"])
            parts.append(_rect(x(split), x(max(end, split)), _COLOURS["verified"],
                               f"verified [{split}, {max(end, split)})"))  # fmt: skip
        else:
            parts.append(_rect(x(cold["min"]), x(cold["max"]), _COLOURS["cold_only"],
                               f"cold only [{cold['min']}, {cold['max']})"))  # fmt: skip
    if hot and q["lag"]["messages"]:
        tail = hot["max"] - q["lag"]["messages"]
        parts.append(_rect(x(tail), x(hot["max"]), _COLOURS["lag"],
                           f"lag [{tail}, {hot['max']})"))  # fmt: skip
    for a in anomalies:
        if a["start"] is not None and a["end"] is not None:
            parts.append(_rect(x(a["start"]), x(a["end"]), _COLOURS["anomaly"],
                               f"{a['anomaly']} [{a['start']}, {a['end']})", min_w=2))  # fmt: skip
    return (
        f'<svg width="{_BAR_W}" height="{_BAR_H}" role="img" '
        f'aria-label="coverage of {_e(q["topic"])}/{q["queue_id"]}">'
        f'<rect width="{_BAR_W}" height="{_BAR_H}" fill="#f7f7f7"/>{"".join(parts)}</svg>'
    )


def _range(r: dict[str, Any] | None, lo: str = "min", hi: str = "max") -> str:
    return "" if r is None else f"[{r[lo]}, {r[hi]})"


def _queues_table(doc: dict[str, Any]) -> str:
    by_queue: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for a in doc["anomalies"]:
        by_queue.setdefault((a["topic"], a["queue_id"]), []).append(a)
    rows = []
    for q in doc["queues"]:
        lag = q["lag"]
        seconds = "" if lag["seconds"] is None else f" ({lag['seconds']:.1f} s)"
        rows.append(
            "<tr>"
            f"<td>{_e(q['topic'])}</td><td class=num>{q['queue_id']}</td>"
            f'<td class="status-{_e(q["status"])}">{_e(q["status"])}</td>'
            f"<td class=range>{_range(q['hot'])}</td><td class=range>{_range(q['cold'])}</td>"
            f"<td class=num>{q['segments']}</td>"
            f"<td class=num>{lag['messages']}{seconds}</td>"
            f"<td class=num>{q['cold_only']}</td><td class=num>{q['anomalies']}</td>"
            f"<td>{_bar(q, by_queue.get((q['topic'], q['queue_id']), []))}</td>"
            "</tr>"
        )
    head = (
        "<tr><th>topic</th><th>queue</th><th>status</th><th>hot</th><th>cold</th>"
        "<th>segments</th><th>lag</th><th>cold only</th><th>anomalies</th>"
        "<th>coverage</th></tr>"
    )
    legend = "".join(
        f'<span><i style="background:{c}"></i>{_e(name.replace("_", " "))}</span>'
        for name, c in _COLOURS.items()
    )
    return f'<p class="legend">{legend}</p><table id="queues">{head}{"".join(rows)}</table>'


def _anomalies_table(doc: dict[str, Any]) -> str:
    anomalies = doc["anomalies"]
    if not anomalies:
        return '<p id="no-anomalies">No anomalies.</p>'
    rows = [
        "<tr>"
        f"<td>{_e(a['anomaly'])}</td><td>{_e(a['severity'])}</td>"
        f"<td>{_e(a['topic'])}</td><td class=num>{_e(a['queue_id'])}</td>"
        f"<td class=range>{_range(a, 'start', 'end') if a['start'] is not None else ''}</td>"
        f"<td class=num>{_e(a['count'])}</td>"
        f"<td><code>{_e(a['object_key'])}</code></td><td>{_e(a['detail'])}</td>"
        "</tr>"
        for a in anomalies[:MAX_ANOMALY_ROWS]
    ]
    more = len(anomalies) - MAX_ANOMALY_ROWS
    note = f"<p>{more} more anomalies in anomalies.parquet.</p>" if more > 0 else ""
    head = (
        "<tr><th>anomaly</th><th>severity</th><th>topic</th><th>queue</th><th>offsets</th>"
        "<th>count</th><th>object</th><th>detail</th></tr>"
    )
    return f'<table id="anomalies">{head}{"".join(rows)}</table>{note}'


def _kv_table(table_id: str, items: dict[str, Any]) -> str:
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in items.items())
    return f'<table id="{table_id}">{rows}</table>'


def render_html(result: VerificationResult, doc: dict[str, Any]) -> str:
    """Render the report page for ``result`` (``doc`` is its report.json document)."""
    params = doc["parameters"]
    verdict = doc["verdict"]
    shown = dict(params)
    allowance = shown.pop("lag_allowance")
    shown["lag_allowance"] = f"{allowance['value']:g} {allowance['unit']}"
    shown["reference_ts (checkpoint)"] = _time(doc["reference_ts"])
    shown["started"] = _time(doc["started_ms"])
    shown["duration_s"] = f"{(doc['finished_ms'] - doc['started_ms']) / 1000:.1f}"
    counts = ", ".join(f"{k} {v}" for k, v in doc["anomaly_counts"].items() if v)
    title = f"tieredstore verification: {params['cluster']}/{params['broker']}"
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{_CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1>"
        f'<p><span class="verdict" id="verdict" style="background:'
        f'{_VERDICT_COLOURS[verdict]}">{_e(verdict)}</span> exit code {doc["exit_code"]}; '
        f"{len(result.anomalies)} anomalies{_e(f' ({counts})') if counts else ''}</p>"
        "<h2>Run</h2>"
        f"{_kv_table('parameters', shown)}"
        "<h2>Totals</h2>"
        f"{_kv_table('totals', doc['totals'])}"
        "<h2>Queues</h2>"
        f"{_queues_table(doc)}"
        "<h2>Anomalies</h2>"
        f"{_anomalies_table(doc)}"
        "</body></html>\n"
    )
