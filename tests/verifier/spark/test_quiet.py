"""Quiet by default: ``tieredstore verify`` and ``tieredstore demo`` print only our own
lines; Spark and the JVM write into ``spark.log`` next to the report.

The commands run as an operator runs them, in a subprocess with a Spark JVM of their
own (the suite's shared session would hide the JVM's start-up noise).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.verifier.cli import JobArgs
from tieredstore.verifier.spark.session import SPARK_LOG_NAME, output_to

from ..conftest import World, sample_result

_CLI = Path(sys.executable).parent / "tieredstore"
# What reached the terminal before: none of it may appear on ours.
_NOISE = ("WARN", "log4j", "loopback", "WARNING", "setLogLevel", "Exception")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SPARK_LOCAL_IP", None)  # the command must not need the caller to set it
    env["PYSPARK_PYTHON"] = sys.executable
    return env


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(_CLI), *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.spark
def test_verify_prints_one_line_of_ours_and_spark_goes_to_its_log(
    pristine: World, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    proc = _run(
        "verify", "--hot", str(pristine.hot), "--cold", str(pristine.cold),
        "--cluster", CLUSTER, "--broker", BROKER, "--out", str(out),
        "--lag-allowance", "0", "--master", "local[1]",
        "--metrics-file", str(tmp_path / "verify.prom"),
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == ""
    assert proc.stdout.splitlines() == [
        f"CLEAN: 0 anomalies in 6 queues; report: {out / 'report.html'}"
    ]
    log = (out / SPARK_LOG_NAME).read_text()
    assert "log4j" in log  # the banner went here, not to the terminal
    assert (tmp_path / "verify.prom").read_text() == (out / "verify.prom").read_text()


@pytest.mark.spark
def test_demo_prints_only_its_own_lines(tmp_path: Path) -> None:
    proc = _run("demo", "--workdir", str(tmp_path / "demo"), "--messages", "300", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("CLEAN: ") and len(proc.stdout.splitlines()) == 1
    lines = proc.stderr.splitlines()
    assert lines and all(line.startswith("==> ") for line in lines), proc.stderr
    assert not any(word in proc.stderr for word in _NOISE)
    assert (tmp_path / "demo" / "report" / SPARK_LOG_NAME).stat().st_size > 0


def test_output_to_hands_a_child_the_log_and_gives_the_terminal_back(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The mechanism without a JVM: a process started inside the block writes into the
    log for its whole life; this process writes to its own stdout/stderr again after."""
    log = tmp_path / "spark.log"
    child = [
        sys.executable,
        "-c",
        "import sys; print('child out'); print('child err', file=sys.stderr)",
    ]
    with output_to(log):
        subprocess.run(child, check=True)
    print("ours")
    captured = capfd.readouterr()
    assert captured.out == "ours\n" and captured.err == ""
    assert log.read_text().splitlines() == ["child out", "child err"]


def test_verbose_keeps_spark_on_the_terminal(tmp_path: Path) -> None:
    base = JobArgs(options=sample_result(tmp_path, []).options, out=tmp_path / "out", master=None)
    assert (base.spark_log, base.spark_log_level) == (tmp_path / "out" / SPARK_LOG_NAME, "WARN")
    loud = JobArgs(base.options, base.out, None, verbose=True)
    assert (loud.spark_log, loud.spark_log_level) == (None, "WARN")
