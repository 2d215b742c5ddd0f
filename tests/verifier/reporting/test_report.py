"""The three report files: report.json, anomalies.parquet and a self-contained report.html.

The page is checked with ``html.parser``: it parses, has the verdict, one summary row per
topic, one coverage bar per queue, one row per anomaly, escapes what it shows, shows
times in ISO-8601 UTC, and loads nothing from anywhere (no script, no external URL).
Where headless Chromium is installed (Debian package ``chromium``; ``.ci/run`` installs
it), it renders the page, and a page full of 127-character topic names, 10-digit offsets
and long paths must not be wider than a 1280 px window.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.support.verification.browser import browser_command, chromium, layout
from tieredstore.findings import FindingKind
from tieredstore.hot.store import QueueKey
from tieredstore.verifier.outcome import Anomaly, VerificationResult
from tieredstore.verifier.reporting.report import anomalies_table, report_document, write_reports

from ..conftest import World, sample_result


class _Page(HTMLParser):
    """Collects what the assertions need from a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.ids: dict[str, str] = {}
        self.table_rows: dict[str, int] = {}
        self.urls: list[str] = []
        self.titles: list[str] = []
        self.text: list[str] = []
        self._table: str | None = None
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        a = dict(attrs)
        self.urls += [v for k, v in a.items() if k in ("src", "href") and v]
        self.titles += [v for k, v in a.items() if k == "title" and v]
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
    topics = {t["topic"]: t for t in doc["topics"]}
    assert page.table_rows["topics"] == 1 + len(topics) == 1 + 3
    assert topics[q.topic]["status"] == "corrupt" and topics[q.topic]["anomalies"] == 1
    assert topics[q.topic]["statuses"] == {"corrupt": 1, "ok": 1}
    assert sum(t["segments"] for t in topics.values()) == doc["totals"]["segments"]
    assert (world.out / "verify.prom").is_file()


def test_html_escapes_what_it_shows_and_json_redacts_credentials(tmp_path: Path) -> None:
    nasty = Anomaly(
        topic="T<&>",
        queue_id=0,
        start=None,
        anomaly=FindingKind.ORPHAN_OBJECT,
        end=None,
        count=None,
        object_key="a/<script>alert(1)</script>",
        detail='"quoted" & <b>bold</b>',
    )
    paths = write_reports(sample_result(tmp_path, [nasty]), tmp_path / "out")
    page = _page(paths.html)
    assert "script" not in page.tags and "b" not in page.tags
    text = "".join(page.text)
    assert "a/<script>alert(1)</script>" in text and '"quoted" & <b>bold</b>' in text
    doc = report_document(sample_result(tmp_path, [nasty]))
    assert doc["parameters"]["cold"] == "s3://***@bucket/prefix"
    assert doc["verdict"] == "DIRTY" and doc["queues"][0]["status"] == "dirty"
    assert doc["queues"][0]["lag"] == {"messages": 10, "seconds": 1.5}


def test_a_clean_result_says_so_everywhere(tmp_path: Path) -> None:
    paths = write_reports(sample_result(tmp_path, []), tmp_path / "out")
    page = _page(paths.html)
    assert page.ids["verdict"] == "CLEAN"
    assert page.ids["no-anomalies"] == "No anomalies."
    assert pq.read_table(paths.parquet).num_rows == 0
    assert anomalies_table(sample_result(tmp_path, [])).schema.names[0] == "anomaly"


def _anomaly(i: int) -> Anomaly:
    return Anomaly("T<&>", 0, i, FindingKind.GAP, i + 1, 1, None, "x")


@pytest.mark.slow
def test_the_page_lists_a_bounded_number_of_anomalies(tmp_path: Path) -> None:
    from tieredstore.verifier.reporting.html import MAX_ANOMALY_ROWS

    many: list[Any] = [_anomaly(i) for i in range(MAX_ANOMALY_ROWS + 5)]
    paths = write_reports(sample_result(tmp_path, many), tmp_path / "out")
    page = _page(paths.html)
    assert page.table_rows["anomalies"] == 1 + MAX_ANOMALY_ROWS
    assert "5 more anomalies in anomalies.parquet." in "".join(page.text)
    assert pq.read_table(paths.parquet).num_rows == MAX_ANOMALY_ROWS + 5


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None, reason="headless Chromium is not installed")
def test_the_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    paths = write_reports(sample_result(tmp_path, [_anomaly(3)]), tmp_path / "out")
    browser = browser_command(tmp_path)
    url = paths.html.resolve().as_uri()
    dom = subprocess.run(
        [*browser, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert 'id="verdict"' in dom and "CORRUPT" in dom and dom.count("<svg") == 1
    shot = tmp_path / "page.png"
    subprocess.run(
        [*browser, f"--screenshot={shot}", "--window-size=1280,900", url],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


LONG_TOPIC = "Orders.eu-west-1." + "x" * 99 + ".partition7"  # 127 characters


def test_times_are_iso_8601_utc_and_long_names_are_shortened_with_the_full_name_on_hover(
    tmp_path: Path,
) -> None:
    assert len(LONG_TOPIC) == 127
    result = sample_result(tmp_path, [])
    queue = replace(result.queues[0], topic=LONG_TOPIC, lag_seconds=3725.0)
    paths = write_reports(replace(result, queues=(queue,)), tmp_path / "out")
    page = _page(paths.html)
    text = "".join(page.text)
    assert "1700000000000" not in text  # no raw epoch milliseconds anywhere
    assert "2023-11-14T22:13:20Z" in text  # now, checkpoint and start, in UTC
    assert "1 h 02 m" in text  # the lag's age, not 3725.0
    assert text.count(LONG_TOPIC) == 0  # shortened in every table ...
    assert page.titles.count(LONG_TOPIC) == 2  # ... and whole on hover (topics, queues)
    assert text.count("Orders.eu-west-1.x…artition7") == 2  # head … tail


def test_topic_summaries_aggregate_the_queues_worst_status_first() -> None:
    from tieredstore.verifier.reporting.report import topic_summaries

    def q(topic: str, status: str, lag_s: float | None, anomalies: int) -> dict[str, Any]:
        return {
            "topic": topic, "status": status, "segments": 2, "cold_messages": 10,
            "cold_bytes": 100, "lag": {"messages": 3, "seconds": lag_s},
            "bytes_compared": 50, "cold_only": 1, "anomalies": anomalies,
        }  # fmt: skip

    rows = topic_summaries(
        [
            q("B", "ok", None, 0),
            q("A", "ok", 2.0, 0),
            q("A", "dirty", 5.0, 1),
            q("A", "ok", None, 0),
        ]
    )
    assert [r["topic"] for r in rows] == ["A", "B"]
    a, b = rows
    assert a["status"] == "dirty" and a["statuses"] == {"dirty": 1, "ok": 2}
    assert (a["queues"], a["segments"], a["lag_messages"], a["max_lag_seconds"]) == (3, 6, 9, 5.0)
    assert (a["anomalies"], a["cold_bytes"], a["bytes_compared"]) == (1, 300, 150)
    assert b["status"] == "ok" and b["max_lag_seconds"] is None


def _wide_result(tmp_path: Path) -> VerificationResult:
    """The widest page a real run can make: 127-character names everywhere, 10-digit
    offsets, long paths and object keys, an anomaly with a long detail."""
    base = sample_result(tmp_path, [])
    opts = replace(
        base.options,
        hot=tmp_path / ("store-" + "d" * 120),
        cold_url="s3://bucket/" + "p" * 200,
        cluster="C" * 127,
        broker="B" * 127,
    )
    queues = tuple(
        replace(
            base.queues[0],
            topic=LONG_TOPIC[:-1] + str(t),
            queue_id=q,
            hot_min=1_000_000_000,
            hot_max=9_999_999_999,
            cold_min=0,
            cold_max=9_999_999_000,
            segments=123_456,
            cold_bytes=123_456_789_012_345,
            lag_messages=999_999,
            lag_seconds=86_400.0 * 30,
            cold_only=1_000_000_000,
        )
        for t in range(3)
        for q in range(16)
    )
    bad = Anomaly(
        LONG_TOPIC[:-1] + "0", 0, 5_000_000_000, FindingKind.CONTENT_MISMATCH,
        5_000_000_100, 100, "k/" + "o" * 300, "detail " + "y" * 400,
    )  # fmt: skip
    return replace(base, options=opts, queues=queues, anomalies=(bad,))


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None, reason="headless Chromium is not installed")
def test_the_widest_page_fits_1280_px_and_the_probe_sees_overflow(tmp_path: Path) -> None:
    paths = write_reports(_wide_result(tmp_path), tmp_path / "out")
    measured = layout(paths.html, 1280, tmp_path)
    assert measured.client_width >= 1200  # the window really was 1280 px wide
    assert set(measured.tables) == {"parameters", "totals", "topics", "queues", "anomalies"}
    assert not measured.overflows, measured
    # The same probe on a page that is too wide says so: the check can fail.
    wide = tmp_path / "wide.html"
    wide.write_text('<!DOCTYPE html><html><body><table id="t"><tr><td>'
                    f'{"W" * 400}</td></tr></table></body></html>')  # fmt: skip
    assert layout(wide, 1280, tmp_path).overflows
