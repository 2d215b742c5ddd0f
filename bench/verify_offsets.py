"""Verifier throughput, offsets level: consume-queue units/s on ``local[2]``, vs raw numpy.

Builds a tiered store directly with numpy (no sidecar: the offsets level never reads
records): ``--queues`` queues holding ``--units`` consume-queue units in all, in hot CQ
files of 300,000 units, and in cold segments of ``--segment-units`` units (CONSUME_QUEUE
object + manifest; COMMIT_LOG objects are sparse files of the right size). Then times:

* **verifier**: ``python -m tieredstore.verifier --level offsets --master local[2]`` as a process.
  ``job`` is the Spark job alone (``report.json`` finished − started: no JVM start-up,
  no report writing); ``process`` is the whole command. The rate counts the verifier's
  own ``units_compared``;
* **numpy**: one Python process doing the same comparison the plainest way — every hot
  CQ file and cold CONSUME_QUEUE object read with ``np.fromfile``, every manifest
  parsed, sizes and tags compared, cold offsets checked contiguous.

Files are warm for both (just written, then read once). Then the fixed cost per run: a
whole verifier process on a near-empty store (its time, its Spark jobs). Last lines::

    RESULT verify_offsets_vs_numpy ratio=<job rate ÷ numpy rate> target=>=0.5 PASS|FAIL
    RESULT verify_offsets ratio=<job rate ÷ numpy rate> target=>=10M_units/s PASS|FAIL

(the first PASS on the ratio, the target at 200 M units; the second on the job's
absolute rate.)
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from _common import (
    BROKER,
    CLUSTER,
    Stopwatch,
    add_fixed_cost_argument,
    fixed_cost_line,
    machine,
    offsets_store,
    result_line,
    table,
    verifier_run,
    warm,
)

from tieredstore.formats.consumequeue import CQ_UNIT_DTYPE

TARGET = 10_000_000  # units/s
VS_NUMPY = 0.5  # the job's rate / the numpy baseline's (issue 17: at 200 M units)


def numpy_baseline(root: Path) -> int:
    """Compare every cold CQ unit with its hot unit the plainest way; return the count."""
    checked = 0
    for qdir in sorted((root / "hot" / "consumequeue" / "BenchTopic").iterdir()):
        hot = np.concatenate([np.fromfile(f, dtype=CQ_UNIT_DTYPE) for f in sorted(qdir.iterdir())])
        for mpath in sorted((root / "cold").rglob("MANIFEST/*.json")):
            if f"/BenchTopic/{qdir.name}/" not in str(mpath):
                continue
            m = json.loads(mpath.read_text())
            start, end = m["start_offset"], m["end_offset"]
            cq_name = m["consume_queue"]["name"]
            cold = np.fromfile(mpath.parent.parent / "CONSUME_QUEUE" / cq_name, dtype=CQ_UNIT_DTYPE)
            sizes = cold["size"].astype(np.int64)
            expect = m["cl_base"] + np.concatenate(([0], np.cumsum(sizes)[:-1]))
            ref = hot[start:end]
            ok = (
                len(cold) == end - start
                and bool(np.array_equal(cold["size"], ref["size"]))
                and bool(np.array_equal(cold["tags_code"], ref["tags_code"]))
                and bool(np.array_equal(cold["commitlog_offset"], expect))
            )
            if not ok:
                raise RuntimeError(f"baseline found a mismatch in {mpath}")
            checked += len(cold)
    return checked


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--units", type=int, default=20_000_000, help="CQ units in all (20M)")
    ap.add_argument("--queues", type=int, default=16)
    ap.add_argument("--segment-units", type=int, default=250_000)
    ap.add_argument("--master", default="local[2]")
    add_fixed_cost_argument(ap)
    ap.add_argument("--workdir", type=Path, default=None, help="where to write (a temp dir)")
    args = ap.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="bench-verify-offsets-") as tmp:
        root = Path(tmp)
        with Stopwatch() as sw:
            units = offsets_store(root, args.queues, args.units, args.segment_units)
        print(
            f"store: {units:,} units in {args.queues} queues, segments of "
            f"{args.segment_units:,} units (built in {sw.seconds:.1f} s); warm files"
        )
        warm([root / "hot" / "consumequeue", root / "cold"])
        with Stopwatch() as base:
            checked = numpy_baseline(root)
        run = verifier_run(
            root / "hot",
            str(root / "cold"),
            level="offsets",
            out=root / "report",
            master=args.master,
            cluster=CLUSTER,
            broker=BROKER,
        )
        fixed = fixed_cost_line(root, master=args.master, measure=args.fixed_cost)
    if checked != units:
        raise RuntimeError(f"baseline checked {checked} units of {units}")
    job_rate, base_rate = run.units / run.job_seconds, checked / base.seconds
    print(
        table(
            ["run", "seconds", "units", "units/s"],
            [
                ["verifier job (Spark)", run.job_seconds, run.units, round(job_rate)],
                ["verifier process", run.seconds, run.units, round(run.units / run.seconds)],
                ["numpy baseline", base.seconds, checked, round(base_rate)],
            ],
        )
    )
    start_up = run.seconds - run.job_seconds
    print(f"verifier verdict {run.verdict}; JVM start-up and report writing {start_up:.1f} s")
    print("\n".join(run.profile.lines()))
    print(fixed)
    ratio = job_rate / base_rate
    print(result_line("verify_offsets_vs_numpy", ratio, ">=0.5", ratio >= VS_NUMPY))
    print(result_line("verify_offsets", ratio, ">=10M_units/s", job_rate >= TARGET))


if __name__ == "__main__":
    main()
