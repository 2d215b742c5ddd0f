"""``bench/results_table.py``: the table BENCHMARKS.md opens with, from RESULT lines.

BENCHMARKS.md's table must be exactly what the script renders from the recorded run
(``bench/results/latest.log``), so the two cannot drift apart.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "results_table.py"

LOG = """\
== bench/tiering_posix.py (commit 1234567abc, 2026-11-25T20:00:00Z)
2 CPUs (AMD EPYC), 24 GiB RAM, Python 3.11.7, load average 0.50, 0.40, 0.30
RESULT tiering_posix ratio=0.4 target=>=0.5 FAIL
RESULT tiering_posix_rss ratio=143 target=<256MiB PASS
== bench/tiering_posix.py --size 512M --queues 64 (commit 89abcde, 2026-11-25T20:05:00Z)
RESULT tiering_posix ratio=0.05 target=>=0.3 FAIL
== bench/tiering_posix.py (commit 1234567abc, 2026-11-25T20:10:00Z)
RESULT tiering_posix ratio=0.6 target=>=0.5 PASS
RESULT not a result line
"""


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("results_table", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_one_row_per_name_and_arguments_the_last_run_winning() -> None:
    table = _module()
    rows = {(r.name, r.args): r for r in table.parse(LOG.splitlines())}
    assert set(rows) == {
        ("tiering_posix", ""),
        ("tiering_posix_rss", ""),
        ("tiering_posix", "--size 512M --queues 64"),
    }
    rerun = rows["tiering_posix", ""]
    assert (rerun.value, rerun.passed, rerun.commit) == ("0.6", True, "1234567")
    assert rows["tiering_posix", "--size 512M --queues 64"].commit == "89abcde"
    assert rows["tiering_posix_rss", ""].machine.startswith("2 CPUs (AMD EPYC)")


def test_failures_come_first_in_the_rendered_table() -> None:
    table = _module()
    lines = table.render(table.parse(LOG.splitlines())).splitlines()
    body = [line for line in lines[2:] if line.startswith("| `")]
    assert "**FAIL**" in body[0]
    assert all("PASS" in line for line in body[1:])


def test_each_row_names_the_machine_it_ran_on() -> None:
    table = _module()
    lines = table.render(table.parse(LOG.splitlines())).splitlines()
    assert lines[0].endswith("| commit | machine |")
    rows = [line for line in lines if line.startswith("| `")]
    # The rss row was measured after the machine line; the 512M run has none recorded.
    rss = next(line for line in rows if "tiering_posix_rss" in line)
    assert rss.rstrip().endswith("| m1 |")
    unrecorded = next(line for line in rows if "--size 512M" in line)
    assert unrecorded.rstrip().endswith("| ? |")
    assert "- m1: 2 CPUs (AMD EPYC), 24 GiB RAM, Python 3.11.7, load average 0.50" in "\n".join(
        lines
    )


def test_write_replaces_only_the_text_between_the_markers(tmp_path: Path) -> None:
    table = _module()
    doc = tmp_path / "B.md"
    doc.write_text(f"intro\n{table.BEGIN}\nold\n{table.END}\noutro\n")
    table.write(doc, "| new |")
    assert doc.read_text() == f"intro\n{table.BEGIN}\n| new |\n{table.END}\noutro\n"


def test_a_file_without_markers_is_refused_and_left_alone(tmp_path: Path) -> None:
    log, doc = tmp_path / "run.log", tmp_path / "B.md"
    log.write_text(LOG)
    doc.write_text("no markers here\n")
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(log), "--write", str(doc)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1
    assert "no '<!-- results:begin -->'" in run.stderr
    assert doc.read_text() == "no markers here\n"


def test_a_log_without_results_is_an_error(tmp_path: Path) -> None:
    log = tmp_path / "empty.log"
    log.write_text("== bench/lag.py (commit 1234567)\nnothing\n")
    with pytest.raises(SystemExit, match="no RESULT lines"):
        _module().main([str(log)])


def test_benchmarks_md_holds_the_table_of_the_recorded_run() -> None:
    table = _module()
    log = ROOT / "bench" / "results" / "latest.log"
    expected = table.render(table.parse(log.read_text().splitlines()))
    text = (ROOT / "BENCHMARKS.md").read_text()
    start, end = text.index(table.BEGIN) + len(table.BEGIN), text.index(table.END)
    assert text[start:end].strip() == expected.strip(), (
        "BENCHMARKS.md is out of date: run `python bench/results_table.py "
        "bench/results/latest.log --write BENCHMARKS.md`"
    )
