"""The data source in a job started by ``spark-submit`` (its own JVM and Python workers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER

from .conftest import BROKER_B, Archive

_SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
_JOB = Path(__file__).parent / "spark_submit_job.py"


@pytest.mark.spark
def test_spark_submit_job_reads_the_archive(archive: Archive, tmp_path: Path) -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")  # fmt: skip
    out = tmp_path / "counts.json"
    proc = subprocess.run(
        [
            str(_SPARK_SUBMIT), "--master", "local[2]",
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--driver-memory", "512m",
            str(_JOB), str(archive.cold), CLUSTER, str(out),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads(out.read_text())
    assert counts == {BROKER: len(archive.rows(BROKER)), BROKER_B: len(archive.rows(BROKER_B))}
