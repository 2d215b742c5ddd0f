"""The three report files: report.json, anomalies.parquet and a self-contained report.html.

The page is checked with ``html.parser``: it parses, has the verdict, one coverage bar per
queue, one row per anomaly, escapes what it shows, and loads nothing from anywhere (no
script, no external URL). Where headless Chromium is installed (Debian package
``chromium``), one more test renders it.
"""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tieredstore.hotstore import QueueKey
from verifier.model import AnomalyClass, Level, VerifyOptions
from verifier.report import anomalies_table, report_document, write_reports
from verifier.result import Anomaly, QueueReport, Totals, VerificationResult

from .conftest import World


class _Page(HTMLParser):
    """Collects what the assertions need from a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.ids: dict[str, str] = {}
        self.table_rows: dict[str, int] = {}
        self.urls: list[str] = []
        self.text: list[str] = []
        self._table: str | None = None
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        a = dict(attrs)
        self.urls += [v for k, v in a.items() if k in ("src", "href") and v]
        if tag == "table" and a.get("id"):
            self._table = a["id"]
            self.table_rows[self._table or ""] = 0
        if tag == "tr" and self._table:
            self.table_rows[self._table] += 1
        if a.get("id"):
            self._in = a["id"]

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in is not None and data.strip():
            self.ids.setdefault(self._in, data.strip())


def _page(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


@pytest.mark.spark
def test_reports_of_a_damaged_store(world: World) -> None:
    q = QueueKey("SynthTopic0", 1)
    m = world.manifests(q)[2]
    for key in (m.key, m.commit_log_key, m.consume_queue_key):
        world.path(key).unlink()
    code, doc = world.verify()
    assert code == 2

    assert doc["format_version"] == 1 and doc["verdict"] == "CORRUPT" and doc["exit_code"] == 2
    assert doc["anomaly_counts"]["gap"] == 1 and sum(doc["anomaly_counts"].values()) == 1
    assert {a["anomaly"] for a in doc["anomalies"]} == {"gap"}
    statuses = {(r["topic"], r["queue_id"]): r["status"] for r in doc["queues"]}
    assert statuses[(q.topic, q.queue_id)] == "corrupt"
    assert sorted(set(statuses.values())) == ["corrupt", "ok"]
    assert doc["parameters"]["lag_allowance"] == {"unit": "messages", "value": 0.0}

    table = pq.read_table(world.out / "anomalies.parquet")
    assert table.num_rows == 1
    row = table.to_pylist()[0]
    assert (row["anomaly"], row["start_offset"], row["end_offset"]) == (
        "gap",
        m.start_offset,
        m.end_offset,
    )

    page = _page(world.out / "report.html")
    assert page.ids["verdict"] == "CORRUPT"
    assert page.table_rows["queues"] == 1 + len(doc["queues"])
    assert page.table_rows["anomalies"] == 1 + 1
    assert page.tags.count("svg") == len(doc["queues"])
    assert "script" not in page.tags and page.urls == []
    assert f"[{m.start_offset}, {m.end_offset})" in "".join(page.text)


def _result(tmp_path: Path, anomalies: list[Anomaly]) -> VerificationResult:
    opts = VerifyOptions(
        hot=tmp_path,
        cold_url="s3://user:secret@bucket/prefix",
        cluster="C",
        broker="B",
        now_ms=1_700_000_000_000,
        level=Level.CONTENT,
    )
    queue = QueueReport(
        topic="T<&>",
        queue_id=0,
        hot_present=True,
        hot_min=0,
        hot_max=100,
        cold_min=0,
        cold_max=90,
        segments=3,
        cold_messages=90,
        cold_bytes=9000,
        lag_messages=10,
        lag_seconds=1.5,
        units_compared=90,
        bytes_compared=9000,
        cold_only=0,
        pending_objects=0,
    )
    totals = Totals(1, 3, 0, 9, 0, 0, 90, 9000, 0, 10)
    return VerificationResult(
        opts, (queue,), tuple(anomalies), totals, (), 1_700_000_000_000, 0, 10
    )


def test_html_escapes_what_it_shows_and_json_redacts_credentials(tmp_path: Path) -> None:
    nasty = Anomaly(
        topic="T<&>",
        queue_id=0,
        start=None,
        anomaly=AnomalyClass.ORPHAN_OBJECT,
        end=None,
        count=None,
        object_key="a/<script>alert(1)</script>",
        detail='"quoted" & <b>bold</b>',
    )
    paths = write_reports(_result(tmp_path, [nasty]), tmp_path / "out")
    page = _page(paths.html)
    assert "script" not in page.tags and "b" not in page.tags
    text = "".join(page.text)
    assert "a/<script>alert(1)</script>" in text and '"quoted" & <b>bold</b>' in text
    doc = report_document(_result(tmp_path, [nasty]))
    assert doc["parameters"]["cold"] == "s3://***@bucket/prefix"
    assert doc["verdict"] == "DIRTY" and doc["queues"][0]["status"] == "dirty"
    assert doc["queues"][0]["lag"] == {"messages": 10, "seconds": 1.5}


def test_a_clean_result_says_so_everywhere(tmp_path: Path) -> None:
    paths = write_reports(_result(tmp_path, []), tmp_path / "out")
    page = _page(paths.html)
    assert page.ids["verdict"] == "CLEAN"
    assert page.ids["no-anomalies"] == "No anomalies."
    assert pq.read_table(paths.parquet).num_rows == 0
    assert anomalies_table(_result(tmp_path, [])).schema.names[0] == "anomaly"


def _anomaly(i: int) -> Anomaly:
    return Anomaly("T<&>", 0, i, AnomalyClass.GAP, i + 1, 1, None, "x")


def test_the_page_lists_a_bounded_number_of_anomalies(tmp_path: Path) -> None:
    from verifier.report_html import MAX_ANOMALY_ROWS

    many: list[Any] = [_anomaly(i) for i in range(MAX_ANOMALY_ROWS + 5)]
    paths = write_reports(_result(tmp_path, many), tmp_path / "out")
    page = _page(paths.html)
    assert page.table_rows["anomalies"] == 1 + MAX_ANOMALY_ROWS
    assert "5 more anomalies in anomalies.parquet." in "".join(page.text)
    assert pq.read_table(paths.parquet).num_rows == MAX_ANOMALY_ROWS + 5


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed")
def test_the_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    paths = write_reports(_result(tmp_path, [_anomaly(3)]), tmp_path / "out")
    browser = [str(_chromium()), "--headless", "--no-sandbox", "--disable-gpu"]
    url = paths.html.resolve().as_uri()
    dom = subprocess.run(
        [*browser, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert 'id="verdict"' in dom and "CORRUPT" in dom and dom.count("<svg") == 1
    shot = tmp_path / "page.png"
    subprocess.run(
        [*browser, f"--screenshot={shot}", "--window-size=1200,900", url],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
