"""Verifier throughput on ``local[2]``: consume-queue units/s (offsets level) and record
bytes/s (content level), against DESIGN.md §10 (≥ 10 M units/s; ≥ 200 MB/s).

* **offsets**: a store built directly with numpy — ``--queues`` queues of ``--units``
  consume-queue units in total, cut into ``--segment-units`` segments (commit-log objects
  are sparse files: the offsets level never reads them).
* **content**: a synthetic store of ``--messages`` ~1 KiB messages tiered with the real
  segment codec, every record compared byte for byte with the hot one.

Two numbers per level, in one SparkSession, after a warm-up run:

* ``run``: a whole ``verify`` (listing, manifests, hot ranges, every check, collect);
  on small stores it is dominated by Spark's fixed cost per run (planning, a few dozen
  small jobs: seconds), which does not grow with the data;
* ``stage``: the data-proportional part alone — the per-segment verification stage
  (``mapInArrow`` reading every object and the hot store), timed over inputs already
  computed and cached. The target applies to this one.

Last lines: ``RESULT verifier_throughput_offsets ratio=<stage units/s> ...`` and
``RESULT verifier_throughput_content ratio=<stage bytes/s> ...`` (absolute targets: the
ratio field is the measured rate).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from tieredstore.formats.consumequeue import CQ_UNIT_DTYPE, CQ_UNIT_SIZE, encode_units
from tieredstore.layout import object_name
from tieredstore.segment import DIGEST_ALGORITHM, FORMAT_VERSION, Manifest, ObjectRef, digest
from tieredstore.synth import SynthSpec, synthesize

CLUSTER, BROKER = "BenchCluster", "bench-broker"
RECORD = 200  # bytes per record in the numpy-built store


def _offsets_store(root: Path, queues: int, units: int, segment_units: int) -> None:
    per_queue = units // queues
    file_units = 300_000
    (root / "hot" / "commitlog").mkdir(parents=True)
    (root / "hot" / "commitlog" / f"{0:020d}").write_bytes(bytes(8))
    for q in range(queues):
        hot = np.zeros(per_queue, dtype=CQ_UNIT_DTYPE)
        hot["commitlog_offset"] = (np.arange(per_queue, dtype=np.int64) * queues + q) * RECORD
        hot["size"] = RECORD
        hot["tags_code"] = np.arange(per_queue) % 7
        qdir = root / "hot" / "consumequeue" / "BenchTopic" / str(q)
        qdir.mkdir(parents=True)
        raw = hot.tobytes()
        size = file_units * CQ_UNIT_SIZE
        for base in range(0, len(raw), size):
            chunk = raw[base : base + size]
            (qdir / f"{base:020d}").write_bytes(chunk + bytes(size - len(chunk)))
        for start in range(0, per_queue, segment_units):
            end = min(start + segment_units, per_queue)
            cold = hot[start:end].copy()
            cold["commitlog_offset"] = start * RECORD + np.arange(end - start) * RECORD
            cq = encode_units(cold)
            cl_base, cl_size = start * RECORD, (end - start) * RECORD
            m = Manifest(
                format_version=FORMAT_VERSION, cluster=CLUSTER, broker=BROKER,
                topic="BenchTopic", queue_id=q, start_offset=start, end_offset=end,
                cl_base=cl_base, cl_end=cl_base + cl_size,
                commit_log=ObjectRef(object_name(cl_base), cl_size, "0" * 64),
                consume_queue=ObjectRef(object_name(start * CQ_UNIT_SIZE), len(cq), digest(cq)),
                digest_algorithm=DIGEST_ALGORITHM, min_store_timestamp=1,
                max_store_timestamp=1, message_count=end - start, writer_id="bench",
                lease_epoch=1, created_at_ms=0,
            )  # fmt: skip
            for key, data in ((m.consume_queue_key, cq), (m.key, m.to_json())):
                path = root / "cold" / key
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            path = root / "cold" / m.commit_log_key
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as fh:
                fh.truncate(cl_size)
    (root / "hot" / "checkpoint").write_bytes(bytes(4096))


def _content_store(root: Path, messages: int, segment_messages: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.verifier.tiering import tier, write_local

    spec = SynthSpec(
        topics=2, queues=4, messages=messages, body_min=900, body_max=1100,
        commitlog_file_size=256 << 20, cq_file_size=300_000 * CQ_UNIT_SIZE, compress_over=0,
    )  # fmt: skip
    synthesize(root / "hot", spec)
    write_local(tier(root / "hot", segment_messages=segment_messages), root / "cold")


def _options(hot: Path, cold: Path, level: str, cluster: str, broker: str) -> Any:
    from verifier.model import LagAllowance, LagUnit, Level, VerifyOptions

    return VerifyOptions(
        hot=hot, cold_url=str(cold), cluster=cluster, broker=broker,
        now_ms=time.time_ns() // 1_000_000, level=Level(level),
        lag_allowance=LagAllowance(LagUnit.MESSAGES, 0),
    )  # fmt: skip


def _run(spark: Any, opts: Any) -> tuple[float, Any]:
    from verifier.job import verify

    t0 = time.perf_counter()
    result = verify(spark, opts)
    return time.perf_counter() - t0, result


def _stage(spark: Any, opts: Any) -> float:
    """Seconds of the per-segment verification stage over cached inputs."""
    from tieredstore.hotstore import HotStore
    from verifier import checks, readers

    cold = readers.ColdLocation(opts.cold_url)
    listing = readers.list_cold_objects(cold, opts.cluster, opts.broker)
    objects = readers.objects_frame(spark, listing).cache()
    segments = readers.manifest_frame(objects, cold).cache()
    hot_q = readers.hot_queue_frame(
        spark, HotStore(opts.hot).queues(), opts.hot, opts.lag_allowance, 0
    ).cache()
    work = checks.segment_work(checks.valid_segments(segments), objects, hot_q).cache()
    n = work.count()
    facts = readers.segment_facts_frame(work, cold, opts.hot, opts.level, n)
    t0 = time.perf_counter()
    facts.collect()
    took = time.perf_counter() - t0
    for df in (work, hot_q, segments, objects):
        df.unpersist()
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--units", type=int, default=10_000_000)
    ap.add_argument("--segment-units", type=int, default=250_000)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--segment-messages", type=int, default=25_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--workdir", type=Path, default=None, help="where to write (a temp dir)")
    args = ap.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from verifier.job import spark_session

    with (
        tempfile.TemporaryDirectory(dir=args.workdir) as tmp,
        spark_session(args.master) as spark,
    ):
        root = Path(tmp)
        _offsets_store(root / "offsets", args.queues, args.units, args.segment_units)
        _content_store(root / "content", args.messages, args.segment_messages)
        results = []
        for level, base, cluster, broker in (
            ("offsets", root / "offsets", CLUSTER, BROKER),
            ("content", root / "content", "DefaultCluster", "broker-a"),
        ):
            opts = _options(base / "hot", base / "cold", level, cluster, broker)
            _run(spark, opts)  # warm-up: Python workers, imports, JIT
            took, result = _run(spark, opts)
            stage = min(_stage(spark, opts) for _ in range(2))
            totals = result.totals
            amount = totals.units_compared if level == "offsets" else totals.bytes_compared
            results.append((level, amount, took, stage, result.verdict.value))
    for level, amount, took, stage, verdict in results:
        unit = "units" if level == "offsets" else "bytes"
        print(
            f"{level}: {amount:,} {unit}; run {took:.2f} s = {amount / took:,.0f} {unit}/s, "
            f"stage {stage:.2f} s = {amount / stage:,.0f} {unit}/s; {verdict}"
        )
    for level, amount, _took, stage, _verdict in results:
        target = 10e6 if level == "offsets" else 200e6
        rate = amount / stage
        print(
            f"RESULT verifier_throughput_{level} ratio={rate:.0f} target=>={target:.0f} "
            f"{'PASS' if rate >= target else 'FAIL'}"
        )


if __name__ == "__main__":
    main()
