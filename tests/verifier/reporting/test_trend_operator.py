"""history.html as an operator reads it: a title naming the cluster/broker, charts with
a value axis, dates and values, human hover text, and no "0 B verified" for runs at the
offsets level (which read no bytes); rendered by headless Chromium at 1280 px
(``UPDATE_SCREENSHOTS=1`` writes the screenshot shown in docs/operations.md)."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.verification.browser import browser_command, chromium, layout
from tieredstore.findings import FindingKind
from tieredstore.verifier.outcome import Anomaly
from tieredstore.verifier.reporting.report import write_reports
from tieredstore.verifier.reporting.trend import write_history
from tieredstore.verifier.vocabulary import Level

from ..conftest import history_run

DOCS = Path(__file__).resolve().parents[3] / "docs" / "screens"


def _history(tmp_path: Path) -> Path:
    root = tmp_path / "nightly"
    orphan = Anomaly("T", 0, None, FindingKind.ORPHAN_OBJECT, None, None, "k", "orphan")
    for day in range(8):
        run = history_run(tmp_path, day, [orphan] if day == 5 else [], 100 * day + 3)
        run = replace(run, totals=replace(run.totals, bytes_compared=(day + 30) * 1_288_490))
        if day % 3 == 2:  # a quick offsets-level run between the nightly content runs
            run = replace(run, options=replace(run.options, level=Level.OFFSETS),
                          totals=replace(run.totals, bytes_compared=0))  # fmt: skip
        write_reports(run, root / f"2023-11-{14 + day}")
    page = write_history(root)
    assert page is not None
    return page


def test_title_charts_and_offsets_runs(tmp_path: Path) -> None:
    html = _history(tmp_path).read_text()
    assert "<title>tieredstore verification history: C/B</title>" in html
    assert "0 B" not in html  # offsets runs read no bytes: never "0 B verified"
    assert html.count("not read (offsets)") == 2 + 2  # table cells + chart hovers
    charts = re.findall(r"<svg class=\"chart\".*?</svg>", html)
    assert len(charts) == 2
    for chart in charts:
        assert "2023-11-14" in chart and "2023-11-21" in chart  # dates on the x axis
        assert "run finished (UTC date)" in chart
    assert ">36.9 MiB<" in charts[0]  # the y axis' top: the largest value, in bytes
    assert ">703 msgs<" in charts[1]
    hovers = re.findall(r"<title>([^<]*)</title>", charts[0])
    assert hovers[0] == "2023-11-14T22:13:20Z CLEAN (content): 36.9 MiB"
    assert hovers[2] == "2023-11-16T22:13:20Z CLEAN (offsets): not read (offsets)"
    assert all("e+" not in h for h in hovers)


def _two_brokers(tmp_path: Path) -> Path:
    root = tmp_path / "shared"
    for day in range(4):
        run = history_run(tmp_path, day, [], 10 * day)
        broker = "broker-a" if day % 2 else "broker-b"
        run = replace(run, options=replace(run.options, broker=broker))
        write_reports(run, root / f"2023-11-{14 + day}-{broker}")
    page = write_history(root)
    assert page is not None
    return page


def test_runs_of_two_brokers_get_a_broker_column_and_a_warning(tmp_path: Path) -> None:
    html = _two_brokers(tmp_path).read_text()
    assert '<p id="mixed-brokers" class="warning">Warning: these runs verified 2 brokers' in html
    assert "C/broker-a, C/broker-b" in html
    table = html[html.index('<table id="runs">') :]
    assert "<th>broker</th>" in table
    cells = re.findall(r"<tr><td>[^<]+</td><td>(C/broker-\w)</td>", table)
    assert cells == ["C/broker-a", "C/broker-b", "C/broker-a", "C/broker-b"]  # newest first
    charts = "".join(re.findall(r"<svg class=\"chart\".*?</svg>", html))
    hovers = re.findall(r"<title>([^<]*)</title>", charts)
    assert len(hovers) == 8 and all(h.startswith(("C/broker-a 2", "C/broker-b 2")) for h in hovers)
    one = _history(tmp_path).read_text()  # one broker: as before, no column, no warning
    assert "<th>broker</th>" not in one and "mixed-brokers" not in one


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None, reason="headless Chromium is not installed")
def test_the_history_renders_at_1280_px(tmp_path: Path) -> None:
    page = _history(tmp_path)
    assert not layout(page, 1280, tmp_path).overflows
    mixed = _two_brokers(tmp_path)  # the broker column and the warning fit too
    assert not layout(mixed, 1280, tmp_path).overflows
    dom = subprocess.run(
        [*browser_command(tmp_path), "--window-size=1280,900", "--dump-dom", mixed.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert 'id="mixed-brokers"' in dom and "<th>broker</th>" in dom
    shot = tmp_path / "history.png"
    subprocess.run(
        [*browser_command(tmp_path), f"--screenshot={shot}", "--window-size=1280,1000",
         "--hide-scrollbars", page.resolve().as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("UPDATE_SCREENSHOTS"):
        DOCS.mkdir(parents=True, exist_ok=True)
        (DOCS / "history.png").write_bytes(shot.read_bytes())
