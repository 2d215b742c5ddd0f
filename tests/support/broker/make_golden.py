"""Regenerate the golden store: a small store written by a real RocketMQ broker.

Usage (from the repository root; needs java, javac and mvn)::

    python -m tests.support.broker.make_golden

Starts a broker with small files (256 KiB commitlog files, 30-unit CQ files), runs the
same traffic as the live tests at a smaller scale, stops the broker cleanly and copies
the store, byte-exact, to ``tests/data/golden_store/`` with the manifest of what was
produced in ``tests/data/golden_store_manifest.json``. Finally it runs the conformance
checks on the copy and prints what they report (a scanner bug must not stop us from
recording what the broker wrote).

Kept: ``commitlog/``, ``consumequeue/``, ``checkpoint``, ``config/topics.json``,
``config/consumerOffset.json``. Left out: ``lock``, ``abort.bak``, ``index/`` (key
index, unused), ``timerlog/``, ``timerwheel``, ``compaction/``, the other ``config/``
files and their ``.bak`` copies.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from tests.support.broker import conformance
from tests.support.broker.manifest import Manifest
from tests.support.broker.rocketmq import (
    BrokerSettings,
    LocalCluster,
    missing_tools,
    prepare_toolchain,
)
from tests.support.broker.scenario import now_ms, run_scenario, wait_for_clean_stop
from tieredstore.hot.store import HotStore

#: The golden store is data of the test suite: it stays in ``tests/data/`` (read from the
#: source checkout, as :mod:`tests.support.broker.rocketmq` reads the broker test POM).
REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data"
GOLDEN_STORE = DATA / "golden_store"
GOLDEN_MANIFEST = DATA / "golden_store_manifest.json"
KEEP_DIRS = ("commitlog", "consumequeue")
KEEP_FILES = ("checkpoint", "config/topics.json", "config/consumerOffset.json")
GOLDEN_NORMAL_MESSAGES = 600
GOLDEN_SEED = 20240612
#: The golden store is committed to git; refuse to write a bigger one.
MAX_GOLDEN_BYTES = 5 << 20


def _copy_store(src: Path, dst: Path) -> int:
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    for name in KEEP_DIRS:
        shutil.copytree(src / name, dst / name)
    for name in KEEP_FILES:
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / name, dst / name)
    return sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())


def _record(args: argparse.Namespace) -> tuple[Manifest, int]:
    """Run the traffic on a real broker, stop it cleanly, copy its store: (what was
    produced, the copy's size in bytes)."""
    settings = BrokerSettings(
        commitlog_file_size=256 << 10, cq_file_size=30 * 20, max_message_size=128 << 10
    )
    toolchain = prepare_toolchain()
    with tempfile.TemporaryDirectory(prefix="golden-broker-") as tmp:
        with LocalCluster(toolchain, Path(tmp), settings) as cluster:
            manifest = run_scenario(cluster, normal=args.normal, seed=args.seed)
            wait_for_clean_stop(cluster)
            manifest = dataclasses.replace(manifest, window_end_ms=now_ms())
        size = _copy_store(cluster.store_root, args.store)
    return manifest, size


def _check(store_dir: Path, manifest: Manifest) -> None:
    """Run the conformance checks on the copy and print what they report."""
    store = HotStore(store_dir)
    index = conformance.index_store(store, manifest)
    checks: dict[str, Callable[[], None]] = {
        "records": lambda: conformance.check_records(index),
        "messages": lambda: conformance.check_messages(index, manifest),
        "offsets": lambda: conformance.check_offsets(store, manifest),
        "commitlog": lambda: conformance.check_commitlog(store, index, manifest, min_data_files=3),
        "cq files": lambda: conformance.check_consume_queue_files(store, manifest, min_files=2),
        "topics": lambda: conformance.check_topics(store),
        "checkpoint": lambda: conformance.check_checkpoint(
            store.checkpoint(), index, manifest, clean=True
        ),
    }
    failed = 0
    for name, check in checks.items():
        try:
            check()
        except AssertionError as exc:
            failed += 1
            print(f"conformance check {name!r} FAILED on the new golden store:\n{exc}")
    print(f"{len(checks) - failed} passed, {failed} failed")


def _run(args: argparse.Namespace) -> int:
    missing = missing_tools()
    if missing:
        print(f"make_golden needs {', '.join(missing)} on PATH", file=sys.stderr)
        return 2
    manifest, size = _record(args)
    if size > MAX_GOLDEN_BYTES:
        print(f"golden store is {size} bytes, over {MAX_GOLDEN_BYTES}", file=sys.stderr)
        return 1
    manifest.dump(args.manifest)
    print(f"wrote {args.store} ({size} bytes) and {args.manifest} "
          f"({len(manifest.messages)} messages, RocketMQ {manifest.rocketmq_version})")  # fmt: skip
    _check(args.store, manifest)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=GOLDEN_STORE, help="output store dir")
    parser.add_argument("--manifest", type=Path, default=GOLDEN_MANIFEST, help="output JSON")
    parser.add_argument("--normal", type=int, default=GOLDEN_NORMAL_MESSAGES)
    parser.add_argument("--seed", type=int, default=GOLDEN_SEED)
    return _run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
