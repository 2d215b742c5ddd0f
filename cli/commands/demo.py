"""``tieredstore demo``: synthesize a store, tier it, verify it with Spark, print the verdict.

Runs on the embedded defaults — a local cold directory, the SQLite catalogue and a local
Spark session — all under ``--workdir`` (default ``.demo``), which it recreates. Exit
code: the verifier's (0 CLEAN).

It prints only its own ``==>`` lines (stderr) and the verdict line (stdout): Spark's
output goes to ``<workdir>/report/spark.log``, or to the terminal with ``--verbose``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from pathlib import Path

from tieredstore.cli.commands.synth import recent_start
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.errors import ConfigError
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.settings.loader import load_settings
from tieredstore.verifier.cli import main as verify_main

_MARKER = ".tieredstore-demo"
CLUSTER = "DemoCluster"
BROKER = "demo-broker-a"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", type=Path, default=Path(".demo"), help="recreated each run")
    p.add_argument("--messages", type=int, default=50_000, help="messages to synthesize")
    p.add_argument("--master", default="local[2]", help="Spark master for the verification")
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show Spark's own output (default: into <workdir>/report/spark.log)",
    )


def _fresh(workdir: Path) -> None:
    if workdir.exists():
        if not (workdir / _MARKER).exists() and any(workdir.iterdir()):
            raise ConfigError(
                "refusing to wipe a directory the demo did not create", where=str(workdir)
            )
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    (workdir / _MARKER).write_text("created by tieredstore demo\n")


def _say(text: str) -> None:
    print(f"==> {text}", file=sys.stderr, flush=True)


async def _tier(store: Path, cold: Path, state: Path) -> str:
    settings = load_settings(
        env={},
        overrides={
            "store.path": str(store),
            "cold.url": str(cold),
            "cold.cluster": CLUSTER,
            "cold.broker": BROKER,
            "state.dir": str(state),
            "tiering.segment_max_bytes": "4M",
        },
    )
    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        report = await rt.dispatcher.catch_up()
    return report.committed


def run(args: argparse.Namespace) -> int:
    workdir: Path = args.workdir.resolve()
    _fresh(workdir)
    store, cold, state, out = (workdir / n for n in ("store", "cold", "state", "report"))
    _say(f"synthesizing a RocketMQ store with {args.messages:,} messages in {store}")
    spec = SynthSpec(
        topics=4,
        queues=4,
        messages=args.messages,
        body_max=8192,
        commitlog_file_size=16 << 20,
        long_topic=True,
        prepared_every=500,
        # Recent times, so the report's lags and dates read as today's, not 2023's.
        start_time=recent_start(args.messages, 1, time.time_ns() // 1_000_000),
    )
    synthesize(store, spec)
    _say(f"tiering it into {cold} (catalogue in {state})")
    started = time.perf_counter()
    committed = asyncio.run(_tier(store, cold, state))
    _say(f"tiered {committed} in {time.perf_counter() - started:.1f}s")
    spark_log = "on this terminal" if args.verbose else f"log: {out / 'spark.log'}"
    _say(f"verifying cold against hot with Spark ({args.master}, {spark_log}), content level")
    code = verify_main(
        [
            "--store",
            str(store),
            "--cold",
            str(cold),
            "--cluster",
            CLUSTER,
            "--broker",
            BROKER,
            "--level",
            "content",
            "--out",
            str(out),
            "--master",
            args.master,
            "--state-dir",
            str(state),
            *(["--verbose"] if args.verbose else []),
        ]
    )
    _say(f"report: {out / 'report.html'} (exit code {code}: 0 CLEAN, 1 DIRTY, 2 CORRUPT)")
    return code
