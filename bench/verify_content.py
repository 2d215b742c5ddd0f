"""Verifier throughput, content level: record bytes/s on ``local[2]``, vs raw numpy.

Synthesizes a store of ``--size`` commitlog bytes (default 128 MiB, same shape as the
tiering benchmarks), tiers it with ``tieredstore run --once`` into a local cold
directory, and then times:

* **verifier**: ``python -m tieredstore.verifier --level content --master local[2]`` as a process.
  ``job`` is the Spark job alone (``report.json`` finished − started: no JVM start-up,
  no report writing); ``process`` is the whole command. The rate counts the verifier's
  own ``bytes_compared``;
* **numpy**: one Python process doing the same work the plainest way — for every
  manifest, read the COMMIT_LOG object, check its digest (the algorithm the manifest
  names, as the verifier does: CRC-32C since 0.2, SHA-256 before), read the hot records its
  CONSUME_QUEUE names (``mmap`` slices of the commitlog), and compare them with numpy
  byte for byte outside bytes [28, 36) (the rewritten physicalOffset).

Files are warm for both (just written, then read once). Then the fixed cost per run: a
whole verifier process on a near-empty store (its time, its Spark jobs). Last lines::

    RESULT verify_content_vs_numpy ratio=<job rate ÷ numpy rate> target=>=1.0 PASS|FAIL
    RESULT verify_content ratio=<job rate ÷ numpy rate> target=>=200MiB/s PASS|FAIL

(the first PASS on the ratio, the target on a 10 GiB store; the second on the job's
absolute rate.)
"""

from __future__ import annotations

import argparse
import json
import mmap
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from _common import (
    BROKER,
    CLUSTER,
    MIB,
    Stopwatch,
    add_fixed_cost_argument,
    add_store_arguments,
    batch_objects,
    fixed_cost_line,
    machine,
    mb_per_s,
    result_line,
    run_measured,
    sidecar_cmd,
    sidecar_env,
    store_from_args,
    table,
    verifier_run,
    warm,
)

from tieredstore.cold.batch import commit_log_span
from tieredstore.cold.digests import DigestAlgorithm, digest
from tieredstore.formats.consumequeue import CQ_UNIT_DTYPE

TARGET = 200 * MIB  # bytes/s
VS_NUMPY = 1.0  # the job's rate / the numpy + digest baseline's (issue 17: on 10 GiB)
_OFFSET = slice(28, 36)  # physicalOffset: rewritten for cold


class _Commitlog:
    """The hot commitlog files, mapped read-only, addressed by global offset."""

    def __init__(self, directory: Path) -> None:
        self.files: list[tuple[int, mmap.mmap]] = []
        for path in sorted(directory.iterdir()):
            with path.open("rb") as fh:
                mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            self.files.append((int(path.name), mapped))

    def records(self, offsets: np.ndarray, sizes: np.ndarray) -> bytes:
        out = bytearray()
        for off, size in zip(offsets.tolist(), sizes.tolist(), strict=True):
            base, mm = next((b, m) for b, m in reversed(self.files) if b <= off)
            out += mm[off - base : off - base + size]
        return bytes(out)

    def close(self) -> None:
        for _, mm in self.files:
            mm.close()


def _pieces(cold: Path) -> Iterator[tuple[str, int, int, int, bytes, str, str, str]]:
    """Every committed piece of cold: (topic, queue id, start, end, COMMIT_LOG bytes, their
    digest, its algorithm, where): each segment, and each slice of a batch object
    (``tiering.batching``, on by default)."""
    for mpath in sorted(cold.rglob("MANIFEST/*.json")):
        m = json.loads(mpath.read_text())
        data = (mpath.parent.parent / "COMMIT_LOG" / m["commit_log"]["name"]).read_bytes()
        yield (m["topic"], m["queue_id"], m["start_offset"], m["end_offset"], data,
               m["commit_log"]["digest"], m["digest_algorithm"], str(mpath))  # fmt: skip
    for bpath, raw, head in batch_objects(cold):
        for part in head.index.slices:
            at, end = commit_log_span(head, part)
            yield (part.topic, part.queue_id, part.start_offset, part.end_offset,
                   raw[at:end], part.commit_log_digest, head.index.digest_algorithm,
                   f"{bpath} {part}")  # fmt: skip


def numpy_baseline(hot: Path, cold: Path) -> int:
    """Compare every cold record with its hot record; return the bytes compared."""
    commitlog = _Commitlog(hot / "commitlog")
    compared = 0
    try:
        for topic, queue_id, start, end, data, expected, algo, where in _pieces(cold):
            qdir = hot / "consumequeue" / topic / str(queue_id)
            hot_units = np.concatenate(
                [np.fromfile(f, dtype=CQ_UNIT_DTYPE) for f in sorted(qdir.iterdir())]
            )[start:end]
            if digest(data, DigestAlgorithm(algo)) != expected:
                raise RuntimeError(f"digest mismatch for {where}")
            ours = np.frombuffer(data, dtype=np.uint8)
            theirs = np.frombuffer(
                commitlog.records(hot_units["commitlog_offset"], hot_units["size"]), dtype=np.uint8
            )
            sizes = hot_units["size"].astype(np.int64)
            starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
            if len(ours) != len(theirs):
                raise RuntimeError(f"baseline: {where} covers {len(ours)} bytes, hot {len(theirs)}")
            differ = ours != theirs
            differ[(starts[:, None] + np.arange(_OFFSET.start, _OFFSET.stop)).ravel()] = False
            if differ.any():
                raise RuntimeError(f"baseline found a mismatch in {where}")
            compared += len(ours)
    finally:
        commitlog.close()
    return compared


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_store_arguments(ap, size="128M")
    ap.add_argument("--master", default="local[2]")
    add_fixed_cost_argument(ap)
    args = ap.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="bench-verify-content-") as tmp:
        root = Path(tmp)
        store = store_from_args(args, root / "store")
        cold = root / "cold"
        with Stopwatch() as sw:
            run_measured(
                sidecar_cmd(store.root, str(cold), root / "state"),
                env=sidecar_env(),
                log=root / "sidecar.log",
            )
        print(f"tiered with tieredstore run --once in {sw.seconds:.1f} s; warm files")
        warm([store.commitlog_dir, store.root / "consumequeue", cold])
        with Stopwatch() as base:
            compared = numpy_baseline(store.root, cold)
        run = verifier_run(
            store.root,
            str(cold),
            level="content",
            out=root / "report",
            master=args.master,
            cluster=CLUSTER,
            broker=BROKER,
        )
        fixed = fixed_cost_line(root, master=args.master, measure=args.fixed_cost)
    job_rate, base_rate = mb_per_s(run.bytes, run.job_seconds), mb_per_s(compared, base.seconds)
    print(
        table(
            ["run", "seconds", "MiB", "MiB/s", "records/s"],
            [
                [
                    "verifier job (Spark)",
                    run.job_seconds,
                    run.bytes // MIB,
                    job_rate,
                    round(store.messages / run.job_seconds),
                ],
                [
                    "verifier process",
                    run.seconds,
                    run.bytes // MIB,
                    mb_per_s(run.bytes, run.seconds),
                    round(store.messages / run.seconds),
                ],
                [
                    "numpy baseline",
                    base.seconds,
                    compared // MIB,
                    base_rate,
                    round(store.messages / base.seconds),
                ],
            ],
        )
    )
    start_up = run.seconds - run.job_seconds
    print(f"verifier verdict {run.verdict}; JVM start-up and report writing {start_up:.1f} s")
    print("\n".join(run.profile.lines()))
    print(fixed)
    if compared != run.bytes:
        print(f"note: the verifier compared {run.bytes:,} bytes, the baseline {compared:,}")
    ratio = job_rate / base_rate
    print(result_line("verify_content_vs_numpy", ratio, ">=1.0", ratio >= VS_NUMPY))
    print(result_line("verify_content", ratio, ">=200MiB/s", job_rate * MIB >= TARGET))


if __name__ == "__main__":
    main()
