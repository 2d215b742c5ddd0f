"""A stock RocketMQ consumer drains a queue's history through the broker read plugin.

A real name server and broker (``tests.support.broker.rocketmq``; the plugin jar built by
Maven from ``broker-plugin/``, ``messageStorePlugIn`` in ``broker.conf``) take
``--messages`` messages on one queue from the stock producer; a real ``tieredstore run``
tiers them and serves its read API on loopback; then the broker's own expiry deletes
its old commitlog files (all but the newest one or two), and ``--hot-messages`` more
follow, so the queue's history is part cold (below the hot min), part hot. The stock
pull consumer (``BrokerTool drain``: ``DefaultMQPullConsumer.pull``, 32 messages a pull,
one pull at a time) drains the queue from the min offset the broker reports (the cold
min) to its max, in one run::

    RESULT serving_consumer_cold_vs_hot ratio=<cold msgs/s ÷ hot msgs/s> target=>=0.5 PASS|FAIL
    RESULT serving_consumer_cold_p99 ratio=<p99 of one cold pull, ms> target=<=50 PASS|FAIL
    RESULT serving_consumer_rss ratio=<sidecar peak RSS MiB, read-ahead on> target=<256MiB PASS|FAIL

Rates are messages over the summed round trips of the pulls of each part, timed in the
consumer's JVM (its first pull, which opens the connection, is left out).
``--compression zstd`` tiers with ``cold.compression = "zstd"`` (the bodies are random,
so the frames barely shrink: the read path's cost, not the ratio, is measured). Needs
``java``, ``javac`` and ``mvn`` (the first run downloads RocketMQ into the harness
cache, docs/broker-tests.md).
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from _common import MIB, machine, result_line, sidecar_cmd, sidecar_env, table, vm_hwm

from tests.support.broker.plugin import PLUGIN_CLASS, build_plugin
from tests.support.broker.rocketmq import (
    BrokerSettings,
    LocalCluster,
    Toolchain,
    missing_tools,
    prepare_toolchain,
    wait_until,
)
from tieredstore.hot.store import HotStore

RATIO_TARGET = 0.5
P99_TARGET_MS = 50.0
RSS_TARGET = 256 * MIB
TOPIC = "BenchServed"
PULL = 32


@dataclass(frozen=True, slots=True)
class Pull:
    offset: int
    count: int
    seconds: float


@dataclass(frozen=True, slots=True)
class Drained:
    """One run: the consumer's pulls (the first left out), where hot began, the sidecar's
    peak RSS and how long the producer took."""

    pulls: list[Pull]
    hot_min: int
    rss: int
    produce_seconds: float


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_plan(path: Path, first: int, messages: int, body_bytes: int) -> None:
    """BrokerTool's produce plan (java/BrokerTool.java): plain messages with a tag, a key
    and a user property, random (incompressible) bodies."""
    rng = random.Random(29 + first)
    tag = base64.b64encode(b"TagA").decode()
    lines = []
    for i in range(first, first + messages):
        keys = base64.b64encode(f"key-{i}".encode()).decode()
        props = base64.b64encode(f"i\x01{i}\x02".encode()).decode()
        body = base64.b64encode(rng.randbytes(body_bytes)).decode()
        lines.append(f"{i - first}\tnormal\t{TOPIC}\t{tag}\t{keys}\t{props}\t{body}\t0")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def cold_commit(reads_port: int) -> int:
    url = f"http://127.0.0.1:{reads_port}/v1/cold/range?topic={TOPIC}&queue=0"
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            _magic, _lo, hi, _ts = struct.unpack(">4sqqq", reply.read())
    except OSError:
        return -1  # not listening yet, or nothing tiered yet
    return int(hi)


def read_pulls(path: Path) -> tuple[list[Pull], int, int]:
    """BrokerTool drain's lines: the pulls, and the min and max offsets it drained."""
    pulls, lo, hi = [], -1, -1
    for line in path.read_text().splitlines():
        fields = line.split("\t")
        if fields[0] == "E":
            lo, hi = int(fields[1]), int(fields[2])
        else:
            pulls.append(Pull(int(fields[0]), int(fields[1]), int(fields[2]) / 1e9))
    return pulls, lo, hi


def rate(pulls: list[Pull]) -> float:
    seconds = sum(p.seconds for p in pulls)
    return sum(p.count for p in pulls) / seconds if seconds > 0 else 0.0


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0


def run(root: Path, toolchain: Toolchain, args: argparse.Namespace) -> Drained:
    reads_port = _free_port()
    settings = BrokerSettings(
        commitlog_file_size=args.commitlog_file_size,
        cq_file_size=2000 * 20,
        extra_conf=(
            ("messageStorePlugIn", PLUGIN_CLASS),
            ("tieredstoreReadAddress", f"127.0.0.1:{reads_port}"),
        ),
    )
    cluster = LocalCluster(toolchain, root / "rocketmq", settings)
    log = root / "sidecar.log"
    env = sidecar_env(
        reads_enabled="true",
        reads_port=str(reads_port),
        tiering_segment_max_bytes="1M",
        tiering_segment_max_age="1s",
        tiering_tick_interval="200ms",
        cold_compression=args.compression,
    )
    with cluster:
        cluster.create_topics({TOPIC: 1})
        cmd = sidecar_cmd(cluster.store_root, str(root / "cold"), root / "state", once=False)
        with log.open("ab") as out:
            sidecar = subprocess.Popen(cmd, env=env, stdout=out, stderr=out)
        try:
            write_plan(root / "plan.tsv", 0, args.messages, args.body_bytes)
            t0 = time.perf_counter()
            cluster.run_tool("produce", cluster.namesrv_addr, str(root / "plan.tsv"),
                             str(root / "results.tsv"), timeout=1800)  # fmt: skip
            produce_s = time.perf_counter() - t0
            store = cluster.store_root

            def tiered() -> bool:
                if sidecar.poll() is not None:
                    raise RuntimeError("the sidecar exited: " + log.read_text()[-2000:])
                return cold_commit(reads_port) == HotStore(store).queue_range(TOPIC, 0).max

            wait_until(tiered, timeout=600, what="the sidecar to tier the queue")
            cluster.run_tool("expire", cluster.namesrv_addr, cluster.broker_addr)
            # The broker deletes a file at a time; it keeps its newest, and may keep the one
            # before for a while (a file still mapped waits for its forced destroy).
            wait_until(lambda: len(list((store / "commitlog").iterdir())) <= 2, timeout=300,
                       what="the broker to delete its old commitlog files")  # fmt: skip
            wait_until(lambda: HotStore(store).queue_range(TOPIC, 0).min > 0, timeout=120,
                       what="the broker to move its min offset")  # fmt: skip
            hot_min = HotStore(store).queue_range(TOPIC, 0).min
            # The hot part: what the newest file holds, and then --hot-messages more.
            write_plan(root / "hot.tsv", args.messages, args.hot_messages, args.body_bytes)
            cluster.run_tool("produce", cluster.namesrv_addr, str(root / "hot.tsv"),
                             str(root / "hot-results.tsv"), timeout=1800)  # fmt: skip
            out_file = root / "drain.tsv"
            cluster.run_tool("drain", cluster.namesrv_addr, TOPIC, "0", str(PULL),
                             str(out_file), timeout=1800)  # fmt: skip
            rss = vm_hwm(sidecar.pid)
        finally:
            sidecar.send_signal(signal.SIGTERM)
            sidecar.wait(timeout=120)
    pulls, lo, hi = read_pulls(out_file)
    total = args.messages + args.hot_messages
    if lo != 0 or hi != total:
        raise RuntimeError(f"the consumer drained [{lo}, {hi}), not [0, {total})")
    return Drained(pulls[1:], hot_min, rss, produce_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--messages", type=int, default=40_000, help="messages before the expiry")
    ap.add_argument("--hot-messages", type=int, default=8_000, help="messages after it")
    ap.add_argument("--body-bytes", type=int, default=1024, help="body size (bytes)")
    ap.add_argument("--commitlog-file-size", type=int, default=8 * MIB,
                    help="broker commitlog file size (hot: its newest file)")  # fmt: skip
    ap.add_argument("--workdir", type=Path, default=None, help="where to write (a temp dir)")
    ap.add_argument("--compression", choices=("none", "zstd"), default="none",
                    help="cold.compression of the tiered copy (none)")  # fmt: skip
    args = ap.parse_args()
    missing = missing_tools()
    if missing:
        sys.exit(f"serving_consumer: needs {', '.join(missing)} on PATH")
    print(machine())
    jar = build_plugin()
    base = prepare_toolchain()
    toolchain = Toolchain(base.version, base.lib_dir, base.classes_dir, (jar,))
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="bench-consumer-") as tmp:
        got = run(Path(tmp), toolchain, args)
    cold = [p for p in got.pulls if p.offset < got.hot_min]
    hot = [p for p in got.pulls if p.offset >= got.hot_min]
    print(f"RocketMQ {toolchain.version}; {args.messages:,} + {args.hot_messages:,} messages of "
          f"{args.body_bytes} B on one queue (the first produced in {got.produce_seconds:.1f} s); "
          f"hot min {got.hot_min:,}; {PULL} messages a pull")  # fmt: skip
    rows = []
    for name, part in (("cold (plugin → sidecar)", cold), ("hot (broker's store)", hot)):
        lat = [p.seconds * 1000 for p in part]
        rows.append([name, len(part), sum(p.count for p in part), rate(part),
                     sorted(lat)[len(lat) // 2] if lat else 0.0, p99(lat)])  # fmt: skip
    print(table(["part", "pulls", "messages", "msgs/s", "p50 ms", "p99 ms"], rows))
    ratio = rate(cold) / rate(hot) if rate(hot) > 0 else 0.0
    print(result_line("serving_consumer_cold_vs_hot", ratio, f">={RATIO_TARGET}",
                      ratio >= RATIO_TARGET))  # fmt: skip
    cold_p99 = p99([p.seconds * 1000 for p in cold])
    print(result_line("serving_consumer_cold_p99", cold_p99, f"<={P99_TARGET_MS:g}",
                      cold_p99 <= P99_TARGET_MS))  # fmt: skip
    print(result_line("serving_consumer_rss", got.rss / MIB, "<256MiB", got.rss < RSS_TARGET))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
