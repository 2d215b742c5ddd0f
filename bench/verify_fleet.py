"""Fleet verification: one fleet job against one single-broker job per broker, and the
hot fingerprint against reading the same hot files.

Synthesizes one hot store (``--queues`` queues, ``--messages`` per queue), tiers it under
``--brokers`` broker prefixes of one cluster in a local cold directory (the real segment
codec, no sidecar), and then times:

* **fingerprint**: ``tieredstore fingerprint`` of one broker's hot store, unlimited rate,
  as a process (its CPU seconds too), against ``cat`` of the same hot files to
  ``/dev/null`` (files warm for both). Prints the fingerprint's CPU-s per GiB of hot data
  and its size in bytes per GiB;
* **fleet**: one ``python -m tieredstore.verifier --fleet`` process (``--master``) over every
  broker, against ``--brokers`` ``python -m tieredstore.verifier --level content`` processes run one
  after the other (what a nightly job per broker host costs: a JVM start each).

``--fingerprint-only`` stops after the fingerprint (no Spark: its RESULT line only);
``--fingerprint-repeat N`` runs ``cat`` and the in-process fingerprint N times in turn
and reports each one's median. What a profiler samples::

    py-spy record -- python bench/verify_fleet.py --fingerprint-only --fingerprint-repeat 20

Last lines::

    RESULT verify_fleet_vs_single ratio=<single total ÷ fleet> target=>=3 PASS|FAIL
    RESULT verify_fleet_fingerprint_vs_cat ratio=<its rate ÷ cat rate> target=>=0.5 PASS|FAIL
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    MIB,
    Stopwatch,
    machine,
    mb_per_s,
    result_line,
    run_measured,
    table,
    verifier_run,
    warm,
)

from tests.support.stores.coldimage import write_local
from tests.support.verification.fleet import fleet_image
from tieredstore.clock import SystemClock
from tieredstore.cold.layout import fingerprint_key, tiering_key
from tieredstore.cold.provenance import read_tiering_record
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.verifier.fleet.take import take_fingerprint

CLUSTER = "BenchFleet"
VS_SINGLE = 3.0
VS_CAT = 0.5
GIB = 1 << 30


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--brokers", type=int, default=8)
    ap.add_argument("--queues", type=int, default=64, help="queues per broker")
    ap.add_argument("--messages", type=int, default=1000, help="messages per queue")
    ap.add_argument("--body", type=int, default=1024, help="largest message body (bytes)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument(
        "--fingerprint-only", action="store_true", help="stop after the fingerprint (no Spark)"
    )
    ap.add_argument(
        "--fingerprint-repeat", type=int, default=1, help="in-process fingerprints (median)"
    )
    return ap.parse_args()


def _env() -> dict[str, str]:
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}


def _hot_files(hot: Path) -> list[Path]:
    return sorted(p for p in hot.rglob("*") if p.is_file())


def main() -> int:
    args = _args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    topics = max(1, args.queues // 16) if args.queues >= 16 else 1
    per_topic = max(1, args.queues // topics)
    spec = SynthSpec(
        topics=topics, queues=per_topic, messages=topics * per_topic * args.messages,
        body_min=args.body // 4, body_max=args.body, commitlog_file_size=4 << 20,
        cq_file_size=10_000 * CQ_UNIT_SIZE, seed=35,
    )  # fmt: skip
    hot, cold = work / "hot", work / "cold"
    synthesize(hot, spec)
    brokers = [f"broker-{i:02d}" for i in range(args.brokers)]
    write_local(fleet_image(hot, CLUSTER, brokers, segment_messages=1000), cold)
    files = _hot_files(hot)
    hot_bytes = warm(files)

    # The fingerprint in this process (no interpreter start-up in its time), then the
    # other brokers' through the command.
    # The tiering record's times, as the command reads them (stored_from is searched at).
    key = tiering_key(CLUSTER, brokers[0])
    record = read_tiering_record((cold / key).read_bytes(), key)
    since = tuple(sorted({e.since_ms for e in record.history}))
    cats: list[float] = []
    runs: list[tuple[float, float]] = []  # (seconds, CPU seconds) of each fingerprint
    for _ in range(max(1, args.fingerprint_repeat)):  # cat and fingerprint in turn
        with Stopwatch() as cat:
            subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)
        cats.append(cat.seconds)
        cpu0 = time.process_time()
        with Stopwatch() as fp_time:
            fp = asyncio.run(
                take_fingerprint(
                    HotStore(hot), cluster=CLUSTER, broker=brokers[0], clock=SystemClock(),
                    since_ms=since,
                )
            )  # fmt: skip
        runs.append((fp_time.seconds, time.process_time() - cpu0))
    fp_seconds, fp_cpu = sorted(runs)[len(runs) // 2]
    cat_seconds = sorted(cats)[len(cats) // 2]
    fp_file = cold / fingerprint_key(CLUSTER, brokers[0], stamp_ms=fp.taken_ms, sequence=0)
    fp_file.parent.mkdir(parents=True, exist_ok=True)
    fp_file.write_bytes(fp.to_bytes())
    fp_size = fp_file.stat().st_size
    gib = fp.hot_bytes / GIB  # consume-queue units and records the fingerprint read
    cat_rate = mb_per_s(hot_bytes, cat_seconds)
    fp_rate = mb_per_s(fp.hot_bytes, fp_seconds)
    vs_cat = fp_rate / cat_rate if cat_rate else 0.0
    fp_line = (
        f"fingerprint: {fp_cpu / gib:.1f} CPU-s per GiB of hot data, "
        f"{fp_size / gib:,.0f} bytes per GiB ({fp_size:,} bytes for {fp.hot_bytes:,})"
    )
    fp_result = result_line(
        "verify_fleet_fingerprint_vs_cat", vs_cat, f">={VS_CAT:g}", vs_cat >= VS_CAT
    )
    if args.fingerprint_only:
        print(machine())
        print(f"{hot_bytes / MIB:.1f} MiB of hot files, {len(runs)} fingerprint(s), the median")
        print(
            table(
                ["run", "seconds", "MiB/s", "CPU s"],
                [
                    ["cat hot files > /dev/null", cat_seconds, cat_rate, ""],
                    ["fingerprint (1 broker, in process)", fp_seconds, fp_rate, fp_cpu],
                ],
            )
        )
        print(fp_line)
        print(fp_result)
        return 0
    for broker in brokers[1:]:
        cmd = [sys.executable, "-m", "tieredstore.cli", "fingerprint", "--store", str(hot),
               "--cold", str(cold), "--cluster", CLUSTER, "--broker", broker,
               "--max-bytes-per-second", "0"]  # fmt: skip
        run_measured(cmd, env=_env(), log=work / "fingerprint.log")

    fleet_out = work / "fleet"
    cmd = [sys.executable, "-m", "tieredstore.verifier", "--fleet", "--cold", str(cold),
    "--cluster",
           CLUSTER, "--out", str(fleet_out), "--master", args.master]  # fmt: skip
    fleet = run_measured(cmd, env=_env(), log=work / "fleet.log")
    verdict = json.loads((fleet_out / "fleet.json").read_text())["verdict"]
    if verdict != "CLEAN":
        raise RuntimeError(f"the fleet job said {verdict}, not CLEAN; see {fleet_out}")
    single = [
        verifier_run(
            hot,
            str(cold),
            level="content",
            out=work / f"single-{b}",
            master=args.master,
            cluster=CLUSTER,
            broker=b,
        )
        for b in brokers
    ]
    single_total = sum(s.seconds for s in single)

    print(machine())
    print(
        f"{args.brokers} brokers x {spec.topics * spec.queues} queues, "
        f"{hot_bytes / MIB:.1f} MiB of hot files per broker, master {args.master}"
    )
    print(
        table(
            ["run", "seconds", "MiB/s", "CPU s"],
            [
                ["cat hot files > /dev/null", cat_seconds, cat_rate, ""],
                ["fingerprint (1 broker, in process)", fp_seconds, fp_rate, fp_cpu],
                [f"verify --fleet ({args.brokers} brokers)", fleet.seconds, "", fleet.cpu_seconds],
                [f"verify --level content x {args.brokers}", single_total, "", ""],
            ],
        )
    )
    print(fp_line)
    vs_single = single_total / fleet.seconds
    print(
        result_line("verify_fleet_vs_single", vs_single, f">={VS_SINGLE:g}", vs_single >= VS_SINGLE)
    )
    print(fp_result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
