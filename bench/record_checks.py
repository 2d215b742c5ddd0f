"""What the sidecar's checks before commit cost: their CPU against a whole tiering run's.

Synthesizes a store of ``--size`` commitlog bytes (default 256 MiB; the tiering bench's
shape: ``--topics`` x ``--queues`` queues, bodies ``--body-min``..``--body-max``), then, on
that one store and in one run:

* **run**: ``tieredstore run --once`` into an empty cold directory, as a subprocess; its
  CPU seconds (best of ``--runs``) are the baseline;
* **pass**: the commitlog pass alone (``gather_segments``, every check included), in
  this process;
* **owner check**: ``RecordOwners.check`` (topic, queue id, physical offset of every
  record) over the same windows the pass reads, and beside it the record-head check it
  joined (``RecordHeads.check``), for scale;
* **segment check**: ``check_built`` of every gathered segment (units against the
  spooled COMMIT_LOG, counts, store-time range).

CPU seconds, best of ``--runs``. Last line::

    RESULT record_checks ratio=<(owner check + segment check) / run CPU> target=<=0.05 PASS|FAIL
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import (
    MIB,
    add_store_arguments,
    machine,
    result_line,
    run_measured,
    sidecar_cmd,
    sidecar_env,
    store_from_args,
    table,
    warm,
)

from tieredstore.cold.segment import RecordHeads, RecordOwners
from tieredstore.dispatcher.tiering.commitlog_pass import (
    WINDOW_BYTES,
    GatherJob,
    Spooled,
    _Merge,
    _Owners,
    _windows,
    gather_segments,
)
from tieredstore.dispatcher.tiering.committer import check_built
from tieredstore.dispatcher.tiering.planner import Limits, SegmentPlan, plan_segment
from tieredstore.hot.commitlog import read_span
from tieredstore.hot.store import HotStore

TARGET = 0.05


def best_cpu(fn: Callable[[], object], runs: int) -> float:
    """The least CPU time (this process) of ``runs`` calls of ``fn``."""
    best = float("inf")
    for _ in range(runs):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_store_arguments(ap, size="256M")
    ap.add_argument("--runs", type=int, default=5, help="repeats of each measurement; best counts")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    print(machine())
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="bench-checks-") as tmp:
        root = Path(tmp)
        store = store_from_args(args, root / "store")
        run_cpu = float("inf")
        for i in range(args.runs):
            warm([store.commitlog_dir, store.root / "consumequeue"])
            cold, state = root / f"cold-{i}", root / f"state-{i}"
            run = run_measured(sidecar_cmd(store.root, str(cold), state), env=sidecar_env())
            run_cpu = min(run_cpu, run.cpu_seconds)
            shutil.rmtree(cold)
            shutil.rmtree(state)
        hot = HotStore(store.root)
        plans = [
            plan_segment(hot, key, 0, Limits(), now_ms=0, guard_ts=None, flush=True)
            for key in hot.queues()
        ]
        jobs = [GatherJob(p, 0) for p in plans if isinstance(p, SegmentPlan)]
        spool = root / "spool"
        spool.mkdir()
        gathered: list[Spooled] = []

        def gather() -> None:
            out = gather_segments(hot, jobs, spool)
            gathered[:] = [s for s in out if isinstance(s, Spooled)]

        t_pass = best_cpu(gather, args.runs)
        files, owners = hot.commitlog_files(), _Owners.of(jobs)
        windows = []
        for rec in _Merge(jobs, 64 << 20).spans():
            for w in _windows(rec, files, WINDOW_BYTES, 256 << 10):
                sel = slice(w.lo, w.hi)
                first, end = int(rec.offset[w.lo]), int((rec.offset[sel] + rec.size[sel]).max())
                buf = read_span(files.files[w.file_index], first, end, bytearray(end - first))
                windows.append((np.frombuffer(buf, np.uint8), rec.offset[sel] - first, rec, sel))

        def heads() -> None:
            for arr, rel, rec, sel in windows:
                RecordHeads.check(arr, rel, rec.size[sel], rec.queue_offset[sel])

        def owner() -> None:
            for arr, rel, rec, sel in windows:
                job = rec.job[sel]
                RecordOwners.check(
                    arr, starts=rel, sizes=rec.size[sel], skip=np.zeros(job.shape[0], bool),
                    queue_ids=owners.queue_ids[job], physical=rec.offset[sel],
                    topics=owners.topics, topic_of=job,
                )  # fmt: skip

        def built() -> None:
            for job, spooled in zip(jobs, gathered, strict=True):
                check_built(job.plan, spooled, job.cl_base)

        t_heads, t_owner, t_built = (best_cpu(f, args.runs) for f in (heads, owner, built))
    records = sum(j.plan.count for j in jobs)
    print(f"{len(jobs)} segments, {records:,} records, {store.commitlog_bytes // MIB} MiB")
    print(
        table(
            ["step", "CPU s", "share of run"],
            [
                ["tieredstore run --once (baseline)", run_cpu, 1.0],
                ["commitlog pass (all checks)", t_pass, t_pass / run_cpu],
                ["  record-head check (before)", t_heads, t_heads / run_cpu],
                ["  owner check (new)", t_owner, t_owner / run_cpu],
                ["segment end-to-end check (new)", t_built, t_built / run_cpu],
            ],
        )
    )
    ratio = (t_owner + t_built) / run_cpu
    print(result_line("record_checks", round(ratio, 4), f"<={TARGET}", passed=ratio <= TARGET))


if __name__ == "__main__":
    main()
