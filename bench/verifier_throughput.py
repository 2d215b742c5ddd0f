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

Then the fixed cost per run: a whole warm ``verify`` of a near-empty store and the Spark
jobs it runs. And how the stage scales: the same stage timings in a second process
with ``--compare-master`` (default ``local[1]``; the JVM of the first is stopped by
then), compared with ``--master``'s (issue 17: ``local[2]`` >= 1.7x ``local[1]``), and,
as a control, how much faster two processes hash than one on this host right now.

Last lines: ``RESULT verifier_throughput_offsets ratio=<stage units/s> ...``,
``RESULT verifier_throughput_content ratio=<stage bytes/s> ...`` (absolute targets: the
ratio field is the measured rate) and ``RESULT verifier_throughput_scaling
ratio=<stage seconds on --compare-master ÷ on --master, both levels> target=>=1.7``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from _common import (
    BROKER,
    CLUSTER,
    content_store,
    offsets_store,
    result_line,
    timed_verify,
    timed_verify_jobs,
    tiny_store,
    verifier_stage_seconds,
    verify_options,
)

SCALING = 1.7  # data stage: --master (local[2]) at least this much faster than local[1]
_LEVELS = (
    ("offsets", "offsets", CLUSTER, BROKER),
    ("content", "content", "DefaultCluster", "broker-a"),
)


def _arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--units", type=int, default=10_000_000)
    ap.add_argument("--segment-units", type=int, default=250_000)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--segment-messages", type=int, default=25_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument(
        "--compare-master", default="local[1]", help="data stage scaling against ('' skips)"
    )
    ap.add_argument("--repeats", type=int, default=3, help="timed data stages per level (best)")
    ap.add_argument("--workdir", type=Path, default=None, help="where to write (a temp dir)")
    ap.add_argument("--stages-of", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1, not {args.repeats}")
    return args


def _stages(spark: Any, root: Path, repeats: int) -> dict[str, tuple[float, Any]]:
    """Per level: the best of ``repeats`` data-stage timings after a warm-up run, and the
    options of the run."""
    out = {}
    for level, folder, cluster, broker in _LEVELS:
        opts = verify_options(root / folder / "hot", root / folder / "cold", level, cluster, broker)
        timed_verify(spark, opts)  # warm-up: Python workers, imports, JIT
        stage = min(verifier_stage_seconds(spark, opts) for _ in range(repeats))
        out[level] = (stage, opts)
    return out


def _stage_seconds_elsewhere(root: Path, master: str, repeats: int) -> dict[str, float]:
    """The data stages over the stores under ``root``, timed in a process of their own."""
    cmd = [sys.executable, __file__, "--stages-of", str(root), "--master", master,
           "--repeats", str(repeats)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    found = [line.split() for line in proc.stdout.splitlines() if line.startswith("STAGE ")]
    return {level: float(seconds) for _, level, seconds in found}


def _sha256_seconds(_unit: int) -> float:
    data = bytes(64 << 20)
    t0 = time.perf_counter()
    for _ in range(4):
        hashlib.sha256(data).digest()
    return time.perf_counter() - t0


def host_scaling(workers: int = 2, units: int = 4) -> float:
    """How much faster ``workers`` processes do the same CPU-bound work than one: what
    this host can give a ``local[2]`` stage right now (a shared host may give ~1x)."""
    took = []
    for n in (1, workers):
        with ProcessPoolExecutor(n) as pool:
            t0 = time.perf_counter()
            list(pool.map(_sha256_seconds, range(units)))
            took.append(time.perf_counter() - t0)
    return took[0] / took[1]


def main() -> None:
    args = _arguments()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from tieredstore.verifier.spark.session import spark_session

    if args.stages_of is not None:  # the second process of the scaling comparison
        with spark_session(args.master) as spark:
            for level, (stage, _opts) in _stages(spark, args.stages_of, args.repeats).items():
                print(f"STAGE {level} {stage}")
        return
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        root = Path(tmp)
        offsets_store(root / "offsets", args.queues, args.units, args.segment_units)
        content_store(root / "content", args.messages, args.segment_messages)
        tiny = tiny_store(root / "tiny")
        with spark_session(args.master) as spark:
            stages = _stages(spark, root, args.repeats)
            runs = {level: timed_verify(spark, opts) for level, (_s, opts) in stages.items()}
            tiny_opts = verify_options(tiny / "hot", tiny / "cold", "offsets", CLUSTER, BROKER)
            fixed = min(
                (timed_verify_jobs(spark, tiny_opts) for _ in range(min(2, args.repeats))),
                key=lambda r: r[0],
            )
        other = (
            _stage_seconds_elsewhere(root, args.compare_master, args.repeats)
            if args.compare_master
            else {}
        )
    host = host_scaling() if args.compare_master else 0.0
    _report(args, stages, runs, fixed, other, host)


def _report(
    args: argparse.Namespace,
    stages: dict[str, tuple[float, Any]],
    runs: dict[str, tuple[float, Any]],
    fixed: tuple[float, int, Any],
    other: dict[str, float],
    host: float,
) -> None:
    for level, (took, result) in runs.items():
        stage = stages[level][0]
        unit = "units" if level == "offsets" else "bytes"
        totals = result.totals
        amount = totals.units_compared if level == "offsets" else totals.bytes_compared
        print(
            f"{level}: {amount:,} {unit}; run {took:.2f} s = {amount / took:,.0f} {unit}/s, "
            f"stage {stage:.2f} s = {amount / stage:,.0f} {unit}/s; {result.verdict.value}"
        )
    print(
        f"fixed cost per run (near-empty store, warm session, {args.master}): "
        f"{fixed[0]:.2f} s, {fixed[1]} Spark jobs; {fixed[2].verdict.value}"
    )
    for level, (_took, result) in runs.items():
        totals = result.totals
        amount = totals.units_compared if level == "offsets" else totals.bytes_compared
        target = 10e6 if level == "offsets" else 200e6
        rate = amount / stages[level][0]
        print(
            f"RESULT verifier_throughput_{level} ratio={rate:.0f} target=>={target:.0f} "
            f"{'PASS' if rate >= target else 'FAIL'}"
        )
    if other:
        here = sum(stage for stage, _opts in stages.values())
        there = sum(other.values())
        each = ", ".join(
            f"{level} {other[level]:.2f} s vs {stages[level][0]:.2f} s" for level in other
        )
        print(f"data stage, {args.compare_master} vs {args.master}: {each}")
        print(f"host control: sha256 in 2 processes {host:.2f}x as fast as in 1")
        ratio = there / here
        print(result_line("verifier_throughput_scaling", ratio, f">={SCALING}", ratio >= SCALING))


if __name__ == "__main__":
    main()
