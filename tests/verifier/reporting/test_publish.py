"""What a run publishes besides its report: the verdict for Prometheus (``verify.prom``,
and ``--metrics-file``) and, among dated report folders, ``history.html``."""

from __future__ import annotations

import json
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tieredstore.findings import FindingKind
from tieredstore.humanize import human_bytes, human_seconds
from tieredstore.verifier.cli import JobArgs, _publish
from tieredstore.verifier.outcome import Anomaly
from tieredstore.verifier.reporting.report import write_reports
from tieredstore.verifier.reporting.trend import find_runs, write_history

from ..conftest import history_run, sample_result


def _samples(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(path.read_text()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _labels(**extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"cluster": "C", "broker": "B", "level": "content", **extra}.items()))


def test_verify_prom_holds_the_verdict_for_the_textfile_collector(tmp_path: Path) -> None:
    gap = Anomaly("T", 0, 5, FindingKind.GAP, 9, 4, None, "gap")
    result = sample_result(tmp_path, [gap])
    paths = write_reports(result, tmp_path / "out")
    samples = _samples(paths.metrics)
    assert samples[("tieredstore_verify_verdict", _labels(verdict="CORRUPT"))] == 1
    assert samples[("tieredstore_verify_verdict", _labels(verdict="CLEAN"))] == 0
    assert samples[("tieredstore_verify_verdict", _labels(verdict="DIRTY"))] == 0
    assert samples[("tieredstore_verify_exit_code", _labels())] == 2
    assert samples[("tieredstore_verify_anomalies", _labels(anomaly="gap"))] == 1
    assert samples[("tieredstore_verify_anomalies", _labels(anomaly="orphan_object"))] == 0
    assert samples[("tieredstore_verify_bytes_verified", _labels())] == 9000
    assert samples[("tieredstore_verify_units_verified", _labels())] == 90
    assert samples[("tieredstore_verify_lag_messages", _labels())] == 10
    assert samples[("tieredstore_verify_max_lag_seconds", _labels())] == 1.5
    assert samples[("tieredstore_verify_last_run_timestamp_seconds", _labels())] == 0.01
    assert samples[("tieredstore_verify_duration_seconds", _labels())] == 0.01
    assert not list(paths.metrics.parent.glob("verify.prom.*"))  # no temporary left over


class _Rows(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.links: list[str] = []
        self.svgs = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        if tag == "svg":
            self.svgs += 1
        if tag == "a":
            self.links.append(dict(attrs)["href"] or "")

    def handle_data(self, data: str) -> None:
        if self.rows and data.strip():
            self.rows[-1].append(data.strip())


def test_history_shows_the_last_runs_newest_first(tmp_path: Path) -> None:
    root = tmp_path / "verify"
    orphan = Anomaly("T", 0, None, FindingKind.ORPHAN_OBJECT, None, None, "k", "orphan")
    gap = Anomaly("T", 0, 1, FindingKind.GAP, 2, 1, None, "gap")
    # Folder names and finish times disagree on purpose: runs are ordered by time.
    for folder, day, found, lag in (
        ("2023-11-16", 2, [gap], 7),
        ("2023-11-14", 0, [], 5),
        ("2023-11-15", 1, [orphan], 6),
    ):
        write_reports(history_run(tmp_path, day, found, lag), root / folder)
    (root / "broken").mkdir()
    (root / "broken" / "report.json").write_text("{not json")
    (root / "notes").mkdir()  # no report.json: not a run

    runs, unreadable = find_runs(root)
    assert [r.folder for r in runs] == ["2023-11-14", "2023-11-15", "2023-11-16"]
    assert unreadable == 1
    page_path = write_history(root, last=2)
    assert page_path == root / "history.html"
    page = _Rows()
    page.feed(page_path.read_text())
    header, *rows = page.rows
    assert header[:4] == ["finished (UTC)", "report", "level", "verdict"]
    assert [r[1] for r in rows] == ["2023-11-16", "2023-11-15"]  # the last 2, newest first
    assert rows[0] == ["2023-11-16 22:13:20Z", "2023-11-16", "content", "CORRUPT",
                       "2.0 MiB", "1", "7", "7.0 s", "1"]  # fmt: skip
    assert rows[1][3] == "DIRTY"
    assert page.links == ["2023-11-16/report.html", "2023-11-15/report.html"]
    assert page.svgs == 2  # bytes verified, lag
    assert "1 report folder(s) under this root could not be read." in page_path.read_text()


def test_a_single_run_gets_no_history_page(tmp_path: Path) -> None:
    write_reports(history_run(tmp_path, 0, [], 0), tmp_path / "verify" / "only")
    assert write_history(tmp_path / "verify") is None
    assert not (tmp_path / "verify" / "history.html").exists()


def test_publish_writes_the_metrics_file_and_links_the_history(tmp_path: Path) -> None:
    root = tmp_path / "verify"
    write_reports(history_run(tmp_path, 0, [], 0), root / "2023-11-14")
    job = JobArgs(
        options=sample_result(tmp_path, []).options,
        out=root / "2023-11-15",
        master=None,
        metrics_file=tmp_path / "textfile" / "tieredstore_verify.prom",
    )
    (tmp_path / "textfile").mkdir()
    paths = _publish(history_run(tmp_path, 1, [], 3), job)
    assert paths.metrics.read_text() == job.metrics_file.read_text() != ""  # type: ignore[union-attr]
    assert '<a href="../history.html">history</a>' in paths.html.read_text()
    assert (root / "history.html").is_file()
    assert json.loads(paths.json.read_text())["totals"]["lag_messages"] == 3
    alone = replace(job, out=tmp_path / "alone" / "run", metrics_file=None)
    lone = _publish(history_run(tmp_path, 2, [], 0), alone)
    assert "history.html" not in lone.html.read_text()
    assert not (tmp_path / "alone" / "history.html").exists()


def test_human_units() -> None:
    assert [human_bytes(n) for n in (0, 1023, 1024, 5 << 30)] == [
        "0 B", "1023 B", "1.0 KiB", "5.0 GiB",
    ]  # fmt: skip
    assert [human_seconds(s) for s in (None, 0.25, 12.34, 245, 7380, 3 * 86400 + 4 * 3600)] == [
        "", "250 ms", "12.3 s", "4 m 05 s", "2 h 03 m", "3 d 04 h",
    ]  # fmt: skip


def test_a_metrics_file_in_a_missing_directory_is_refused_before_spark_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tieredstore.verifier.cli import main

    code = main(
        ["--hot", str(tmp_path), "--cold", str(tmp_path), "--cluster", "C", "--broker", "B",
         "--out", str(tmp_path / "out"), "--metrics-file", str(tmp_path / "nope" / "v.prom")]
    )  # fmt: skip
    assert code == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"verifier: could not run: bad --metrics-file: directory {tmp_path / 'nope'} does not exist"
    ]
    assert not (tmp_path / "out").exists()
