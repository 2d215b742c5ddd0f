"""Verifier throughput on ``local[2]``: consume-queue units/s (offsets level) and record
bytes/s (content level), against the targets in docs/architecture.md, "Performance targets"
(≥ 10 M units/s; ≥ 200 MB/s).

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
import tempfile
from pathlib import Path

from _common import (
    BROKER,
    CLUSTER,
    content_store,
    offsets_store,
    timed_verify,
    verifier_stage_seconds,
    verify_options,
)


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
        content_store(root / "content", args.messages, args.segment_messages)
        results = []
        for level, base, cluster, broker in (
            ("offsets", root / "offsets", CLUSTER, BROKER),
            ("content", root / "content", "DefaultCluster", "broker-a"),
        ):
            opts = verify_options(base / "hot", base / "cold", level, cluster, broker)
            timed_verify(spark, opts)  # warm-up: Python workers, imports, JIT
            took, result = timed_verify(spark, opts)
            stage = min(verifier_stage_seconds(spark, opts) for _ in range(2))
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
