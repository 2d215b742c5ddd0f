"""`make test` keeps every real-broker test on one xdist worker, and that really holds.

``tests/conftest.py`` marks each ``broker`` test ``xdist_group("rocketmq")`` and the suite
runs with ``--dist loadgroup``. Nothing fails loudly when grouping stops working (pytest 9
with pytest-xdist 3.8 dropped the group silently): two broker JVMs then run at once on a
two-core machine and the broker tests time out under load. This runs a small suite with
the project's own conftest hook on two workers and checks where each test ran.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TESTS = """\
import os

import pytest


def _record(kind: str) -> None:
    with open(os.environ["WHERE"], "a") as out:
        out.write(f"{kind} {os.environ['PYTEST_XDIST_WORKER']}\\n")


@pytest.mark.broker
@pytest.mark.parametrize("i", range(6))
def test_broker(i: int) -> None:
    _record("broker")


@pytest.mark.parametrize("i", range(6))
def test_other(i: int) -> None:
    _record("other")
"""


@pytest.mark.slow
def test_broker_tests_run_on_one_worker(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    hook = (ROOT / "tests" / "conftest.py").read_text()
    at = hook.index("def pytest_collection_modifyitems")
    start = hook.rindex("\n\n\n", 0, at) + 3  # with its decorators
    end = hook.index("\n\n\n", at)
    (suite / "conftest.py").write_text("import pytest\n\n\n" + hook[start:end] + "\n")
    (suite / "test_where.py").write_text(TESTS)
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    broker: a broker test\n")
    where = tmp_path / "where.txt"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
         "-p", "no:cacheprovider", str(suite)],
        cwd=suite,
        env={"WHERE": str(where), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [line.split() for line in where.read_text().splitlines()]
    broker_workers = {worker for kind, worker in lines if kind == "broker"}
    assert len([1 for kind, _ in lines if kind == "broker"]) == 6
    assert len(broker_workers) == 1, f"broker tests ran on {sorted(broker_workers)}"
