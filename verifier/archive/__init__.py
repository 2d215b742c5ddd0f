"""The cold store as a Spark DataFrame: the ``tieredstore`` data source.

::

    from tieredstore.verifier.archive import register
    register(spark)  # once per SparkSession
    df = (spark.read.format("tieredstore")
          .option("cold", "s3://bucket/prefix").option("cluster", "DefaultCluster")
          .option("broker", "broker-a").load())

Modules: :mod:`~tieredstore.verifier.archive.options` (what can be asked),
:mod:`~tieredstore.verifier.archive.pruning`
(filters as bounds), :mod:`~tieredstore.verifier.archive.planner` (one partition per segment),
:mod:`~tieredstore.verifier.archive.source` (the data source and its tasks). Rows and their decoding
live in the core (:mod:`tieredstore.export.rows`), shared with ``tieredstore export``.
"""

from __future__ import annotations

from tieredstore.verifier.archive.options import SOURCE_NAME
from tieredstore.verifier.archive.source import (
    SPARK_SCHEMA,
    TieredStoreDataSource,
    read_archive,
    register,
)

__all__ = ["SOURCE_NAME", "SPARK_SCHEMA", "TieredStoreDataSource", "read_archive", "register"]
