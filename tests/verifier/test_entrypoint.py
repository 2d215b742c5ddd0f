"""The verifier's entry points as an operator runs them: ``spark-submit
verifier/__main__.py`` (its own JVM, once) and ``python -m tieredstore.verifier``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tieredstore.verifier
from tests.support.sidecar.settings import BROKER, CLUSTER

from .conftest import World

_PACKAGE = Path(tieredstore.verifier.__file__).parent
_SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def _flags(world: World, out: Path) -> list[str]:
    return [
        "--hot", str(world.hot),
        "--cold", str(world.cold),
        "--cluster", CLUSTER,
        "--broker", BROKER,
        "--out", str(out),
        "--lag-allowance", "0",
    ]  # fmt: skip


@pytest.mark.spark
def test_spark_submit_runs_the_package_main(pristine: World, tmp_path: Path) -> None:
    flags = [*_flags(pristine, tmp_path), "--master", "local[1]"]
    proc = subprocess.run(
        [
            str(_SPARK_SUBMIT),
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--driver-memory", "512m",
            str(_PACKAGE / "__main__.py"),
            *flags,
        ],
        cwd=tmp_path,  # not the checkout: the script must find its package by itself
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("CLEAN: 0 anomalies in 6 queues")
    assert json.loads((tmp_path / "report.json").read_text())["verdict"] == "CLEAN"


@pytest.mark.slow
def test_python_m_verifier_could_not_run_is_exit_3_with_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tieredstore.verifier", "--hot", str(tmp_path / "absent"), "--cold",
         str(tmp_path), "--cluster", "C", "--broker", "B", "--out", str(tmp_path / "out")],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("verifier: could not run: hot store directory does not exist")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_bad_usage_is_exit_3(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tieredstore.verifier", "--hot", str(tmp_path)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 3
    assert proc.stderr.strip().splitlines() == [
        "verifier: could not run: missing --cold, --cluster, --broker "
        "(or --config naming the sidecar's config file)"
    ]
