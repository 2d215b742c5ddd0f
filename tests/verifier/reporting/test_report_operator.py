"""report.html as an operator reads it: human units, absolute paths, worst anomalies
first, a lag that is never negative, ranges that do not wrap, bytes only where the level
reads them; rendered by headless Chromium at 1280 px (``UPDATE_SCREENSHOTS=1`` writes
the screenshot shown in docs/operations.md)."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.verification.browser import browser_command, chromium, layout
from tieredstore.findings import FindingKind
from tieredstore.verifier.outcome import Anomaly, VerificationResult
from tieredstore.verifier.reporting.report import write_reports
from tieredstore.verifier.vocabulary import Level

from ..conftest import sample_result

DOCS = Path(__file__).resolve().parents[3] / "docs" / "screens"


def _operator_result(tmp_path: Path, level: Level = Level.CONTENT) -> VerificationResult:
    base = sample_result(tmp_path, [])
    queue = replace(base.queues[0], topic="Orders", lag_seconds=-0.614, lag_messages=228,
                    hot_min=0, hot_max=4936, cold_max=4708)  # fmt: skip
    anomalies = (
        Anomaly("Orders", 0, None, FindingKind.ORPHAN_OBJECT, None, 1, "k/orphan", "no manifest"),
        Anomaly("Orders", 0, 100, FindingKind.GAP, 120, 20, None, "missing offsets"),
        Anomaly("Orders", 0, 10, FindingKind.DIGEST_MISMATCH, 20, 10, "k/cl", "digest"),
    )
    opts = replace(base.options, hot=Path("relative/store"), level=level)
    totals = replace(base.totals, bytes_compared=38_654_000 if level is Level.CONTENT else 0)
    t0 = base.options.now_ms
    return replace(base, options=opts, queues=(queue,), anomalies=anomalies, totals=totals,
                   started_ms=t0, finished_ms=t0 + 83_400)  # fmt: skip


def _html(tmp_path: Path, level: Level = Level.CONTENT) -> str:
    paths = write_reports(_operator_result(tmp_path, level), tmp_path / f"out-{level.value}")
    return paths.html.read_text()


def test_the_lag_is_never_negative_and_ranges_do_not_wrap(tmp_path: Path) -> None:
    html = _html(tmp_path)
    assert "-614" not in html and '<td class="num nowrap">228 (0 ms)</td>' in html
    assert "<td class=range>[0, 4936)</td>" in html


def test_totals_in_human_units_and_paths_absolute(tmp_path: Path) -> None:
    html = _html(tmp_path)
    totals = html[html.index('<table id="totals">') :]
    totals = totals[: totals.index("</table>")]
    assert "<th>bytes verified</th><td class=wrap>36.9 MiB</td>" in totals
    assert "38654000" not in html
    assert os.path.abspath("relative/store") in html


def test_anomalies_are_listed_worst_first(tmp_path: Path) -> None:
    html = _html(tmp_path)
    table = html[html.index('<table id="anomalies"') :]
    kinds = re.findall(r"<tr><td>(\w+)</td><td>(\w+)</td>", table)
    assert [k for k, _ in kinds] == ["digest_mismatch", "gap", "orphan_object"]


def test_bytes_verified_only_where_the_level_reads_bytes(tmp_path: Path) -> None:
    assert "bytes verified" in _html(tmp_path, Level.CONTENT)
    offsets = _html(tmp_path, Level.OFFSETS)
    assert "bytes verified" not in offsets and "bytes_compared" not in offsets


def _queue_order_result(tmp_path: Path) -> VerificationResult:
    """Five queues: two healthy named first, a dirty one, a corrupt one, a healthy one."""
    base = _operator_result(tmp_path)
    q = replace(base.queues[0], lag_seconds=1.0)
    names = [("Alpha", 0), ("Alpha", 1), ("Beta", 0), ("Gamma", 0), ("Zulu", 0)]
    queues = tuple(replace(q, topic=t, queue_id=i) for t, i in names)
    anomalies = (
        Anomaly("Beta", 0, None, FindingKind.ORPHAN_OBJECT, None, 1, "k/orphan", "no manifest"),
        Anomaly("Gamma", 0, 100, FindingKind.GAP, 120, 20, None, "missing offsets"),
    )
    metadata = Path("relative/state")
    opts = replace(base.options, metadata_dir=metadata)
    return replace(base, options=opts, queues=queues, anomalies=anomalies)


def test_corrupt_then_dirty_queues_and_topics_come_first(tmp_path: Path) -> None:
    html = write_reports(_queue_order_result(tmp_path), tmp_path / "out").html.read_text()
    for table in ("queues", "topics"):
        part = html[html.index(f'<table id="{table}"') :]
        part = part[: part.index("</table>")]
        names = re.findall(r'<td class="name"><span title="(\w+)">', part)
        statuses = re.findall(r'<td class="status-(\w+)"', part)
        assert names[:2] == ["Gamma", "Beta"], (table, names)
        assert statuses[:2] == ["corrupt", "dirty"] and set(statuses[2:]) == {"ok"}
        assert names[2:] == sorted(names[2:])  # the rest by name


def test_rows_are_labelled_in_words_and_the_catalogue_path_is_absolute(tmp_path: Path) -> None:
    html = write_reports(_queue_order_result(tmp_path), tmp_path / "out").html.read_text()
    labels = re.findall(r"<tr><th>([^<]+)</th><td class=wrap>", html)
    assert "orphan grace" in labels and "corrupt manifests" in labels
    assert not [x for x in labels if "_" in x], labels  # no internal names
    assert "reference_ts (checkpoint)" not in html and "checkpoint" not in html
    assert "lag reference (verifier&#x27;s clock at the start)" in labels
    assert f"<td class=wrap>{os.path.abspath('relative/state')}</td>" in html
    doc = (tmp_path / "out" / "report.json").read_text()
    assert f'"catalogue": "{os.path.abspath("relative/state")}"' in doc


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None, reason="headless Chromium is not installed")
def test_the_report_renders_at_1280_px(tmp_path: Path) -> None:
    paths = write_reports(_operator_result(tmp_path), tmp_path / "out")
    assert not layout(paths.html, 1280, tmp_path).overflows
    ordered = write_reports(_queue_order_result(tmp_path), tmp_path / "ordered").html
    dom = subprocess.run(
        [*browser_command(tmp_path), "--window-size=1280,900", "--dump-dom", ordered.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    queues = dom[dom.index('<table id="queues"') :]
    assert re.findall(r'class="status-(\w+)"', queues)[:3] == ["corrupt", "dirty", "ok"]
    assert "orphan grace" in dom and "orphan_grace_s" not in dom
    shot = tmp_path / "report.png"
    subprocess.run(
        [*browser_command(tmp_path), f"--screenshot={shot}", "--window-size=1280,1700",
         "--hide-scrollbars", paths.html.resolve().as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("UPDATE_SCREENSHOTS"):
        DOCS.mkdir(parents=True, exist_ok=True)
        (DOCS / "report.png").write_bytes(shot.read_bytes())
