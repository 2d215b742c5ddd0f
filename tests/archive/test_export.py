"""``tieredstore export --format parquet``: rows, layout, idempotence, increments, errors."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path
from typing import Any

import fsspec
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from tests.fixtures_sidecar import Tier
from tests.support.moto import ACCESS_KEY, REGION, SECRET_KEY, S3Bucket
from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.backends import open_backend
from tieredstore.cli.main import main
from tieredstore.clock import VirtualClock
from tieredstore.export.parquet import (
    DICTIONARY_COLUMNS,
    STATISTICS_COLUMNS,
    ExportReport,
    ExportRequest,
    export_manifest_key,
    export_parquet,
)
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize

from .conftest import BROKER_B, Archive, Row, expected_rows, links, normalise


def export(cold: Path | str, out: Path | str, *flags: str, broker: str = BROKER) -> int:
    return main(["export", "--format", "parquet", "--cold", str(cold), "--cluster", CLUSTER,
                 "--broker", broker, "--out", str(out), *flags])  # fmt: skip


def read_back(out: Path | str, filesystem: Any = None) -> list[Row]:
    """The exported rows (hive partitions topic= and date=), each date checked."""
    table = pads.dataset(str(out), format="parquet", partitioning="hive",
                         filesystem=filesystem).to_table()  # fmt: skip
    rows = table.to_pylist()
    for r in rows:
        assert str(r.pop("date")) == r["store_timestamp"].date().isoformat()
    return normalise(rows)


def files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*.parquet")}


def run_export(cold: Path, out: Path, **request: Any) -> ExportReport:
    async def go() -> ExportReport:
        async with open_backend(str(cold)) as c, open_backend(str(out)) as o:
            req = ExportRequest(CLUSTER, request.pop("broker", BROKER), **request)
            return await export_parquet(c, o, req, clock=VirtualClock())

    return asyncio.run(go())


@pytest.mark.slow
def test_export_round_trip_two_brokers_in_one_output(
    archive: Archive, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert export(archive.cold, out) == 0
    assert export(archive.cold, out, broker=BROKER_B) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith(f"exported {len(archive.links())} segments (")
    assert read_back(out) == normalise(archive.rows() + archive.rows(BROKER_B))
    # Partitioned by topic and day; one file per segment and day; no topic column inside.
    top = sorted(p.name for p in out.iterdir())
    assert top == ["_tieredstore_export", "topic=Other0", "topic=SynthTopic0",
                   f"topic={archive.rows()[-1]['topic']}"]  # fmt: skip
    names = {p.name for p in out.rglob("*.parquet")}
    assert f"{CLUSTER}+{BROKER}+0+{0:020d}.parquet" in names
    assert "topic" not in pads.dataset(next(out.rglob("*.parquet"))).schema.names
    doc = json.loads((out / export_manifest_key(CLUSTER, BROKER)).read_text())
    assert set(doc["segments"]) == {m.history_key for m in archive.links()}


def test_only_few_valued_columns_are_dictionary_encoded(archive: Archive, tmp_path: Path) -> None:
    assert export(archive.cold, tmp_path) == 0
    meta = pq.ParquetFile(next(tmp_path.rglob("*.parquet"))).metadata.row_group(0)
    columns = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    dictionary = {p for p, c in columns.items() if "RLE_DICTIONARY" in c.encodings}
    assert dictionary == set(DICTIONARY_COLUMNS)
    with_stats = {p for p, c in columns.items() if c.is_stats_set}
    assert with_stats == set(STATISTICS_COLUMNS)
    assert "body" not in with_stats and "store_timestamp" in with_stats


@pytest.mark.slow
def test_parallel_jobs_write_the_same_files(archive: Archive, tmp_path: Path) -> None:
    assert export(archive.cold, tmp_path / "one") == 0
    assert export(archive.cold, tmp_path / "two", "--jobs", "2") == 0
    assert files(tmp_path / "two") == files(tmp_path / "one")
    assert read_back(tmp_path / "two") == normalise(archive.rows())


def test_a_rerun_exports_nothing_and_changes_nothing(archive: Archive, tmp_path: Path) -> None:
    first = run_export(archive.cold, tmp_path)
    before = files(tmp_path)
    second = run_export(archive.cold, tmp_path)
    assert (first.exported, first.skipped) == (len(archive.links()), 0)
    assert (second.exported, second.skipped, second.rows) == (0, first.exported, 0)
    assert files(tmp_path) == before
    assert read_back(tmp_path) == normalise(archive.rows())


@pytest.mark.slow
def test_a_lost_export_manifest_never_duplicates_rows(archive: Archive, tmp_path: Path) -> None:
    # A crash after the files and before the manifest: everything is exported again,
    # onto the same file names.
    run_export(archive.cold, tmp_path)
    before = files(tmp_path)
    (tmp_path / export_manifest_key(CLUSTER, BROKER)).unlink()
    again = run_export(archive.cold, tmp_path)
    assert again.exported == len(archive.links())
    assert files(tmp_path) == before
    assert read_back(tmp_path) == normalise(archive.rows())


def test_a_changed_segment_is_exported_again_and_its_stale_files_go(
    archive: Archive, tmp_path: Path
) -> None:
    run_export(archive.cold, tmp_path)
    key = export_manifest_key(CLUSTER, BROKER)
    doc = json.loads((tmp_path / key).read_text())
    victim = sorted(doc["segments"])[3]
    stale = "topic=SynthTopic0/date=2001-01-01/stale.parquet"
    (tmp_path / stale).parent.mkdir(parents=True)
    (tmp_path / stale).write_bytes(next(iter(files(tmp_path).values())))
    entry = doc["segments"][victim]
    entry |= {"manifest_sha256": "0" * 64, "files": [*entry["files"], stale]}
    (tmp_path / key).write_text(json.dumps(doc))
    report = run_export(archive.cold, tmp_path)
    assert (report.exported, report.skipped) == (1, len(archive.links()) - 1)
    assert not (tmp_path / stale).exists()
    assert read_back(tmp_path) == normalise(archive.rows())


def test_the_next_run_exports_only_new_segments(tmp_path: Path, tier: Tier) -> None:
    store, cold, state, out = (tmp_path / d for d in ("store", "cold", "state", "out"))
    synthesize(store, SynthSpec(topics=1, queues=2, messages=150, seed=9))
    asyncio.run(tier(store, str(cold), state))
    first = run_export(cold, out)
    SyntheticStore.open(store).append(250)
    asyncio.run(tier(store, str(cold), state))
    total = len(asyncio.run(links(str(cold), BROKER)))
    second = run_export(cold, out)
    assert first.exported > 0 and second.exported == total - first.exported > 0
    assert second.skipped == first.exported
    got = read_back(out)
    assert got == normalise(asyncio.run(expected_rows(str(cold), BROKER)))
    assert len(got) == 400


def test_topics_and_time_select_segments(archive: Archive, tmp_path: Path) -> None:
    ms = archive.links()
    times = sorted(m.min_store_timestamp for m in ms)
    since, until = times[len(times) // 3], times[2 * len(times) // 3]
    code = export(archive.cold, tmp_path, "--topics", "Synth*0", "--since", str(since),
                  "--until", str(until))  # fmt: skip
    assert code == 0
    wanted = [m for m in ms if m.topic == "SynthTopic0"
              and m.max_store_timestamp >= since and m.min_store_timestamp < until]  # fmt: skip
    doc = json.loads((tmp_path / export_manifest_key(CLUSTER, BROKER)).read_text())
    assert set(doc["segments"]) == {m.history_key for m in wanted}
    ranges = {(m.queue_id, o) for m in wanted for o in range(m.start_offset, m.end_offset)}
    got = read_back(tmp_path)
    assert {(r["queue_id"], r["queue_offset"]) for r in got} == ranges
    assert len(got) == len(ranges)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--format", "csv"], "argument --format: invalid choice: 'csv'"),
        (["--format", "parquet", "--jobs", "0"], "argument --jobs: must be >= 1, got 0"),
        (["--format", "parquet", "--since", "yesterday"], "argument --since: 'yesterday' is "
         "neither epoch milliseconds nor an ISO 8601 time"),
        (["--format", "parquet", "--since", "2024-01-02", "--until", "2024-01-01"],
         "tieredstore export: --since 1704153600000 is not before --until 1704067200000"),
        (["--format", "parquet", "--cold", "/nonexistent/cold"], "tieredstore export: cold "
         "store root does not exist (/nonexistent/cold)"),
    ],
)  # fmt: skip
def test_bad_options_are_one_line_and_exit_3(
    archive: Archive,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    message: str,
) -> None:
    args = ["export", "--cold", str(archive.cold), "--cluster", CLUSTER, "--broker", BROKER,
            "--out", str(tmp_path / "out")]  # fmt: skip
    if "argument" in message:  # argparse: exits 3 itself
        with pytest.raises(SystemExit) as info:
            main([*args, *flags])
        assert info.value.code == 3
    else:
        assert main([*args, *flags]) == 3
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.spark
def test_spark_reads_the_export_back_with_escaped_topics(
    spark: SparkSession, golden: Archive, tmp_path: Path
) -> None:
    assert export(golden.cold, tmp_path) == 0
    retry = next(p.name for p in tmp_path.iterdir() if p.name.startswith("topic=%25RETRY%25"))
    expected = normalise(golden.rows())
    assert retry == "topic=" + next(
        r["topic"] for r in expected if r["topic"].startswith("%RETRY%")
    ).replace("%", "%25")
    df = spark.read.parquet(str(tmp_path))
    got = {
        (r.topic, r.queue_id, r.queue_offset)
        for r in df.select("topic", "queue_id", "queue_offset").collect()
    }
    assert got == {(r["topic"], r["queue_id"], r["queue_offset"]) for r in expected}
    assert read_back(tmp_path) == expected


@pytest.mark.slow
@pytest.mark.s3
def test_export_from_s3_to_s3(archive: Archive, s3_bucket: S3Bucket) -> None:
    fs, _ = fsspec.core.url_to_fs(
        s3_bucket.url, endpoint_url=s3_bucket.endpoint_url, key=ACCESS_KEY, secret=SECRET_KEY,
        client_kwargs={"region_name": REGION},
    )  # fmt: skip
    broker_files = [p for p in archive.cold.rglob("*") if p.is_file() and BROKER_B in p.parts]
    fs.pipe({f"{s3_bucket.name}/cold/{p.relative_to(archive.cold)}": p.read_bytes()
             for p in broker_files})  # fmt: skip
    out = f"{s3_bucket.url}/lake"
    flags = ["--endpoint-url", s3_bucket.endpoint_url]
    assert export(f"{s3_bucket.url}/cold", out, *flags, broker=BROKER_B) == 0
    assert read_back(f"{s3_bucket.name}/lake", filesystem=fs) == normalise(archive.rows(BROKER_B))
    assert export(f"{s3_bucket.url}/cold", out, *flags, broker=BROKER_B) == 0  # idempotent
    assert len(read_back(f"{s3_bucket.name}/lake", filesystem=fs)) == len(archive.rows(BROKER_B))


def test_a_damaged_segment_stops_the_run_and_keeps_what_was_exported(
    archive: Archive, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cold = tmp_path / "cold"
    shutil.copytree(archive.cold, cold)
    ordered = sorted(archive.links(), key=lambda m: m.history_key)  # the order export walks
    victim = ordered[4]
    path, span = cold / victim.commit_log_key, victim.commit_log  # a segment's or slice's
    data = bytearray(path.read_bytes())
    data[span.at + span.size // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert export(cold, tmp_path / "out") == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("tieredstore export: object crc32c is ")
    assert victim.commit_log_key in err and len(err.splitlines()) == 1
    doc = json.loads((tmp_path / "out" / export_manifest_key(CLUSTER, BROKER)).read_text())
    assert set(doc["segments"]) == {m.history_key for m in ordered[:4]}


def test_export_shows_its_progress_and_a_human_final_line(
    archive: Archive, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--progress on``: a rewritten stderr line (segments looked at of those listed,
    what was written, the rate, an ETA), ended before the final line; sizes in MiB/KiB."""
    total = len(archive.links())
    assert export(archive.cold, tmp_path / "out", "--progress", "on") == 0
    captured = capsys.readouterr()
    drawn = [d.rstrip() for d in captured.err.split("\r") if d.strip()]
    assert drawn, captured.err
    pattern = (
        rf"exported [\d,]+ of [\d,]+/{total} segments, [\d,]+ rows, [\d.]+ (B|KiB|MiB) "
        r"\([\d.]+ (B|KiB|MiB)/s\), ETA .+"
    )
    assert all(re.fullmatch(pattern, d) for d in drawn), drawn
    assert drawn[-1].startswith(f"exported {total} of {total}/{total} segments")
    assert captured.err.endswith("\n")  # the line is ended
    final = captured.out.splitlines()[0]
    assert re.fullmatch(
        rf"exported {total} segments \([\d]+ rows, [\d]+ files, [\d.]+ (KiB|MiB)\) to .+ "
        r"in [\d.]+ m?s; 0 of \d+ selected were exported before",
        final,
    ), final
    assert export(archive.cold, tmp_path / "quiet", "--progress", "off") == 0
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_export_of_a_compressed_copy_writes_the_same_rows(
    archive: Archive, compressed_archive: Archive, tmp_path: Path
) -> None:
    assert export(archive.cold, tmp_path / "plain") == 0
    assert export(compressed_archive.cold, tmp_path / "zstd") == 0
    expected = read_back(tmp_path / "plain")
    assert expected and read_back(tmp_path / "zstd") == expected
