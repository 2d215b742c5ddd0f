"""Tiering lag: time from a broker append to its cold commit, with the sidecar running.

Starts ``tieredstore run`` (the long-running sidecar, posix cold store, segments cut by
age: ``--age`` seconds, tick ``--tick`` seconds) on an empty synthetic store, waits until
it is up, then plays a broker: appends messages at a steady ``--rate`` for
``--duration`` seconds in batches of 50 ms (commitlog, then consume queue, then
checkpoint, as :meth:`SyntheticStore.append` does), with store timestamps that follow the
wall clock. When the writer stops, waits for every message to be committed, then stops
the sidecar with SIGTERM.

A message's *append time* is when the append of its batch returned; its *commit time* is
the mtime of the manifest of the segment holding it (the manifest is the commit point),
or of the batch object holding its slice (``tiering.batching``, on by default).
Reports p50/p99/max of commit − append over every message. Last line::

    RESULT lag ratio=<p99 ÷ (age + tick)> target=p99<=<age+tick>s PASS|FAIL
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from _common import (
    MIB,
    batch_objects,
    machine,
    result_line,
    sidecar_cmd,
    sidecar_env,
    table,
    vm_hwm,
)

from tieredstore.formats.checkpoint import read_checkpoint
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SyntheticStore, SynthSpec

_READY = "reconciled catalogue with cold store"


@dataclass(frozen=True, slots=True)
class Appends:
    """Batches written: the commitlog end after each, and when its append returned."""

    cl_ends: np.ndarray  # int64, ascending
    times: np.ndarray  # float64 epoch seconds


def wait_for(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Block until ``text`` appears in ``log``; RuntimeError if the process dies first."""
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"sidecar not ready (exit {proc.poll()}); see {log}")
        time.sleep(0.05)


def write_steadily(store: SyntheticStore, rate_interval_ms: int, duration: float) -> Appends:
    """Append one message every ``rate_interval_ms`` ms of wall clock, in 50 ms batches.

    Message ``i`` has store time ``spec.start_time + i * interval``; its batch is written
    as soon as the wall clock reaches the store time of the batch's last message.
    """
    batch = max(1, 50 // rate_interval_ms)
    total = int(duration * 1000 / rate_interval_ms)
    ends, times = [], []
    start_ms = store.spec.start_time
    for first in range(0, total, batch):
        n = min(batch, total - first)
        due = (start_ms + (first + n - 1) * rate_interval_ms) / 1000
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        store.append(n)
        times.append(time.time())
        ends.append(read_checkpoint(store.root / "checkpoint").confirm_phy_offset)
    return Appends(np.array(ends, dtype=np.int64), np.array(times, dtype=np.float64))


def committed(cold: Path) -> dict[tuple[str, int], list[tuple[int, int, float]]]:
    """Per queue, the committed segments and slices as (start, end, commit mtime in s)."""
    out: dict[tuple[str, int], list[tuple[int, int, float]]] = {}
    for path in cold.rglob("MANIFEST/*.json"):
        m = json.loads(path.read_text())
        key = (str(m["topic"]), int(m["queue_id"]))
        entry = (int(m["start_offset"]), int(m["end_offset"]), path.stat().st_mtime_ns / 1e9)
        out.setdefault(key, []).append(entry)
    for path, _raw, head in batch_objects(cold):  # tiering.batching: the batch commits them
        mtime = path.stat().st_mtime_ns / 1e9
        for part in head.index.slices:
            entry = (part.start_offset, part.end_offset, mtime)
            out.setdefault((part.topic, part.queue_id), []).append(entry)
    return out


def all_committed(hot: HotStore, cold: Path) -> bool:
    """Whether every message of every hot queue is in a committed segment."""
    done = {k: max(e for _, e, _ in v) for k, v in committed(cold).items()}
    return all(
        done.get((q.topic, q.queue_id), 0) >= hot.queue_range(q.topic, q.queue_id).max
        for q in hot.queues()
    )


def lags(hot: HotStore, cold: Path, appends: Appends) -> np.ndarray:
    """Commit − append seconds of every message in the store."""
    segments = committed(cold)
    out = []
    for q in hot.queues():
        rng = hot.queue_range(q.topic, q.queue_id)
        units = hot.read_units(q.topic, q.queue_id, rng.min, rng.max)
        commit = np.full(rng.max, np.nan)
        for start, end, mtime in segments.get((q.topic, q.queue_id), []):
            commit[start:end] = mtime
        batch = np.searchsorted(appends.cl_ends, units["commitlog_offset"], side="right")
        out.append(commit[rng.min :] - appends.times[batch])
    result = np.concatenate(out)
    if np.isnan(result).any():
        raise RuntimeError(f"{int(np.isnan(result).sum())} messages were never committed")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of writing (60)")
    ap.add_argument("--interval-ms", type=int, default=1, help="ms between messages (1)")
    ap.add_argument("--age", type=float, default=5.0, help="tiering.segment_max_age, s (5)")
    ap.add_argument("--tick", type=float, default=1.0, help="tiering.tick_interval, s (1)")
    ap.add_argument(
        "--guard",
        choices=["sync", "checkpoint", "none"],
        default="sync",
        help="tiering.guard (sync, the default: fdatasync before upload)",
    )
    ap.add_argument("--topics", type=int, default=4)
    ap.add_argument("--queues", type=int, default=4, help="queues per topic")
    ap.add_argument("--body-min", type=int, default=256)
    ap.add_argument("--body-max", type=int, default=4096)
    ap.add_argument("--workdir", type=Path, default=None, help="where to write (a temp dir)")
    args = ap.parse_args()
    print(machine())
    budget = args.age + args.tick
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="bench-lag-") as tmp:
        root = Path(tmp)
        spec = SynthSpec(
            topics=args.topics,
            queues=args.queues,
            messages=0,
            body_min=args.body_min,
            body_max=args.body_max,
            commitlog_file_size=128 << 20,
            cq_file_size=300_000 * CQ_UNIT_SIZE,
            compress_over=0,
            interval_ms=args.interval_ms,
            start_time=0,  # restamped to the wall clock once the sidecar is up
        )
        log = root / "sidecar.log"
        cold = root / "cold"
        SyntheticStore.create(root / "store", spec)  # the sidecar needs it to exist
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [
                    a
                    for a in sidecar_cmd(root / "store", str(cold), root / "state")
                    if a != "--once"
                ],
                env=sidecar_env(
                    tiering_segment_max_age=str(args.age),
                    tiering_tick_interval=str(args.tick),
                    tiering_guard=args.guard,
                ),
                stdout=out,
                stderr=out,
            )
        try:
            wait_for(log, _READY, proc, timeout=120)
            store = SyntheticStore.open(root / "store")
            store.spec = replace(store.spec, start_time=int(time.time() * 1000) + 200)
            appends = write_steadily(store, args.interval_ms, args.duration)
            hot = HotStore(root / "store")
            deadline = time.monotonic() + budget + 60
            while not all_committed(hot, cold) and time.monotonic() < deadline:
                time.sleep(0.2)
            peak = vm_hwm(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        lag = lags(hot, cold, appends)
        nbytes = int(appends.cl_ends[-1])
        segments = sum(len(v) for v in committed(cold).values())
    p50, p99, worst = (float(x) for x in np.percentile(lag, [50, 99, 100]))
    print(
        f"wrote {len(lag):,} messages ({nbytes / MIB:,.0f} MiB) over {args.duration:.0f} s "
        f"to {args.topics * args.queues} queues; {segments} segments; age {args.age:g} s, "
        f"tick {args.tick:g} s, guard {args.guard}; sidecar peak RSS {peak / MIB:,.0f} MiB"
    )
    print(table(["append → cold commit", "seconds"], [["p50", p50], ["p99", p99], ["max", worst]]))
    print(result_line("lag", p99 / budget, f"p99<={budget:g}s", p99 <= budget))


if __name__ == "__main__":
    main()
