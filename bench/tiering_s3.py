"""Tiering throughput to S3 (moto on loopback) vs a plain s3fs PUT of the same objects.

Synthesizes a store of ``--size`` commitlog bytes (default 512 MiB, same shape as
``tiering_posix.py``), starts a moto S3 server in its own process on 127.0.0.1, and times:

* **sidecar**: ``tieredstore run --once`` into ``s3://<bucket>`` (a subprocess; its peak
  RSS is its own VmHWM), default settings;
* **s3fs put**: a separate process that PUTs, with ``s3fs.S3FileSystem.pipe`` (the plain
  way), objects of exactly the sizes the sidecar wrote (every COMMIT_LOG, CONSUME_QUEUE
  and MANIFEST object) into a fresh bucket, ``--put-batch`` objects per ``pipe`` call.

Both times are whole processes, start-up included. The sidecar reads its store warm
(read once into the page cache first); the baseline's bytes are already in memory, which
favours the baseline. The moto server's access log counts the sidecar's S3 requests:
printed per segment, by method, beside 0.1.0's figure. Last lines::

    RESULT tiering_s3 ratio=<ours MiB/s ÷ s3fs MiB/s> target=>=0.8 PASS|FAIL
    RESULT tiering_s3_rss ratio=<peak RSS MiB> target=<256MiB PASS|FAIL
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    AWS_ENV,
    GIB,
    MIB,
    add_sidecar_env_argument,
    add_store_arguments,
    extra_env,
    machine,
    mb_per_s,
    result_line,
    run_measured,
    sidecar_cmd,
    sidecar_env,
    store_from_args,
    table,
    tiered_totals,
    vm_hwm,
    warm,
)

from tests.support.moto import MotoServer

RATIO_TARGET = 0.8
RSS_TARGET = 256 * MIB
#: S3 requests per segment of tieredstore 0.1.0 (commit a29bf9e), measured by this script
#: with ``--size 64M --sidecar-env TIEREDSTORE_TIERING_SEGMENT_MAX_BYTES=128K`` (583
#: segments; BENCHMARKS.md): HEAD of the manifest, GET of the lease, GET for the
#: continuity check (not on a queue's first segment), three PUTs.
REQUESTS_0_1 = 5.80


def _s3fs(endpoint_url: str) -> Any:
    import s3fs

    return s3fs.S3FileSystem(
        endpoint_url=endpoint_url,
        key=AWS_ENV["AWS_ACCESS_KEY_ID"],
        secret=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        client_kwargs={"region_name": AWS_ENV["AWS_DEFAULT_REGION"]},
    )


def put_baseline(endpoint_url: str, bucket: str, sizes_file: Path, batch: int) -> None:
    """The baseline process: PUT one object per size in ``sizes_file`` with s3fs ``pipe``."""
    sizes: list[int] = json.loads(sizes_file.read_text())
    fs = _s3fs(endpoint_url)
    source = os.urandom(max(sizes, default=0))
    t0 = time.perf_counter()
    for first in range(0, len(sizes), batch):
        group = sizes[first : first + batch]
        fs.pipe({f"{bucket}/obj/{first + i:08d}": source[:n] for i, n in enumerate(group)})
    print(f"put {len(sizes)} objects in {time.perf_counter() - t0:.2f} s (excluding start-up)")


def object_sizes(endpoint_url: str, bucket: str) -> list[int]:
    """Sizes of every object in ``bucket``."""
    fs = _s3fs(endpoint_url)
    return [int(info["size"]) for info in fs.find(bucket, detail=True).values()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_store_arguments(ap, size="512M")
    ap.add_argument("--put-batch", type=int, default=16, help="objects per s3fs pipe() call")
    add_sidecar_env_argument(ap)
    ap.add_argument("--put-baseline", nargs=3, help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args()
    if args.put_baseline:
        endpoint_url, bucket, sizes_file = args.put_baseline
        put_baseline(endpoint_url, bucket, Path(sizes_file), args.put_batch)
        return
    os.environ.update(AWS_ENV)
    print(machine())
    more_env = extra_env(args)
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="bench-s3-") as tmp:
        root = Path(tmp)
        store = store_from_args(args, root / "store")
        with MotoServer(root / "moto.log") as moto:
            fs = _s3fs(moto.endpoint_url)
            fs.call_s3("create_bucket", Bucket="bench-cold")
            warm([store.commitlog_dir, store.root / "consumequeue"])
            moto.requests()  # start counting here
            log = root / "sidecar.log"
            env = sidecar_env(cold_endpoint_url=moto.endpoint_url, cold_region="us-east-1")
            env.update(more_env)
            ours = run_measured(
                sidecar_cmd(store.root, "s3://bench-cold", root / "state"), env=env, log=log
            )
            segments, messages, tiered = tiered_totals(log)
            requests = moto.requests()
            sizes = object_sizes(moto.endpoint_url, "bench-cold")
            moto.reset()
            fs.invalidate_cache()
            fs.call_s3("create_bucket", Bucket="bench-put")
            sizes_file = root / "sizes.json"
            sizes_file.write_text(json.dumps(sizes))
            put_cmd = [sys.executable, __file__, "--put-batch", str(args.put_batch)]
            put_cmd += ["--put-baseline", moto.endpoint_url, "bench-put", str(sizes_file)]
            base = run_measured(put_cmd, log=root / "put.log")
            put_line = (root / "put.log").read_text().strip().splitlines()[-1]
            moto_rss = vm_hwm(moto.pid) if moto.pid is not None else 0

    total = sum(sizes)
    ours_rate, base_rate = mb_per_s(total, ours.seconds), mb_per_s(total, base.seconds)
    print(
        table(
            ["run", "seconds", "CPU s", "objects", "MiB", "MiB/s", "msgs/s", "peak RSS MiB"],
            [
                [
                    "tieredstore run --once",
                    ours.seconds,
                    ours.cpu_seconds,
                    len(sizes),
                    total // MIB,
                    ours_rate,
                    round(messages / ours.seconds),
                    ours.peak_rss / MIB,
                ],
                [
                    "s3fs pipe",
                    base.seconds,
                    base.cpu_seconds,
                    len(sizes),
                    total // MIB,
                    base_rate,
                    "",
                    base.peak_rss / MIB,
                ],
            ],
        )
    )
    print(
        f"sidecar: {segments} segments, {messages:,} messages, {tiered / MIB:,.0f} MiB of "
        f"records; baseline {put_line}; moto server peak RSS {moto_rss / MIB:,.0f} MiB"
    )
    per_segment = sum(requests.values()) / max(segments, 1)
    by_method = ", ".join(f"{m} {n / max(segments, 1):.2f}" for m, n in sorted(requests.items()))
    print(
        f"S3 requests: {sum(requests.values())} for {segments} segments = {per_segment:.2f} per "
        f"segment ({by_method}); 0.1.0 made {REQUESTS_0_1:.2f} (BENCHMARKS.md); "
        f"{sum(requests.values()) / (tiered / GIB):,.0f} per GiB tiered"
    )
    print(f"sidecar CPU per GiB tiered: {ours.cpu_seconds / (tiered / GIB):.2f} s (target <= 2)")
    if messages != store.messages:
        raise RuntimeError(f"tiered {messages} messages, the store has {store.messages}")
    ratio = ours_rate / base_rate
    print(result_line("tiering_s3", ratio, f">={RATIO_TARGET}", ratio >= RATIO_TARGET))
    print(result_line("tiering_s3_rss", ours.peak_rss / MIB, "<256MiB", ours.peak_rss < RSS_TARGET))


if __name__ == "__main__":
    main()
