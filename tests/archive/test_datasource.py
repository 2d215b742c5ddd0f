"""The ``tieredstore`` Spark data source on a POSIX cold store with two brokers.

Rows are compared with what ``tieredstore read`` returns (ColdReader); pruning is proven
by the links (segments, batch slices) the tasks opened (the ``trace_dir`` option: one file
per open, naming the link's history key).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.batches import rebatch
from tests.support.stores.compressed import TEST_FRAMES
from tieredstore.backends import open_backend
from tieredstore.cold.compressed.frames import FrameSettings
from tieredstore.cold.history import Committed
from tieredstore.cold.layout import batch_prefix, parse_batch_key
from tieredstore.cold.manifest import Manifest
from tieredstore.errors import ConfigError
from tieredstore.export.rows import ARCHIVE_COLUMNS
from tieredstore.verifier.archive import SPARK_SCHEMA, read_archive, register

from .conftest import BROKER_B, Archive, Row, normalise, when

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark_archive(spark: SparkSession) -> SparkSession:
    register(spark)
    return spark


def load(
    spark: SparkSession, archive: Archive, trace: Path | None = None, **opts: str
) -> DataFrame:
    reader = spark.read.format("tieredstore").option("cold", str(archive.cold))
    reader = reader.option("cluster", CLUSTER)
    if trace is not None:
        reader = reader.option("trace_dir", str(trace))
    return reader.options(**opts).load()


def opened(trace: Path) -> Counter[str]:
    """History key → how many times a task opened that link."""
    return Counter(json.loads(p.read_text())["manifest_key"] for p in trace.glob("*.json"))


def rows(df: DataFrame) -> list[Row]:
    return normalise(df.toArrow().to_pylist())


def keys(links: list[Committed]) -> Counter[str]:
    return Counter(m.history_key for m in links)


def test_every_row_equals_what_read_returns(
    spark_archive: SparkSession, archive: Archive, tmp_path: Path
) -> None:
    df = load(spark_archive, archive, tmp_path)
    assert tuple(df.columns) == ARCHIVE_COLUMNS
    got = rows(df)
    expected = normalise(archive.rows(BROKER) + archive.rows(BROKER_B))
    assert len(got) == len(expected) > 1000
    assert got == expected
    # One input partition per link, each link opened exactly once.
    links = keys(archive.links(BROKER) + archive.links(BROKER_B))
    assert opened(tmp_path) == links
    assert df.rdd.getNumPartitions() == len(links)


def test_the_data_has_what_the_columns_promise(archive: Archive) -> None:
    # The fixture must exercise compressed bodies, missing tags, IPv6 and v2 topics.
    expected = archive.rows(BROKER)
    # Bodies over 1,500 bytes are ZLIB-compressed on disk (compress_over); the rows show
    # them inflated, with sysFlag's COMPRESSED bit cleared, as a consumer sees them.
    assert any(r["body_size"] > 1500 for r in expected)
    assert not any(r["sys_flag"] & 0x1 for r in expected)
    assert any(r["tags"] is None for r in expected) and any(r["tags"] for r in expected)
    assert any(len(r["keys"]) > 0 for r in expected)
    assert any(len(r["topic"]) > 127 for r in expected)
    assert all(r["msg_id"] == r["properties"]["UNIQ_KEY"] for r in expected)
    assert all(r["body_size"] == len(r["body"]) for r in expected)


@pytest.mark.parametrize("option", ["broker-a,broker-b", " broker-b , broker-a "])
def test_several_brokers_in_one_frame(
    spark_archive: SparkSession, archive: Archive, option: str
) -> None:
    got = rows(load(spark_archive, archive, broker=option))
    assert got == normalise(archive.rows(BROKER) + archive.rows(BROKER_B))


def test_one_broker(spark_archive: SparkSession, archive: Archive, tmp_path: Path) -> None:
    got = rows(load(spark_archive, archive, tmp_path, broker=BROKER_B))
    assert got == normalise(archive.rows(BROKER_B))
    assert opened(tmp_path) == keys(archive.links(BROKER_B))


def _where(
    spark: SparkSession, archive: Archive, trace: Path, condition: str
) -> tuple[list[Row], Counter[str]]:
    df = load(spark, archive, trace, prune="true").where(condition)
    return rows(df), opened(trace)


def test_by_default_a_reused_dataframe_reads_everything_after_a_filtered_query(
    spark_archive: SparkSession, archive: Archive, tmp_path: Path
) -> None:
    """Spark keeps a pushdown's plan on the DataFrame's relation: had the default reader
    pruned, the second query (nothing to push) would read only SynthTopic0's segments."""
    everything, links = _all(archive)
    df = load(spark_archive, archive, tmp_path)
    assert df.where("topic = 'SynthTopic0'").count() < len(everything)
    assert df.count() == len(everything)
    assert rows(df) == everything
    assert set(opened(tmp_path)) == keys(links).keys()


def test_prune_is_true_or_false(spark_archive: SparkSession, archive: Archive) -> None:
    with pytest.raises(Exception, match="option 'prune' must be true or false, got 'yes'"):
        load(spark_archive, archive, prune="yes").count()


def _all(archive: Archive) -> tuple[list[Row], list[Committed]]:
    return (
        normalise(archive.rows(BROKER) + archive.rows(BROKER_B)),
        archive.links(BROKER) + archive.links(BROKER_B),
    )


def test_topic_and_queue_filters_open_only_that_queue(
    spark_archive: SparkSession, archive: Archive, tmp_path: Path
) -> None:
    everything, links = _all(archive)
    got, seen = _where(spark_archive, archive, tmp_path, "topic = 'SynthTopic0' AND queue_id = 1")
    assert got == [r for r in everything if (r["topic"], r["queue_id"]) == ("SynthTopic0", 1)]
    wanted = [m for m in links if (m.topic, m.queue_id) == ("SynthTopic0", 1)]
    assert seen == keys(wanted)
    assert 1 < len(wanted) < len(links) // 4


def test_topic_in_and_prefix_and_broker_filters(
    spark_archive: SparkSession, archive: Archive, tmp_path: Path
) -> None:
    everything, links = _all(archive)
    condition = "topic IN ('SynthTopic0', 'Other0') AND topic LIKE 'Oth%' AND broker = 'broker-b'"
    got, seen = _where(spark_archive, archive, tmp_path, condition)
    assert got == [r for r in everything if r["topic"] == "Other0"]
    assert seen == keys([m for m in links if m.topic == "Other0"])


def test_offset_filters_open_overlapping_segments_and_read_only_those_offsets(
    spark_archive: SparkSession, archive: Archive, tmp_path: Path
) -> None:
    everything, links = _all(archive)
    queue = sorted(
        (m for m in links if (m.topic, m.queue_id) == ("SynthTopic0", 0)),
        key=lambda m: m.start_offset,
    )
    # From inside the second segment to inside the fourth.
    lo, hi = queue[1].start_offset + 3, queue[3].start_offset + 2
    condition = f"topic = 'SynthTopic0' AND queue_id = 0 AND queue_offset BETWEEN {lo} AND {hi}"
    got, seen = _where(spark_archive, archive, tmp_path, condition)
    assert [r["queue_offset"] for r in got] == list(range(lo, hi + 1))
    assert got == [
        r for r in everything
        if (r["topic"], r["queue_id"]) == ("SynthTopic0", 0) and lo <= r["queue_offset"] <= hi
    ]  # fmt: skip
    assert seen == keys(queue[1:4])


def test_store_timestamp_filters_prune_by_manifest_times(
    spark_archive: SparkSession, archive: Archive, tmp_path: Path
) -> None:
    everything, links = _all(archive)
    times = sorted(m.min_store_timestamp for m in archive.links(BROKER))
    t1, t2 = times[len(times) // 3] + 7, times[2 * len(times) // 3] + 11
    condition = (
        f"store_timestamp >= '{when(t1).strftime('%Y-%m-%d %H:%M:%S.%f')}' "
        f"AND store_timestamp < '{when(t2).strftime('%Y-%m-%d %H:%M:%S.%f')}'"
    )
    got, seen = _where(spark_archive, archive, tmp_path, condition)
    assert got == [r for r in everything if when(t1) <= r["store_timestamp"] < when(t2)]
    assert got
    wanted = [m for m in links if m.max_store_timestamp >= t1 and m.min_store_timestamp < t2]
    assert seen == keys(wanted)
    assert 0 < len(wanted) < len(links)


def test_a_filter_that_cannot_prune_opens_every_segment(
    spark_archive: SparkSession, archive: Archive, tmp_path: Path
) -> None:
    # The control for the tests above: the count does grow when nothing is pruned.
    everything, links = _all(archive)
    got, seen = _where(spark_archive, archive, tmp_path, "body_size > 100 OR queue_id = 0")
    assert got == [r for r in everything if r["body_size"] > 100 or r["queue_id"] == 0]
    assert seen == keys(links)


def test_an_impossible_filter_opens_nothing(
    spark_archive: SparkSession, archive: Archive, tmp_path: Path
) -> None:
    got, seen = _where(spark_archive, archive, tmp_path, "queue_offset < 0")
    assert (got, seen) == ([], Counter())


def test_spark_sql_messages_per_tag_per_day(spark_archive: SparkSession, archive: Archive) -> None:
    load(spark_archive, archive, broker=BROKER).createOrReplaceTempView("archive")
    got = spark_archive.sql(
        "SELECT topic, tags, to_date(store_timestamp) AS day, count(*) AS messages "
        "FROM archive GROUP BY topic, tags, day"
    ).collect()
    expected: Counter[tuple[Any, ...]] = Counter(
        (r["topic"], r["tags"], r["store_timestamp"].date()) for r in archive.rows(BROKER)
    )
    assert {(r.topic, r.tags, r.day): r.messages for r in got} == dict(expected)


def test_read_archive_checks_options_on_the_driver(
    spark_archive: SparkSession, archive: Archive
) -> None:
    df = read_archive(spark_archive, str(archive.cold), CLUSTER, BROKER_B)
    assert rows(df) == normalise(archive.rows(BROKER_B))


BAD_OPTIONS = [
    ({"bogus": "1"}, "tieredstore data source: unknown option 'bogus' (known: cold, cluster,"),
    ({"cluster": ""}, "tieredstore data source: option 'cluster' is required"),
    ({"cluster": "NoSuchCluster"}, "tieredstore data source: no cluster 'NoSuchCluster' in the "
     "cold store (clusters there: DefaultCluster)"),
    ({"broker": "broker-c"}, "tieredstore data source: nothing tiered for broker 'broker-c' "
     "of cluster 'DefaultCluster': looked for 212d6b50_DefaultCluster/broker-c/_tiering.json "
     "(brokers tiered in that cluster there: broker-a, broker-b)"),
    ({"broker": "a/b"}, "tieredstore data source: broker name 'a/b' contains '/'"),
    ({"cold": "memory://x"}, "tieredstore data source: cannot read memory://x: memory:// lives "
     "in one process"),
]  # fmt: skip


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
def test_bad_options_are_one_line_on_the_driver(
    spark_archive: SparkSession, archive: Archive, options: dict[str, str], message: str
) -> None:
    given = {"cluster": CLUSTER} | options
    cold = given.pop("cold", str(archive.cold))
    with pytest.raises(ConfigError) as info:
        read_archive(spark_archive, cold, given.pop("cluster"), **given)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS[:4])
def test_bad_options_name_the_problem_in_spark_errors(
    spark_archive: SparkSession, archive: Archive, options: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception, match="ConfigError") as info:
        load(spark_archive, archive, None, **options)
    # The Python traceback Spark wraps ends with our one line.
    assert f"tieredstore.errors.ConfigError: {message}" in str(info.value)


def test_a_missing_cold_root_and_a_user_schema_are_refused(
    spark_archive: SparkSession, archive: Archive, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="cold store root does not exist"):
        read_archive(spark_archive, str(tmp_path / "absent"), CLUSTER)
    schema = StructType([StructField("queue_offset", LongType())])
    reader = spark_archive.read.format("tieredstore").schema(schema)
    with pytest.raises(Exception, match="the schema is fixed"):
        reader.option("cold", str(archive.cold)).option("cluster", CLUSTER).load().collect()
    assert SPARK_SCHEMA.fieldNames() == list(ARCHIVE_COLUMNS)


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "compressed"])
def test_slices_of_a_batch_read_as_the_segments_they_were(
    spark_archive: SparkSession, archive: Archive, tmp_path: Path, compressed: bool
) -> None:
    """The newest segment of each SynthTopic0 queue moved into one batch object (format 2
    when ``compressed``): the same rows, one partition per slice, and an offset filter
    inside a slice reads only it."""
    cold = tmp_path / "cold"
    shutil.copytree(archive.cold, cold)
    batched = Archive(cold, archive.stores)
    newest: dict[int, Manifest] = {}  # with batching on, batch slices may follow it
    for m in (link.manifest for link in batched.links(BROKER)):
        if m is None or m.topic != "SynthTopic0":
            continue
        if m.start_offset >= newest.get(m.queue_id, m).start_offset:
            newest[m.queue_id] = m
    frames = TEST_FRAMES if compressed else None
    key = asyncio.run(_rebatch(str(cold), list(newest.values()), frames))
    expected = normalise(archive.rows(BROKER) + archive.rows(BROKER_B))
    assert normalise(batched.rows(BROKER) + batched.rows(BROKER_B)) == expected
    trace = tmp_path / "trace"
    assert rows(load(spark_archive, batched, trace)) == expected
    slices = {f"{key}#SynthTopic0/{q}" for q in newest}
    assert slices <= set(opened(trace)) and not set(opened(trace)) & {
        m.key for m in newest.values()
    }

    last = newest[0]
    lo, hi = last.start_offset + 1, last.end_offset - 2
    condition = f"topic = 'SynthTopic0' AND queue_id = 0 AND queue_offset BETWEEN {lo} AND {hi}"
    got, seen = _where(spark_archive, batched, tmp_path / "cut", condition)
    assert [r["queue_offset"] for r in got] == list(range(lo, hi + 1))
    assert seen == Counter({f"{key}#SynthTopic0/0": 1})


async def _rebatch(
    cold: str, manifests: list[Manifest], frames: FrameSettings | None = None
) -> str:
    """:func:`rebatch` at the next free sequence (with batching on, the tiering writer's
    fence and batches hold the first ones)."""
    async with open_backend(cold) as backend:
        prefix = batch_prefix(CLUSTER, BROKER) + "/"
        taken = [parse_batch_key(info.key, prefix) for info in await backend.list(prefix)]
        sequence = 1 + max((s for s in taken if s is not None), default=-1)
        return await rebatch(backend, manifests, sequence=sequence, frames=frames)


def test_the_data_source_reads_a_compressed_copy_as_the_plain_one(
    spark_archive: SparkSession, archive: Archive, compressed_archive: Archive
) -> None:
    expected = rows(load(spark_archive, archive))
    assert expected and rows(load(spark_archive, compressed_archive)) == expected
