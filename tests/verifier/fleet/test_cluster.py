"""The fleet job on a real Spark standalone cluster (a master and two workers, each its
own JVM with its own Python workers), submitted with ``spark-submit`` and the built wheel;
the executors read the four brokers' cold stores from the suite's S3 server."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.moto import ACCESS_KEY, REGION, SECRET_KEY, S3Bucket
from tests.support.stores.coldimage import write_fs
from tests.support.verification.fleet import (
    CLEAN,
    DELETED,
    FLIPPED,
    NO_FINGERPRINT,
    damage_delete_queue,
    damage_flip,
    fleet_image,
)
from tests.support.verification.sparkcluster import (
    SparkCluster,
    spark_bin,
    standalone_cluster,
)
from tests.support.wheel import build_wheel
from tieredstore.cli.main import main as cli_main
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.hot.store import QueueKey
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.verifier.verdict import Verdict

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow]

_REPO = Path(__file__).resolve().parents[3]
CLUSTER = "FleetCluster"
SPEC = SynthSpec(
    topics=2, queues=2, messages=800, body_min=100, body_max=300,
    commitlog_file_size=256 << 10, cq_file_size=200 * CQ_UNIT_SIZE, seed=36,
)  # fmt: skip
FLIP_Q = QueueKey("SynthTopic0", 1)
GONE_Q = QueueKey("SynthTopic1", 0)
_DRIVER = """import sys
import tieredstore.verifier
print("verifier imported from", tieredstore.verifier.__file__, file=sys.stderr)
from tieredstore.verifier.cli import main
sys.exit(main())
"""


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


def test_spark_submit_verify_fleet_on_a_standalone_cluster(
    spark_cluster: SparkCluster, wheel: Path, s3_bucket: S3Bucket, tmp_path: Path
) -> None:
    synthesize(tmp_path / "hot", SPEC)
    image = fleet_image(
        tmp_path / "hot", CLUSTER, [CLEAN, FLIPPED, NO_FINGERPRINT, DELETED], segment_messages=100
    )
    offset, _ = damage_flip(image, CLUSTER, FLIPPED, FLIP_Q)
    damage_delete_queue(image, CLUSTER, DELETED, GONE_Q)
    cold = f"s3://{s3_bucket.name}"
    write_fs(image, cold, s3_bucket.fsspec_options())
    for broker in (CLEAN, FLIPPED, DELETED):
        assert cli_main([
            "fingerprint", "--store", str(tmp_path / "hot"), "--cold", cold,
            "--cluster", CLUSTER, "--broker", broker, "--endpoint-url", s3_bucket.endpoint_url,
            "--region", REGION, "--block-offsets", "64", "--max-bytes-per-second", "0",
        ]) == 0  # fmt: skip
    driver = tmp_path / "fleet_driver.py"
    driver.write_text(_DRIVER)
    out = tmp_path / "report"
    env = dict(spark_cluster.env, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
               AWS_DEFAULT_REGION=REGION, AWS_EC2_METADATA_DISABLED="true")  # fmt: skip
    jvm = env["SPARK_SUBMIT_OPTS"]
    proc = subprocess.run(
        [
            str(spark_bin("spark-submit")), "--master", spark_cluster.master_url,
            "--py-files", str(wheel),
            "--total-executor-cores", "2", "--executor-cores", "1",
            "--executor-memory", "512m", "--driver-memory", "512m",
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", f"spark.executor.extraJavaOptions={jvm}",
            "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
            "--conf", f"spark.executorEnv.AWS_ACCESS_KEY_ID={ACCESS_KEY}",
            "--conf", f"spark.executorEnv.AWS_SECRET_ACCESS_KEY={SECRET_KEY}",
            str(driver), "--fleet", "--cold", cold, "--cluster", CLUSTER,
            "--endpoint-url", s3_bucket.endpoint_url, "--region", REGION, "--out", str(out),
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == Verdict.CORRUPT.exit_code, proc.stderr[-3000:]
    # The driver imported the package from the wheel (spark-submit may ship a copy of
    # it), not from the checkout.
    said = (proc.stdout + proc.stderr).splitlines()  # PythonRunner merges them into stdout
    (imported,) = [ln for ln in said if "verifier imported from" in ln]
    assert f"{wheel.name}/tieredstore/verifier/__init__.py" in imported, imported
    doc = json.loads((out / "fleet.json").read_text())
    assert {b["broker"]: b["verdict"] for b in doc["brokers"]} == {
        CLEAN: "CLEAN", FLIPPED: "CORRUPT", NO_FINGERPRINT: "INCOMPLETE", DELETED: "CORRUPT",
    }  # fmt: skip
    # Tasks ran in both executors: each works in its own directory under a worker's.
    executors = {w.rsplit("/", 1)[-1] for w in doc["workers"]}
    assert len(executors) > 1, doc["workers"]
    assert all("/worker" in w for w in doc["workers"]), doc["workers"]
    flipped = json.loads((out / CLUSTER / FLIPPED / "report.json").read_text())
    (bad,) = flipped["anomalies"]
    assert bad["anomaly"] == "content_mismatch" and bad["start"] <= offset < bad["end"]
    assert "block" in bad["detail"]
