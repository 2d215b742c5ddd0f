"""`make test` runs the real-broker tests in two xdist groups, and that really holds.

``tests/conftest.py`` marks each ``broker`` test ``xdist_group("rocketmq-1")`` when it is
in ``tests/broker/`` (whose tests share a package-scoped broker) and
``xdist_group("rocketmq-2")`` otherwise, and the suite runs with ``--dist loadgroup``.
Nothing fails loudly when grouping stops working (pytest 9 with pytest-xdist 3.8 dropped
the group silently): a package's broker then starts once per worker, and more broker JVMs
than cores run at once and time out under load. This runs a small suite with the
project's own conftest hook on three workers and checks where each test ran.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tests(kind: str) -> str:
    """A test module whose six ``broker`` and six other tests record where they ran."""
    return f"""\
import os

import pytest


def _record(kind: str) -> None:
    with open(os.environ["WHERE"], "a") as out:
        out.write(f"{{kind}} {{os.environ['PYTEST_XDIST_WORKER']}}\\n")


@pytest.mark.broker
@pytest.mark.parametrize("i", range(6))
def test_broker(i: int) -> None:
    _record("{kind}")


@pytest.mark.parametrize("i", range(6))
def test_other(i: int) -> None:
    _record("other")
"""


@pytest.mark.slow
def test_broker_tests_run_in_two_groups_each_on_one_worker(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    (suite / "tests" / "broker").mkdir(parents=True)
    (suite / "tests" / "power").mkdir(parents=True)
    hook = (ROOT / "tests" / "conftest.py").read_text()
    at = hook.index("BROKER_GROUPS = ")
    start = hook.rindex("\n\n\n", 0, at) + 3  # with its comment
    end = hook.index("\n\n\n", hook.index("def pytest_collection_modifyitems"))
    (suite / "conftest.py").write_text("import pytest\n\n\n" + hook[start:end] + "\n")
    (suite / "tests" / "broker" / "test_live.py").write_text(_tests("live"))
    (suite / "tests" / "power" / "test_cut.py").write_text(_tests("cut"))
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    broker: a broker test\n")
    where = tmp_path / "where.txt"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "3", "--dist", "loadgroup",
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
    assert len(lines) == 24
    for kind in ("live", "cut"):
        assert len([1 for k, _ in lines if k == kind]) == 6
        workers = {worker for k, worker in lines if k == kind}
        assert len(workers) == 1, f"the {kind} broker tests ran on {sorted(workers)}"
