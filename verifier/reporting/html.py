"""``report.html``: one self-contained page (inline CSS and SVG, no script, no CDN).

Sections: the verdict and run parameters (times in ISO-8601 UTC), totals, one summary
row per topic, a table of queues each with a coverage bar, and the anomaly list.

The page reads at 1280 px whatever the names and numbers: the wide tables take the
page's width, a long value (path, URL, object key, detail, offset range) wraps anywhere,
and a topic name (up to 127 characters in RocketMQ) is shortened to one line with an
ellipsis in the middle (long names often share a prefix) and shown whole on hover (its
``title``). A coverage bar scales to its column and spans the queue's offsets from the
lowest to the highest offset either side knows::

    grey   hot, not in scope (hot offsets below the first segment)
    teal   cold only (tiered, since deleted from hot)
    green  in cold and in hot (verified)
    amber  lag (untiered, within the allowance) — never under an anomaly: hot data that
           should be tiered and is not (``hot_not_covered``) is red, not lag
    red    an anomaly's range (drawn last, at least 2 px wide)

A queue's status cell names its anomaly classes on hover (``title``). Corrupt topics and
queues come first, then dirty ones, then the rest (by name): what needs a look is at the
top. Rows are labelled in words (``orphan grace``, ``corrupt manifests``), not by their
report.json names.

Everything shown comes from the ``report.json`` document, so the two never disagree.
"""

from __future__ import annotations

import os
from html import escape
from typing import Any, Final

from tieredstore.humanize import human_bytes, human_seconds, iso_time, shorten_middle
from tieredstore.verifier.outcome import VerificationResult
from tieredstore.verifier.verdict import Verdict, colour_of, rank_of

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

_CSS: Final = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; overflow-wrap: anywhere; } h2 { font-size: 1.15em; margin-top: 1.6em; }
.verdict { display: inline-block; padding: .25em .8em; color: #fff; border-radius: 4px;
           font-weight: bold; }
table { border-collapse: collapse; margin-top: .5em; max-width: 100%; }
table.grid { width: 100%; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; font-size: .9em;
         vertical-align: top; overflow-wrap: break-word; }
td.wrap { overflow-wrap: anywhere; }
td.range { white-space: nowrap; font-variant-numeric: tabular-nums; }
td.span { overflow-wrap: normal; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.nowrap { white-space: nowrap; }
td.name span { display: block; max-width: 18em; overflow: hidden; text-overflow: ellipsis;
               white-space: nowrap; }
.legend span { display: inline-block; margin-right: 1em; font-size: .85em; }
.legend i { display: inline-block; width: 1em; height: .8em; margin-right: .3em;
            vertical-align: middle; }
code { font-size: 1em; font-family: ui-monospace, monospace; word-break: break-all; }
svg.bar { width: 100%; min-width: 10em; height: 14px; display: block; }
""" + "".join(
    f".status-{v.value.lower()} {{ color: {v.colour}; font-weight: bold; }}\n"
    for v in Verdict
    if v is not Verdict.CLEAN
)
#: Names longer than this many characters are shortened in the middle.
_NAME_CHARS: Final = 28


def _e(value: object) -> str:
    return escape("" if value is None else str(value))


def short_name(text: str) -> str:
    """``text`` if it fits a name column, else its head and tail around an ellipsis:
    long topic names often share a prefix, so the end is kept too."""
    return shorten_middle(text, _NAME_CHARS)


def _name(text: str) -> str:
    """A cell for a (possibly 127-character) name: one line, shortened in the middle
    (and cut by CSS should even that not fit), the full name on hover."""
    return f'<td class="name"><span title="{_e(text)}">{_e(short_name(text))}</span></td>'


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
        return f'<svg class="bar" viewBox="0 0 {_BAR_W} {_BAR_H}" role="img"></svg>'
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
        # Only what is within the allowance is lag: untiered data past it is an anomaly.
        owed = [a["end"] for a in anomalies if a["anomaly"] == "hot_not_covered"]
        tail = max([hot["max"] - q["lag"]["messages"], *owed])
        if tail < hot["max"]:
            parts.append(_rect(x(tail), x(hot["max"]), _COLOURS["lag"],
                               f"lag [{tail}, {hot['max']})"))  # fmt: skip
    for a in anomalies:
        if a["start"] is not None and a["end"] is not None:
            parts.append(_rect(x(a["start"]), x(a["end"]), _COLOURS["anomaly"],
                               f"{a['anomaly']} [{a['start']}, {a['end']})", min_w=2))  # fmt: skip
    return (
        f'<svg class="bar" viewBox="0 0 {_BAR_W} {_BAR_H}" preserveAspectRatio="none" '
        f'role="img" '
        f'aria-label="coverage of {_e(q["topic"])}/{q["queue_id"]}">'
        f'<rect width="{_BAR_W}" height="{_BAR_H}" fill="#f7f7f7"/>{"".join(parts)}</svg>'
    )


def _range(r: dict[str, Any] | None, lo: str = "min", hi: str = "max") -> str:
    return "" if r is None else f"[{r[lo]}, {r[hi]})"


def _range_td(text: str) -> str:
    """A range cell that never wraps inside ``[0, 4936)``; a very long range may break
    at its space only (each offset stays whole), so the table still fits 1280 px."""
    return f"<td class=range>{text}</td>" if len(text) <= 18 else f"<td class=span>{text}</td>"


def _lag(messages: int, seconds: float | None) -> str:
    """``228 (1.5 s)``. A negative age (the oldest message is stamped after the
    checkpoint the lag is measured against: clocks apart) reads as 0, never ``-614 ms``."""
    age = human_seconds(None if seconds is None else max(seconds, 0.0))
    return f"{messages} ({age})" if age else str(messages)


def _lag_td(text: str) -> str:
    """A lag cell: a short one (``228 (0 ms)``) never wraps; a long one may."""
    return (
        f'<td class="num nowrap">{text}</td>' if len(text) <= 14 else f"<td class=num>{text}</td>"
    )


def _worst_first(anomalies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(
        anomalies,
        key=lambda a: (
            -rank_of(str(a["severity"])),
            a["topic"] or "", a["queue_id"] if a["queue_id"] is not None else -1,
            a["start"] if a["start"] is not None else -1,
        ),
    )  # fmt: skip


def _reads_bytes(doc: dict[str, Any]) -> bool:
    """Only the content level reads (and so verifies) message bytes."""
    return str(doc["parameters"].get("level")) != "offsets"


#: The row labels of the Run and Totals tables (report.json's names as a reader says
#: them); a name not listed reads with spaces for underscores.
_LABELS: Final = {
    "hot": "hot store",
    "cold": "cold store",
    "lag_allowance": "lag allowance",
    "orphan_grace_s": "orphan grace",
    "catalogue": "catalogue (drift checked)",
    "queues": "queues",
    "segments": "segments",
    "corrupt_manifests": "corrupt manifests",
    "objects": "cold objects",
    "unrecognised_objects": "unrecognised objects",
    "pending_objects": "pending objects (commits in flight)",
    "units_compared": "consume-queue units compared",
    "bytes_compared": "bytes verified",
    "cold_only": "cold-only messages",
    "lag_messages": "untiered messages (lag)",
}


def _label(name: str) -> str:
    return _LABELS.get(name, name.replace("_", " "))


def _totals(doc: dict[str, Any]) -> dict[str, str]:
    """The totals in the units of the tables beside them; bytes only where read."""
    shown: dict[str, str] = {}
    for name, value in doc["totals"].items():
        if "bytes" in name:
            if not _reads_bytes(doc):
                continue
            shown[_label(name)] = human_bytes(int(value))
        else:
            shown[_label(name)] = f"{value:,}" if isinstance(value, int) else str(value)
    return shown


def _worst_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows that need a look first: corrupt, then dirty, then the rest in name order."""
    return sorted(rows, key=lambda r: -rank_of(str(r["status"])))


def _topics_table(doc: dict[str, Any]) -> str:
    read = _reads_bytes(doc)  # offsets level: no "bytes verified" column (it reads none)
    rows = []
    for t in _worst_rows(doc["topics"]):
        statuses = ", ".join(f"{n} {s}" for s, n in t["statuses"].items())
        rows.append(
            "<tr>"
            f"{_name(t['topic'])}<td class=num>{t['queues']}</td>"
            f'<td class="status-{_e(t["status"])}" title="{_e(statuses)}">'
            f"{_e(t['status'])}</td>"
            f"<td class=num>{t['segments']}</td><td class=num>{t['cold_messages']}</td>"
            f"<td class=num>{_e(human_bytes(t['cold_bytes']))}</td>"
            f"<td class=num>{_e(_lag(t['lag_messages'], t['max_lag_seconds']))}</td>"
            + (f"<td class=num>{_e(human_bytes(t['bytes_compared']))}</td>" if read else "")
            + f"<td class=num>{t['cold_only']}</td><td class=num>{t['anomalies']}</td>"
            "</tr>"
        )
    head = (
        "<tr><th>topic</th><th>queues</th><th>status</th><th>segments</th>"
        "<th>cold messages</th><th>cold bytes</th><th>lag (oldest)</th>"
        + ("<th>bytes verified</th>" if read else "")
        + "<th>cold only</th><th>anomalies</th></tr>"
    )
    return f'<table id="topics" class="grid">{head}{"".join(rows)}</table>'


def _queues_table(doc: dict[str, Any]) -> str:
    by_queue: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for a in doc["anomalies"]:
        by_queue.setdefault((a["topic"], a["queue_id"]), []).append(a)
    rows = []
    for q in _worst_rows(doc["queues"]):
        lag = q["lag"]
        found = by_queue.get((q["topic"], q["queue_id"]), [])
        rule = (q.get("tiering") or {}).get("rule") or ""
        classes = ", ".join(sorted({a["anomaly"] for a in found})) or rule
        rows.append(
            "<tr>"
            f"{_name(q['topic'])}<td class=num>{q['queue_id']}</td>"
            f'<td class="status-{_e(q["status"])}" title="{_e(classes)}">'
            f"{_e(q['status'])}</td>"
            f"{_range_td(_range(q['hot']))}{_range_td(_range(q['cold']))}"
            f"<td class=num>{q['segments']}</td>"
            f"{_lag_td(_e(_lag(lag['messages'], lag['seconds'])))}"
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
    table = f'<table id="queues" class="grid">{head}{"".join(rows)}</table>'
    return f'<p class="legend">{legend}</p>{table}'


def _anomalies_table(doc: dict[str, Any]) -> str:
    anomalies = doc["anomalies"]
    if not anomalies:
        return '<p id="no-anomalies">No anomalies.</p>'
    rows = [
        "<tr>"
        f"<td>{_e(a['anomaly'])}</td><td>{_e(a['severity'])}</td>"
        f"{_name(a['topic'])}<td class=num>{_e(a['queue_id'])}</td>"
        f"{_range_td(_range(a, 'start', 'end') if a['start'] is not None else '')}"
        f"<td class=num>{_e(a['count'])}</td>"
        f"<td><code>{_e(a['object_key'])}</code></td><td class=wrap>{_e(a['detail'])}</td>"
        "</tr>"
        for a in _worst_first(anomalies)[:MAX_ANOMALY_ROWS]
    ]
    more = len(anomalies) - MAX_ANOMALY_ROWS
    note = f"<p>{more} more anomalies in anomalies.parquet.</p>" if more > 0 else ""
    head = (
        "<tr><th>anomaly</th><th>severity</th><th>topic</th><th>queue</th><th>offsets</th>"
        "<th>count</th><th>object</th><th>detail</th></tr>"
    )
    return f'<table id="anomalies" class="grid">{head}{"".join(rows)}</table>{note}'


def _kv_table(table_id: str, items: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><th>{_e(k)}</th><td class=wrap>{_e(v)}</td></tr>" for k, v in items.items()
    )
    return f'<table id="{table_id}">{rows}</table>'


def _run_parameters(doc: dict[str, Any]) -> dict[str, Any]:
    """The parameters as a reader wants them: labelled in words, times in ISO-8601 UTC
    (not epoch ms), local paths absolute, the orphan grace as a duration.

    The lag reference is the verifier's clock at the start of the run (report.json's
    ``reference_ts``, docs/verification.md), never the broker's checkpoint.
    """
    shown = dict(doc["parameters"])
    for key in ("hot", "cold", "out", "catalogue"):  # local paths as absolute: no guessing
        value = shown.get(key)
        if isinstance(value, str) and value and "://" not in value:
            shown[key] = os.path.abspath(value)
    if shown.get("catalogue") is None:
        shown["catalogue"] = "not checked (no --state-dir)"
    allowance = shown.pop("lag_allowance")
    unit = str(allowance["unit"])
    shown["lag_allowance"] = (
        human_seconds(float(allowance["value"]))
        if unit == "seconds"
        else f"{allowance['value']:g} {unit}"
    )
    grace = shown.get("orphan_grace_s")
    if isinstance(grace, int | float):
        shown["orphan_grace_s"] = human_seconds(float(grace))
    shown = {_label(k): v for k, v in shown.items() if k != "now_ms"}
    shown["now (orphan grace reference)"] = iso_time(doc["parameters"]["now_ms"])
    shown["lag reference (verifier's clock at the start)"] = iso_time(doc["reference_ts"])
    shown["started"] = iso_time(doc["started_ms"])
    shown["finished"] = iso_time(doc["finished_ms"])
    shown["duration"] = human_seconds((doc["finished_ms"] - doc["started_ms"]) / 1000)
    return shown


def _incomplete(doc: dict[str, Any]) -> str:
    """Why the verdict is INCOMPLETE (a fleet run's broker), or nothing."""
    why = doc.get("incomplete")
    notes = "".join(f'<p class="note">Note: {_e(n)}.</p>' for n in doc.get("notes", []))
    return (f'<p id="incomplete">Not proven: {_e(why)}.</p>' if why else "") + notes


def render_html(
    result: VerificationResult, doc: dict[str, Any], *, history_href: str | None = None
) -> str:
    """Render the report page for ``result`` (``doc`` is its report.json document);
    ``history_href`` adds a link to the history page."""
    params = doc["parameters"]
    verdict = doc["verdict"]
    counts = ", ".join(f"{k} {v}" for k, v in doc["anomaly_counts"].items() if v)
    title = f"tieredstore verification: {params['cluster']}/{params['broker']}"
    history = f' <a href="{_e(history_href)}">history</a>' if history_href else ""
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f"<style>{_CSS}</style></head><body>"
        f"<h1>{_e(title)}</h1>"
        f'<p><span class="verdict" id="verdict" style="background:'
        f'{colour_of(verdict)}">{_e(verdict)}</span> exit code {doc["exit_code"]}; '
        f"{len(result.anomalies)} anomalies{_e(f' ({counts})') if counts else ''}; "
        f"finished {_e(iso_time(doc['finished_ms']))}{history}</p>"
        f"{_incomplete(doc)}"
        "<h2>Run</h2>"
        f"{_kv_table('parameters', _run_parameters(doc))}"
        "<h2>Totals</h2>"
        f"{_kv_table('totals', _totals(doc))}"
        "<h2>Topics</h2>"
        f"{_topics_table(doc)}"
        "<h2>Queues</h2>"
        f"{_queues_table(doc)}"
        "<h2>Anomalies</h2>"
        f"{_anomalies_table(doc)}"
        "</body></html>\n"
    )
