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

from _common import BROKER, CLUSTER, offsets_store

from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.synth import SynthSpec, synthesize


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
        offsets_store(root / "offsets", args.queues, args.units, args.segment_units)
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
