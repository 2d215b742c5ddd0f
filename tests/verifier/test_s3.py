"""The verifier against S3 (moto on loopback): Spark tasks read through s3fs.

Credentials and the endpoint reach the tasks as storage options on the command line:
the Python workers were forked before the test's AWS environment was set.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import fsspec
import pytest
from pyspark.sql import SparkSession

from tests.support.moto import ACCESS_KEY, REGION, SECRET_KEY, S3Bucket
from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.coldimage import write_fs
from tests.support.verification.report_doc import found
from tieredstore.cli.main import main as cli_main
from tieredstore.cold.layout import broker_prefix
from tieredstore.formats.consumequeue import decode_units
from tieredstore.hot.store import HotStore, QueueKey

from .conftest import World

pytestmark = [pytest.mark.spark, pytest.mark.s3]

Q = QueueKey("SynthTopic2", 1)


def _options(bucket: S3Bucket) -> dict[str, Any]:
    return bucket.fsspec_options()


@pytest.fixture
def s3_world(pristine: World, s3_bucket: S3Bucket, spark: SparkSession) -> S3Bucket:
    write_fs(pristine.image, s3_bucket.url, _options(s3_bucket))
    return s3_bucket


def _verify(
    bucket: S3Bucket, pristine: World, out: Path, *flags: str
) -> tuple[int, dict[str, Any]]:
    code = cli_main(
        [
            "verify",
            "--hot", str(pristine.hot),
            "--cold", bucket.url,
            "--cluster", CLUSTER,
            "--broker", BROKER,
            "--out", str(out),
            "--lag-allowance", "0",
            "--endpoint-url", bucket.endpoint_url,
            "--region", REGION,
            "--storage-option", f"key={ACCESS_KEY}",
            "--storage-option", f"secret={SECRET_KEY}",
            *flags,
        ]
    )  # fmt: skip
    return code, json.loads((out / "report.json").read_text())


def _fs(bucket: S3Bucket) -> Any:
    fs, _ = fsspec.core.url_to_fs(bucket.url, **_options(bucket))
    return fs


def test_clean_on_s3(s3_world: S3Bucket, pristine: World, tmp_path: Path) -> None:
    code, doc = _verify(s3_world, pristine, tmp_path, "--level", "content")
    assert (code, doc["verdict"], doc["anomalies"]) == (0, "CLEAN", [])
    segments = sum(len(ms) for ms in pristine.image.manifests.values())
    assert doc["totals"]["objects"] == 3 * segments  # the records are not segment objects
    assert doc["parameters"]["cold"] == s3_world.url


def test_missing_cq_object_on_s3(s3_world: S3Bucket, pristine: World, tmp_path: Path) -> None:
    m = pristine.manifests(Q)[1]
    _fs(s3_world).rm(f"{s3_world.name}/{m.consume_queue_key}")
    code, doc = _verify(s3_world, pristine, tmp_path)
    assert code == 2
    assert found(doc) == {
        ("missing_object", Q.topic, Q.queue_id, m.start_offset, m.end_offset, m.consume_queue_key)
    }


def test_flipped_record_byte_on_s3(s3_world: S3Bucket, pristine: World, tmp_path: Path) -> None:
    m = pristine.manifests(Q)[0]
    fs = _fs(s3_world)
    units = decode_units(pristine.image.objects[m.consume_queue_key])
    pos = int(units["commitlog_offset"][5]) - m.cl_base + 100
    data = bytearray(pristine.image.objects[m.commit_log_key])
    data[pos] ^= 0x01
    fs.pipe(f"{s3_world.name}/{m.commit_log_key}", bytes(data))
    code, doc = _verify(s3_world, pristine, tmp_path, "--level", "content")
    assert code == 2
    q = m.start_offset + 5
    assert found(doc) == {
        ("digest_mismatch", Q.topic, Q.queue_id, m.start_offset, m.end_offset, m.commit_log_key),
        ("content_mismatch", Q.topic, Q.queue_id, q, q + 1, m.commit_log_key),
    }


def test_a_missing_bucket_cannot_run(s3_bucket: S3Bucket, pristine: World, tmp_path: Path) -> None:
    missing = replace(s3_bucket, name=s3_bucket.name + "-absent")
    code = cli_main(
        [
            "verify", "--hot", str(pristine.hot), "--cold", missing.url,
            "--cluster", CLUSTER, "--broker", BROKER, "--out", str(tmp_path),
            "--endpoint-url", missing.endpoint_url, "--region", REGION,
            "--storage-option", f"key={ACCESS_KEY}", "--storage-option", f"secret={SECRET_KEY}",
        ]
    )  # fmt: skip
    assert code == 3
    assert not (tmp_path / "report.json").exists()


def test_a_deleted_queue_on_s3_is_hot_not_covered(
    s3_world: S3Bucket, pristine: World, tmp_path: Path
) -> None:
    fs = _fs(s3_world)
    fs.rm(
        f"{s3_world.name}/{broker_prefix(CLUSTER, BROKER)}/{Q.topic}/{Q.queue_id}", recursive=True
    )
    rng = HotStore(pristine.hot).queue_range(Q.topic, Q.queue_id)
    code, doc = _verify(s3_world, pristine, tmp_path)
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {("hot_not_covered", Q.topic, Q.queue_id, rng.min, rng.max, None)}


def test_a_missing_head_on_s3(s3_world: S3Bucket, pristine: World, tmp_path: Path) -> None:
    fs = _fs(s3_world)
    first, second = pristine.manifests(Q)[:2]
    fs.rm([f"{s3_world.name}/{k}" for k in (first.key, first.commit_log_key,
                                            first.consume_queue_key)])  # fmt: skip
    code, doc = _verify(s3_world, pristine, tmp_path)
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {("missing_head", Q.topic, Q.queue_id, 0, second.start_offset, None)}


def test_a_broker_never_tiered_on_s3_is_refused(
    s3_world: S3Bucket, pristine: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli_main(
        [
            "verify", "--hot", str(pristine.hot), "--cold", s3_world.url,
            "--cluster", CLUSTER, "--broker", "broker-typo", "--out", str(tmp_path),
            "--endpoint-url", s3_world.endpoint_url, "--region", REGION,
            "--storage-option", f"key={ACCESS_KEY}", "--storage-option", f"secret={SECRET_KEY}",
        ]
    )  # fmt: skip
    assert code == 3 and not (tmp_path / "verify.prom").exists()
    assert f"brokers tiered in that cluster there: {BROKER}" in capsys.readouterr().err
