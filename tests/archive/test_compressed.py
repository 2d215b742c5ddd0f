"""Export and the Spark data source over a cold store whose segments are partly
compressed (manifest format 3) give exactly the rows of the plain store they came from."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.stores.compressed import compress_every_other
from tieredstore.verifier.archive import register

from .conftest import Archive
from .test_datasource import load, rows
from .test_export import export, read_back


@pytest.fixture(scope="module")
def compressed(archive: Archive, tmp_path_factory: pytest.TempPathFactory) -> Archive:
    root = tmp_path_factory.mktemp("compressed-archive")
    shutil.copytree(archive.cold, root / "cold")
    assert compress_every_other(root / "cold")
    return Archive(root / "cold", archive.stores)


@pytest.mark.slow
def test_export_of_a_compressed_copy_writes_the_same_rows(
    archive: Archive, compressed: Archive, tmp_path: Path
) -> None:
    assert export(archive.cold, tmp_path / "plain") == 0
    assert export(compressed.cold, tmp_path / "zstd") == 0
    expected = read_back(tmp_path / "plain")
    assert expected and read_back(tmp_path / "zstd") == expected


@pytest.mark.spark
def test_the_data_source_reads_a_compressed_copy_as_the_plain_one(
    spark: SparkSession, archive: Archive, compressed: Archive
) -> None:
    register(spark)
    expected = rows(load(spark, archive))
    assert expected and rows(load(spark, compressed)) == expected
