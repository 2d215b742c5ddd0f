"""Querying the archive on ``local[2]``: the ``tieredstore`` DataFrame scan against the
verifier's content stage, and ``tieredstore export`` against pyarrow writing the rows.

One store for everything: ``--messages`` ~1 KiB messages (2 topics x 4 queues) tiered
with the real segment codec into ``--segment-messages`` segments under a local cold
directory (the store of ``verifier_throughput.py``). In one warm SparkSession (each side
run once untimed first, then the best of ``--runs``):

* **scan**: ``spark.read.format("tieredstore")...load()`` written to Spark's ``noop``
  sink, so every column of every row is built and handed to the JVM; MB/s counts the
  COMMIT_LOG bytes of the segments (record bytes), rows/s the messages;
* **verifier stage**: the verifier's per-segment content stage on the same store
  (``verifier_throughput.py``'s ``stage``: reads every object and the hot store,
  digests and compares every record byte), over the same record bytes.

Then, without Spark:

* **export**: ``export_parquet`` (what ``tieredstore export --format parquet`` runs)
  into an empty directory: list, read and check every segment, decode (in ``--jobs``
  processes when above 1; default 1: on two cores, two processes' start-up and the
  segments piped to them cost more than they save at this size), write Parquet
  partitioned by topic and day, record the export manifest;
* **pyarrow**: the same rows, already decoded in memory, written by
  ``pyarrow.dataset.write_dataset`` (multi-threaded) with the same partitioning and
  compression.

Last lines::

    RESULT analytics_scan ratio=<scan MB/s ÷ verifier stage MB/s> target=>=0.5 PASS|FAIL
    RESULT analytics_scan_export ratio=<pyarrow s ÷ export s> target=>=0.5 PASS|FAIL
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
from _common import (
    MIB,
    content_store,
    machine,
    mb_per_s,
    result_line,
    table,
    timed_verify,
    verifier_stage_seconds,
    verify_options,
)

from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.backends import open_backend
from tieredstore.clock import SystemClock
from tieredstore.cold.manifest import Manifest, read_stored
from tieredstore.export.parquet import ExportRequest, export_parquet
from tieredstore.export.rows import ARCHIVE_SCHEMA, SegmentSlice

TARGET = 0.5


def _best(runs: int, once: Callable[[], float]) -> float:
    once()  # warm-up: Python workers, imports, page cache
    return min(once() for _ in range(runs))


def _manifests(cold: Path) -> list[Manifest]:
    paths = sorted(cold.rglob("MANIFEST/*.json"))
    stored = [read_stored(p.read_bytes(), str(p.relative_to(cold))) for p in paths]
    return [m for m in stored if isinstance(m, Manifest)]  # fence markers: no segment


def _scan(spark: Any, cold: Path) -> float:
    df = (
        spark.read.format("tieredstore").option("cold", str(cold))
        .option("cluster", CLUSTER).option("broker", BROKER).load()
    )  # fmt: skip
    t0 = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


def _rows(cold: Path, manifests: list[Manifest]) -> pa.Table:
    """Every row, decoded in memory, with the ``date`` partition column added."""
    batches: list[pa.RecordBatch] = []
    for m in manifests:
        piece = SegmentSlice.whole(
            m, (cold / m.commit_log_key).read_bytes(), (cold / m.consume_queue_key).read_bytes()
        )
        batches += piece.batches(cluster=CLUSTER, broker=BROKER)
    rows = pa.Table.from_batches(batches, schema=ARCHIVE_SCHEMA)
    day = pc.strftime(pc.cast(rows["store_timestamp"], pa.date32()), format="%Y-%m-%d")
    return rows.append_column("date", day)


def _export(cold: Path, out: Path, jobs: int) -> float:
    shutil.rmtree(out, ignore_errors=True)

    async def go() -> None:
        async with open_backend(str(cold)) as c, open_backend(str(out)) as o:
            request = ExportRequest(CLUSTER, BROKER)
            await export_parquet(c, o, request, clock=SystemClock(), jobs=jobs)

    t0 = time.perf_counter()
    asyncio.run(go())
    return time.perf_counter() - t0


def _pyarrow(rows: pa.Table, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    options = pads.ParquetFileFormat().make_write_options(compression="zstd")
    t0 = time.perf_counter()
    pads.write_dataset(rows, out, format="parquet", partitioning=["topic", "date"],
                       partitioning_flavor="hive", file_options=options)  # fmt: skip
    return time.perf_counter() - t0


def _spark_side(args: argparse.Namespace, root: Path, nbytes: int) -> tuple[float, float]:
    """(scan seconds, verifier stage seconds), both warm."""
    from tieredstore.verifier.archive import register
    from tieredstore.verifier.spark.session import spark_session

    opts = verify_options(root / "hot", root / "cold", "content", CLUSTER, BROKER)
    with spark_session(args.master) as spark:
        register(spark)
        timed_verify(spark, opts)  # warm-up of the verifier's frames and workers
        stage = _best(args.runs, lambda: verifier_stage_seconds(spark, opts))
        scan = _best(args.runs, lambda: _scan(spark, root / "cold"))
    print(f"record bytes {nbytes:,} ({nbytes / MIB:,.0f} MiB)")
    return scan, stage


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--segment-messages", type=int, default=25_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--runs", type=int, default=2, help="timed runs per side (best counts)")
    ap.add_argument("--jobs", type=int, default=1, help="export --jobs (default 1)")
    ap.add_argument("--workdir", type=Path, default=None, help="where to write (a temp dir)")
    args = ap.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    print(machine())
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        root = Path(tmp)
        content_store(root, args.messages, args.segment_messages)
        manifests = _manifests(root / "cold")
        nbytes = sum(m.commit_log.size for m in manifests)
        count = sum(m.message_count for m in manifests)
        scan, stage = _spark_side(args, root, nbytes)
        t0 = time.perf_counter()
        rows = _rows(root / "cold", manifests)
        decode = time.perf_counter() - t0
        export = _best(args.runs, lambda: _export(root / "cold", root / "export", args.jobs))
        direct = _best(args.runs, lambda: _pyarrow(rows, root / "pyarrow"))
    print(
        table(
            ["run", "seconds", "MiB/s", "rows/s"],
            [
                ["tieredstore DataFrame scan", scan, mb_per_s(nbytes, scan), int(count / scan)],
                ["verifier content stage", stage, mb_per_s(nbytes, stage), int(count / stage)],
                ["tieredstore export", export, mb_per_s(nbytes, export), int(count / export)],
                ["pyarrow write_dataset", direct, mb_per_s(nbytes, direct), int(count / direct)],
                ["(decode alone, 1 core)", decode, mb_per_s(nbytes, decode), int(count / decode)],
            ],
        )
    )
    print(f"{count:,} messages in {len(manifests)} segments")
    ratio = stage / scan
    print(result_line("analytics_scan", ratio, f">={TARGET}", ratio >= TARGET))
    ratio = direct / export
    print(result_line("analytics_scan_export", ratio, f">={TARGET}", ratio >= TARGET))


if __name__ == "__main__":
    main()
