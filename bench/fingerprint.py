"""Hot fingerprint speed: ``tieredstore fingerprint`` against ``cat`` of the same hot
files, and an incremental fingerprint against a full one.

Synthesizes a hot store of ``--size`` commit-log bytes (``--topics`` × ``--queues``
queues, default 2 × 4: a queue must hold whole blocks of 4096 offsets for an incremental
run to carry any), writes the broker's tiering record into a local cold directory (all the command
reads from cold, besides its previous fingerprint), warms the files, and times, in turn
``--runs`` times each (the median is reported):

* **full**: a full fingerprint, unpaced (the command's ``--max-bytes-per-second 0``),
  in this process (no interpreter start-up in its time), against ``cat`` of every hot
  file (consume queues and commit log) to ``/dev/null``: the ratio is cat's seconds ÷
  the fingerprint's (cat also reads the files' unused, preallocated tails, the
  fingerprint only what they hold; the table gives both rates too);
* **incremental**: then ``--new`` (a fraction, default 0.05) more messages are appended,
  and a fingerprint carrying from the full one (what the nightly run does) is timed
  against a full one of the grown store. Both must be equal but for their time.

Then the command itself runs once as a process, full and then incremental, with the
cold directory (its output lines are printed: what it read, what it carried), its peak
RSS sampled.

Last lines::

    RESULT fingerprint_full ratio=<cat seconds ÷ fingerprint seconds> target=>=0.5 PASS|FAIL
    RESULT fingerprint_incremental ratio=<incremental time ÷ full time> target=<=0.25 PASS|FAIL
    RESULT fingerprint_rss ratio=<the command's peak RSS, MiB> target=<256MiB PASS|FAIL

The peak RSS is the process's ``VmHWM``, which counts the pages of the hot files it maps:
the command reads the commit log through a map, all queues together a window at a time,
and drops the pages behind it (docs/verification.md), so they are the window's. The line
before the results gives its anonymous memory apart.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import (
    BROKER,
    CLUSTER,
    MIB,
    Measured,
    Stopwatch,
    add_store_arguments,
    machine,
    mb_per_s,
    result_line,
    run_measured,
    store_from_args,
    table,
    warm,
)

from tests.support.stores.coldimage import tiering_record
from tieredstore.clock import SystemClock
from tieredstore.cold.fingerprint import Fingerprint
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SyntheticStore
from tieredstore.verifier.fleet.take import Taken, take_carrying

VS_CAT = 0.5
INCREMENTAL = 0.25
RSS_TARGET = 256 * MIB


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_store_arguments(ap, size="256M")
    # Few queues by default, so that a queue holds whole blocks (4096 offsets) to carry.
    ap.set_defaults(topics=2, queues=4)
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each side (median)")
    ap.add_argument("--new", type=float, default=0.05, help="messages appended, a fraction")
    return ap.parse_args()


def _files(hot: Path) -> list[str]:
    return sorted(str(p) for p in hot.rglob("*") if p.is_file())


def _take(hot: Path, previous: Fingerprint | None) -> tuple[Taken, float]:
    with Stopwatch() as sw:
        taken = asyncio.run(
            take_carrying(HotStore(hot), previous, cluster=CLUSTER, broker=BROKER,
                          clock=SystemClock())
        )  # fmt: skip
    return taken, sw.seconds


def _cat(files: list[str]) -> float:
    with Stopwatch() as sw:
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
    return sw.seconds


def _command(hot: Path, cold: Path, log: Path, *extra: str) -> tuple[str, Measured]:
    """The command's last output line and its measurement (``log`` gets its output)."""
    cmd = [sys.executable, "-m", "tieredstore.cli", "fingerprint", "--store", str(hot),
           "--cold", str(cold), "--cluster", CLUSTER, "--broker", BROKER,
           "--max-bytes-per-second", "0", *extra]  # fmt: skip
    run = run_measured(cmd, log=log)
    return log.read_text().strip().splitlines()[-1], run


def main() -> int:
    args = _args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        hot, cold = Path(tmp) / "hot", Path(tmp) / "cold"
        store = store_from_args(args, hot)
        record = tiering_record(cluster=CLUSTER, broker=BROKER)
        (cold / record.key).parent.mkdir(parents=True)
        (cold / record.key).write_bytes(record.to_json())
        files = _files(hot)
        hot_bytes = warm(map(Path, files))
        cats, fulls = [], []
        for _ in range(max(1, args.runs)):  # cat and fingerprint in turn
            cats.append(_cat(files))
            full, seconds = _take(hot, None)
            fulls.append(seconds)
        t_cat, t_full = statistics.median(cats), statistics.median(fulls)

        SyntheticStore.open(hot).append(max(1, int(store.messages * args.new)))
        warm(map(Path, _files(hot)))
        grown_full, grown_incr = [], []
        for _ in range(max(1, args.runs)):
            again, seconds = _take(hot, None)
            grown_full.append(seconds)
            incr, seconds = _take(hot, full.fingerprint)
            grown_incr.append(seconds)
        same = dataclasses.replace(incr.fingerprint, taken_ms=0) == dataclasses.replace(
            again.fingerprint, taken_ms=0
        )
        if not same:
            raise SystemExit("the incremental fingerprint differs from the full one")
        t_grown, t_incr = statistics.median(grown_full), statistics.median(grown_incr)

        first, cmd_full = _command(hot, cold, Path(tmp) / "full.log", "--full-every", "1")
        SyntheticStore.open(hot).append(max(1, int(store.messages * args.new)))
        second, cmd_incr = _command(hot, cold, Path(tmp) / "incremental.log")

    fp_bytes = full.fingerprint.hot_bytes
    blocks = sum(len(q.blocks) for q in incr.fingerprint.queues)
    print(
        table(
            ["run", "seconds", "MiB/s", "read MiB"],
            [
                ["cat (hot files)", t_cat, mb_per_s(hot_bytes, t_cat), hot_bytes / MIB],
                ["fingerprint, full", t_full, mb_per_s(fp_bytes, t_full), fp_bytes / MIB],
                ["full, after +new", t_grown, 0.0, again.read_bytes / MIB],
                ["incremental, after +new", t_incr, 0.0, incr.read_bytes / MIB],
                ["command (process), full", cmd_full.seconds, 0.0, 0.0],
                ["command (process), incremental", cmd_incr.seconds, 0.0, 0.0],
            ],
        )
    )
    peak = max(cmd_full.peak_rss, cmd_incr.peak_rss)
    print(
        f"command peak RSS: full {cmd_full.peak_rss / MIB:.0f} MiB, incremental "
        f"{cmd_incr.peak_rss / MIB:.0f} MiB; of it anonymous memory at most "
        f"{max(cmd_full.peak_anon, cmd_incr.peak_anon) / MIB:.0f} MiB, the rest the hot "
        "files' pages it maps (page cache, read in place)"
    )
    print(f"incremental: {incr.carried_blocks} of {blocks} blocks carried forward")
    print(f"command: {first}")
    print(f"command: {second}")
    print(machine())
    vs_cat = t_cat / t_full if t_full else 0.0
    vs_full = t_incr / t_grown if t_grown else 0.0
    print(result_line("fingerprint_full", vs_cat, f">={VS_CAT:g}", vs_cat >= VS_CAT))
    print(
        result_line(
            "fingerprint_incremental", vs_full, f"<={INCREMENTAL:g}", vs_full <= INCREMENTAL
        )
    )
    print(result_line("fingerprint_rss", peak / MIB, "<256MiB", peak < RSS_TARGET))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
