"""Restore throughput: ``tieredstore restore`` vs reading the same cold objects.

Synthesizes a store of ``--size`` commitlog bytes (default 512 MiB; ``--topics`` ×
``--queues`` queues, bodies ``--body-min``..``--body-max`` bytes), tiers it (``run
--once``, not timed) into each cold store, and times, as subprocesses (start-up included):

* **read**: every COMMIT_LOG and CONSUME_QUEUE object a manifest names, read whole
  through tieredstore's backend for that store, one after another (the manifests are
  listed and read first, as the restore does). Best of ``--read-runs``.
* **restore**: ``tieredstore restore`` of the whole broker into an empty local directory
  (default geometry: 1 GiB commitlog files, RocketMQ's index size), planning, index
  files, checkpoint and every fsync included. ``restore --check`` must then say CLEAN.

Cold stores (``--cold``): ``s3`` — a moto S3 server on loopback in its own process, the
disaster-recovery case (the broker's disk is gone; its archive is remote); ``posix`` — a
local directory read warm from the page cache, which reads at memory speed while the
restore must write every byte to disk: its ceiling there is the disk's write rate,
measured too (``dd``-like: 256 MiB written and fsynced). Last lines::

    RESULT restore ratio=<restore MiB/s ÷ read MiB/s, S3> target=>=0.5 PASS|FAIL
    RESULT restore_posix ratio=<the same, POSIX warm> target=>=0.5 PASS|FAIL
    RESULT restore_rss ratio=<peak RSS MiB of the restore> target=<256MiB PASS|FAIL
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import (
    AWS_ENV,
    BROKER,
    CLUSTER,
    MIB,
    Measured,
    Stopwatch,
    StoreSummary,
    add_store_arguments,
    machine,
    mb_per_s,
    result_line,
    run_measured,
    sidecar_cmd,
    sidecar_env,
    store_from_args,
    table,
    warm,
)

from tests.support.moto import MotoServer

RATIO_TARGET = 0.5
RSS_TARGET = 256 * MIB
BUCKET = "bench-restore"


async def read_cold(url: str, endpoint_url: str | None) -> tuple[int, int]:
    """Read every segment object a manifest names; return (objects, bytes)."""
    from tieredstore.backends import BackendOptions, open_backend
    from tieredstore.restore.plan import RestoreFilter, build_plan

    options = BackendOptions(endpoint_url=endpoint_url, region="us-east-1")
    async with open_backend(url, options=options) as backend:
        plan = await build_plan(backend, CLUSTER, BROKER, RestoreFilter())
        objects = total = 0
        for q in plan.queues:
            for m in q.links:
                for key in (m.consume_queue_key, m.commit_log_key):
                    total += len(await backend.read(key))
                    objects += 1
    return objects, total


def _restore_cmd(cold: str, out: Path, endpoint: str | None, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tieredstore.cli",
        "restore",
        "--cold",
        cold,
        "--cluster",
        CLUSTER,
        "--broker",
        BROKER,
        "--out",
        str(out),
        "--progress",
        "off",
        *(["--endpoint-url", endpoint] if endpoint else []),
        *extra,
    ]


def disk_write_rate(directory: Path) -> float:
    """MiB/s of writing 256 MiB and fsyncing it in ``directory`` (the restore's ceiling)."""
    path = directory / "dd.tmp"
    block = os.urandom(8 * MIB)
    with Stopwatch() as sw, path.open("wb") as f:
        for _ in range(32):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    path.unlink()
    return mb_per_s(32 * 8 * MIB, sw.seconds)


def compare(
    store: StoreSummary,
    cold: str,
    work: Path,
    runs: int,
    endpoint: str | None,
    warm_dir: Path | None,
) -> tuple[Measured, Measured]:
    """(best read, restore) of the cold store at ``cold``; the restore is checked CLEAN."""
    env = {**os.environ, **AWS_ENV}
    reads = []
    for _ in range(runs):
        if warm_dir:
            warm([warm_dir])
        child = [sys.executable, __file__, "--read-only", cold, endpoint or ""]
        reads.append(run_measured(child, env=env))
    if warm_dir:
        warm([warm_dir])
    out = work / "restored"
    run = run_measured(_restore_cmd(cold, out, endpoint), env=env, log=work / "restore.log")
    check = subprocess.run(
        _restore_cmd(cold, out, endpoint, "--check"), capture_output=True, text=True, env=env
    )
    verdict = check.stdout.strip()
    print(f"{cold}: {verdict or check.stderr.strip()}")
    if check.returncode != 0 or not verdict.startswith(f"CLEAN: {store.messages:,} messages"):
        raise RuntimeError("restore --check did not say CLEAN for every message")
    return min(reads, key=lambda r: r.seconds), run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_store_arguments(ap, size="512M")
    ap.add_argument("--read-runs", type=int, default=3, help="cold reads timed; the best counts")
    ap.add_argument("--cold", choices=["s3", "posix", "both"], default="both")
    ap.add_argument("--read-only", nargs=2, help=argparse.SUPPRESS)  # the timed child
    args = ap.parse_args()
    if args.read_only:
        url, endpoint = args.read_only
        objects, nbytes = asyncio.run(read_cold(url, endpoint or None))
        print(f"read {objects} objects, {nbytes} bytes")
        return
    print(machine())
    rows: list[list[object]] = []
    results: list[str] = []
    rss = 0
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="bench-restore-") as tmp:
        root = Path(tmp)
        store = store_from_args(args, root / "store")
        mib = store.commitlog_bytes // MIB

        def record(name: str, label: str, read: Measured, run: Measured) -> None:
            nonlocal rss
            base, ours = (
                mb_per_s(store.commitlog_bytes, read.seconds),
                mb_per_s(store.commitlog_bytes, run.seconds),
            )
            rows.append(
                [
                    f"read {label}",
                    read.seconds,
                    read.cpu_seconds,
                    mib,
                    base,
                    "",
                    read.peak_rss / MIB,
                ]
            )
            rows.append(
                [
                    f"restore from {label}",
                    run.seconds,
                    run.cpu_seconds,
                    mib,
                    ours,
                    round(store.messages / run.seconds),
                    run.peak_rss / MIB,
                ]
            )
            results.append(
                result_line(name, ours / base, f">={RATIO_TARGET}", ours / base >= RATIO_TARGET)
            )
            rss = max(rss, run.peak_rss)

        if args.cold in ("s3", "both"):
            with MotoServer(root / "moto.log") as moto:
                env = sidecar_env(cold_endpoint_url=moto.endpoint_url, cold_region="us-east-1")
                env.update(AWS_ENV)
                subprocess.run(
                    [sys.executable, "-c", _MAKE_BUCKET, moto.endpoint_url, BUCKET],
                    check=True,
                    env={**os.environ, **AWS_ENV},
                )
                run_measured(sidecar_cmd(store.root, f"s3://{BUCKET}", root / "state-s3"), env=env)
                (root / "s3").mkdir()
                read, run = compare(
                    store, f"s3://{BUCKET}", root / "s3", args.read_runs, moto.endpoint_url, None
                )
                record("restore", "S3 (moto)", read, run)
        if args.cold in ("posix", "both"):
            cold = root / "cold"
            run_measured(sidecar_cmd(store.root, str(cold), root / "state"), env=sidecar_env())
            (root / "posix").mkdir()
            read, run = compare(store, str(cold), root / "posix", args.read_runs, None, cold)
            record("restore_posix", "POSIX (warm)", read, run)
            disk = disk_write_rate(root)
            print(
                f"disk write rate here (256 MiB + fsync): {disk:,.0f} MiB/s: the POSIX "
                "restore writes every byte it reads"
            )
    print(table(["run", "seconds", "CPU s", "MiB", "MiB/s", "msgs/s", "peak RSS MiB"], rows))
    for line in results:
        print(line)
    print(result_line("restore_rss", rss / MIB, "<256MiB", rss < RSS_TARGET))


_MAKE_BUCKET = """
import sys, boto3
boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1").create_bucket(
    Bucket=sys.argv[2])
"""


if __name__ == "__main__":
    main()
