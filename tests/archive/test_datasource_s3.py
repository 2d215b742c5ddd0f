"""The data source on S3 (moto on loopback): tasks read through s3fs, with the endpoint
and credentials given as options (Spark's Python workers were forked before the test's
AWS environment was set)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import fsspec
import pytest
from pyspark.sql import SparkSession

from tests.support.moto import ACCESS_KEY, REGION, SECRET_KEY, S3Bucket
from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.errors import ConfigError
from tieredstore.verifier.archive import read_archive

from .conftest import BROKER_B, Archive, normalise

pytestmark = [pytest.mark.spark, pytest.mark.s3]


def options(bucket: S3Bucket) -> dict[str, str]:
    return {
        "endpoint_url": bucket.endpoint_url,
        "region": REGION,
        "storage.key": ACCESS_KEY,
        "storage.secret": SECRET_KEY,
    }


@pytest.fixture
def s3_archive(archive: Archive, s3_bucket: S3Bucket) -> S3Bucket:
    fs, _ = fsspec.core.url_to_fs(
        s3_bucket.url, endpoint_url=s3_bucket.endpoint_url, key=ACCESS_KEY, secret=SECRET_KEY,
        client_kwargs={"region_name": REGION},
    )  # fmt: skip
    files = [p for p in archive.cold.rglob("*") if p.is_file()]
    fs.pipe({f"{s3_bucket.name}/{p.relative_to(archive.cold)}": p.read_bytes() for p in files})
    return s3_bucket


def test_rows_from_s3_equal_read(
    spark: SparkSession, archive: Archive, s3_archive: S3Bucket, tmp_path: Path
) -> None:
    df = read_archive(
        spark, s3_archive.url, CLUSTER, trace_dir=str(tmp_path), **options(s3_archive)
    )
    got = normalise(df.toArrow().to_pylist())
    assert got == normalise(archive.rows(BROKER) + archive.rows(BROKER_B))
    # One task trace per link (segment or batch slice), each opened once.
    assert len(list(tmp_path.glob("*.json"))) == len(archive.links()) + len(archive.links(BROKER_B))


def test_pruned_and_partial_reads_on_s3(
    spark: SparkSession, archive: Archive, s3_archive: S3Bucket, tmp_path: Path
) -> None:
    queue = sorted(
        (m for m in archive.links() if (m.topic, m.queue_id) == ("SynthTopic0", 1)),
        key=lambda m: m.start_offset,
    )
    lo, hi = queue[0].start_offset + 5, queue[1].start_offset + 5
    df = read_archive(spark, s3_archive.url, CLUSTER, BROKER, trace_dir=str(tmp_path),
                      prune="true", **options(s3_archive))  # fmt: skip
    got = df.where(f"topic = 'SynthTopic0' AND queue_id = 1 AND queue_offset >= {lo} "
                   f"AND queue_offset < {hi}").toArrow().to_pylist()  # fmt: skip
    expected = [
        r for r in archive.rows()
        if (r["topic"], r["queue_id"]) == ("SynthTopic0", 1) and lo <= r["queue_offset"] < hi
    ]  # fmt: skip
    assert normalise(got) == normalise(expected)
    seen = sorted(json.loads(p.read_text())["manifest_key"] for p in tmp_path.glob("*.json"))
    assert seen == sorted(m.history_key for m in queue[:2])


def test_a_missing_bucket_is_one_line(spark: SparkSession, s3_bucket: S3Bucket) -> None:
    missing = replace(s3_bucket, name=s3_bucket.name + "-absent")
    with pytest.raises(ConfigError, match="cold store root does not exist") as info:
        read_archive(spark, missing.url, CLUSTER, **options(missing))
    assert "\n" not in str(info.value)
