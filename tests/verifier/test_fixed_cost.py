"""The verifier's fixed cost per run, as structure (never as time): how many Spark jobs a
run launches, that it leaves the caller's session as it found it, and how its Python
daemon picks PySpark's installed copy."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.verifier.job import _SESSION_CONF, verify
from tieredstore.verifier.spark.pydaemon import installed_copy_first
from tieredstore.verifier.vocabulary import LagAllowance, LagUnit, Level, VerifyOptions

from .conftest import World

#: Hot queues, manifests, segments (each read once), all anomalies, the queue summary.
JOBS_PER_RUN = 5


def _options(world: World, level: Level, metadata: Path | None = None) -> VerifyOptions:
    return VerifyOptions(
        hot=world.hot,
        cold_url=str(world.cold),
        cluster=CLUSTER,
        broker=BROKER,
        now_ms=time.time_ns() // 1_000_000,
        level=level,
        lag_allowance=LagAllowance(LagUnit.MESSAGES, 0),
        metadata_dir=metadata,
    )


@pytest.mark.spark
@pytest.mark.parametrize("level", [Level.OFFSETS, Level.CONTENT])
def test_a_run_is_five_spark_jobs_whatever_it_finds(
    world: World, spark: SparkSession, level: Level
) -> None:
    first = world.manifests(sorted(world.image.manifests)[0])[0]
    os.truncate(world.path(first.consume_queue_key), 7)  # size_mismatch, and a gap of reads
    sc = spark.sparkContext
    group = f"fixed-cost-{level.value}"
    sc.setJobGroup(group, "one verify run")
    try:
        result = verify(spark, _options(world, level))
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert result.anomalies, "the damage is found"
    assert len(sc.statusTracker().getJobIdsForGroup(group)) == JOBS_PER_RUN


@pytest.mark.spark
def test_a_run_leaves_the_callers_sql_settings_alone(world: World, spark: SparkSession) -> None:
    keys = sorted(_SESSION_CONF)
    before = [spark.conf.get(k, None) for k in keys]
    verify(spark, _options(world, Level.OFFSETS))
    assert [spark.conf.get(k, None) for k in keys] == before
    assert before != [_SESSION_CONF[k] for k in keys]  # the run's own settings differ


def test_the_daemon_puts_an_installed_pysparks_zip_last(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "pyspark" / "python" / "lib").mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    bundled = str(site / "pyspark" / "python" / "lib" / "pyspark.zip")
    py4j = str(site / "pyspark" / "python" / "lib" / "py4j-src.zip")
    assert installed_copy_first([bundled, py4j, str(site)]) == [py4j, str(site), bundled]


def test_the_daemon_keeps_a_zip_that_belongs_to_no_installed_copy(tmp_path: Path) -> None:
    lib = tmp_path / "pyspark" / "python" / "lib"  # no pyspark/__init__.py beside it
    lib.mkdir(parents=True)
    path = [str(lib / "pyspark.zip"), str(tmp_path / "site")]
    assert installed_copy_first(path) == path
