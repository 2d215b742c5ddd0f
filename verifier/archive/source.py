"""The ``tieredstore`` Spark data source (Spark 4's Python Data Source API).

``TieredStoreDataSource`` is the source; :func:`register` makes it available as
``spark.read.format("tieredstore")`` (and turns on Python filter pushdown, which Spark
leaves off by default); :func:`read_archive` checks the options on the driver first,
so a mistake is one line there instead of a Python traceback inside a Spark error.

* ``schema()`` runs at ``load()``: it checks the options and that the cold root, the
  cluster and every named broker exist
  (:func:`~tieredstore.verifier.archive.planner.check_sources`).
* The reader's ``pushFilters`` keeps the filters it can prune with and hands every filter
  back to Spark (:mod:`tieredstore.verifier.archive.pruning`); ``partitions()`` plans one partition
  per segment (:mod:`tieredstore.verifier.archive.planner`).
* ``read()`` runs in a Spark task. It opens a sync fsspec filesystem (no Hadoop S3
  jars), reads the segment's two objects by the keys its manifest names — whole, then
  checked against the manifest's sizes and digests; or, when offset filters cut the
  segment, only the consume-queue units and records wanted — and yields Arrow batches
  of :data:`~tieredstore.export.rows.ARCHIVE_SCHEMA`.

A task raises (and so fails the query) for an object that is missing or does not match
its manifest: a query never returns a silently partial archive.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

import pyarrow as pa
from fsspec.spec import AbstractFileSystem
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, Filter, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from tieredstore.cold.compressed.framed import Framed, read_range_with
from tieredstore.cold.history import Committed
from tieredstore.cold.reader import check_units
from tieredstore.errors import ConfigError, ObjectNotFoundError, SizeMismatchError
from tieredstore.export.rows import ARCHIVE_SCHEMA, SegmentSlice, record_span
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE, decode_units
from tieredstore.verifier.archive.options import SOURCE_NAME, ArchiveOptions, parse_options
from tieredstore.verifier.archive.planner import SegmentPartition, check_sources, plan
from tieredstore.verifier.archive.pruning import Pruning
from tieredstore.verifier.readers import ColdLocation

__all__ = [
    "PUSHDOWN_CONF",
    "SPARK_SCHEMA",
    "ArchiveReader",
    "PruningArchiveReader",
    "TieredStoreDataSource",
    "read_archive",
    "read_partition",
    "register",
]

#: Spark's switch for Python data source filter pushdown (off by default in Spark 4.1).
PUSHDOWN_CONF: Final = "spark.sql.python.filterPushdown.enabled"
#: The DataFrame's schema: :data:`~tieredstore.export.rows.ARCHIVE_SCHEMA` in Spark types.
SPARK_SCHEMA: Final[StructType] = from_arrow_schema(ARCHIVE_SCHEMA)


class TieredStoreDataSource(DataSource):
    """``spark.read.format("tieredstore")``: one row per committed message."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        check_sources(parse_options(self.options))
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> ArchiveReader:
        if schema != SPARK_SCHEMA:
            raise ConfigError(
                f"{SOURCE_NAME} data source: the schema is fixed; do not pass one to "
                "spark.read.schema()"
            )
        options = parse_options(self.options)
        return PruningArchiveReader(options) if options.prune else ArchiveReader(options)


class ArchiveReader(DataSourceReader):
    """Plans and reads one query (pickled from the planner into every task): every
    committed segment of the brokers asked for; Spark applies the query's filters."""

    def __init__(self, options: ArchiveOptions) -> None:
        self.options = options
        self.pruning = Pruning()

    def partitions(self) -> Sequence[InputPartition]:
        return plan(self.options, self.pruning)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SegmentPartition):
            # When planning found no segment, Spark still reads one (placeholder) partition.
            return iter(())
        return read_partition(self.options, partition)


class PruningArchiveReader(ArchiveReader):
    """:class:`ArchiveReader` that also prunes by the query's pushed filters (the
    ``prune`` option).

    Not the default: Spark 4.1 to 4.3 keep the plan that filter pushdown produced on the
    DataFrame's relation, and a later query on the same DataFrame with no filter to push
    (``df.count()`` after ``df.where(...).count()``) reads that pruned plan, silently
    missing rows. With ``prune`` on, give each query its own ``load()``.
    """

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:  # noqa: N802 (Spark's name)
        """Keep what prunes; return every filter, so Spark still checks each row."""
        self.pruning = Pruning.of(filters)
        return filters


# -- in the task ------------------------------------------------------------------------


def read_partition(options: ArchiveOptions, part: SegmentPartition) -> Iterator[pa.RecordBatch]:
    """The archive rows of one planned segment (see the module docstring).

    Raises:
        ObjectNotFoundError: an object of the segment is gone (expired since planning,
            or damaged).
        SizeMismatchError / DigestMismatchError / CorruptDataError: the objects do not
            match the manifest, or a record does not match its unit.
    """
    link = part.link
    fs, root = options.cold.filesystem()
    _trace(options.trace_dir, part)
    if (part.first, part.end) == (link.start_offset, link.end_offset):
        cl, cq = link.commit_log, link.consume_queue
        piece = SegmentSlice.whole(
            link,
            _read(fs, root, link, cl.key, cl.at, cl.end, cl.framed),
            _read(fs, root, link, cq.key, cq.at, cq.end, cq.framed),
            where=options.cold.url,
        )
    else:
        piece = _read_part(fs, root, link, part.first, part.end)
    yield from piece.batches(cluster=part.cluster, broker=part.broker, window=part.window)


def _read_part(
    fs: AbstractFileSystem, root: str, link: Committed, first: int, end: int
) -> SegmentSlice:
    """Queue offsets ``[first, end)`` of a link: their units, then their records."""
    cq, cl = link.consume_queue, link.commit_log
    rel = cq.at + (first - link.start_offset) * CQ_UNIT_SIZE
    units = decode_units(
        _read(fs, root, link, cq.key, rel, rel + (end - first) * CQ_UNIT_SIZE, cq.framed),
        where=cq.key,
    )
    lo, hi = record_span(check_units(link, first, units))
    cl_lo, cl_hi = cl.at + lo - link.cl_base, cl.at + hi - link.cl_base
    data = _read(fs, root, link, cl.key, cl_lo, cl_hi, cl.framed)
    return SegmentSlice.part(link, first, units, data)


def _read(
    fs: AbstractFileSystem,
    root: str,
    link: Committed,
    key: str,
    start: int,
    end: int,
    framed: Framed | None,
) -> bytes:
    """Bytes ``[start, end)`` of ``key``, decoded when ``framed`` (the one decoder)."""
    path = ColdLocation.path(root, key)
    try:
        data: bytes = read_range_with(
            lambda a, b: bytes(fs.cat_file(path, start=a, end=b)),
            key,
            start,
            end,
            framed,
            store=root,
        )
    except FileNotFoundError:
        raise ObjectNotFoundError(
            f"object of {link.describe()} is missing (expired or compacted since the "
            "query was planned, or damaged)",
            where=key,
        ) from None
    if len(data) != end - start:
        raise SizeMismatchError(
            f"object ends before byte {end} its manifest promises (read {len(data)} bytes "
            f"from {start})",
            where=key,
        )
    return data


def _trace(trace_dir: str | None, part: SegmentPartition) -> None:
    """With ``trace_dir``: record that this task opens the segment (one file per open)."""
    if trace_dir is None:
        return
    path = Path(trace_dir)
    path.mkdir(parents=True, exist_ok=True)
    doc = {"manifest_key": part.manifest_key, "first": part.first, "end": part.end,
           "pid": os.getpid()}  # fmt: skip
    (path / f"{uuid.uuid4().hex}.json").write_text(json.dumps(doc))


# -- on the driver --------------------------------------------------------------------


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("tieredstore")`` available in ``spark`` (and switch on
    Python filter pushdown, which the source relies on for pruning)."""
    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(TieredStoreDataSource)


def read_archive(
    spark: SparkSession, cold: str, cluster: str, broker: str | None = None, **options: str
) -> DataFrame:
    """``spark.read.format("tieredstore")`` with the options checked here first.

    ``broker`` may name several brokers (comma-separated) or be None for all of them;
    ``options`` are the other data source options (``endpoint_url``, ``storage.key``...).

    Raises:
        ConfigError: a bad option, or a cold root, cluster or broker that is not there
            (one line).
    """
    given = {"cold": cold, "cluster": cluster, **options}
    if broker is not None:
        given["broker"] = broker
    check_sources(parse_options(given))
    register(spark)
    return spark.read.format(SOURCE_NAME).options(**given).load()
