"""Consume-queue parsing speed: our bulk reader vs a raw numpy frombuffer baseline.

Writes a synthetic queue of ``--units`` CQ units (default 3,000,000) into consume-queue
files, then times ``HotStore.read_units`` over the whole range against
``np.frombuffer`` of the same bytes already read from disk plus the file reads. Prints
units/s for both and the ratio. Last line: ``RESULT cq_parse ratio=<x> target=<y> PASS|FAIL``
where the target is absolute: the whole parse must take well under one second.
"""

from __future__ import annotations

import argparse
import struct
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import machine, result_line

from tieredstore.formats.consumequeue import CQ_UNIT_DTYPE, CQ_UNIT_SIZE
from tieredstore.hot.store import HotStore


def _write_queue(root: Path, units: int, file_units: int) -> None:
    qdir = root / "consumequeue" / "BenchTopic" / "0"
    qdir.mkdir(parents=True)
    (root / "commitlog").mkdir()
    arr = np.zeros(units, dtype=CQ_UNIT_DTYPE)
    arr["commitlog_offset"] = np.arange(units, dtype=np.int64) * 200
    arr["size"] = 200
    arr["tags_code"] = 12345
    raw = arr.tobytes()
    fsize = file_units * CQ_UNIT_SIZE
    for base in range(0, len(raw), fsize):
        chunk = raw[base : base + fsize]
        (qdir / f"{base:020d}").write_bytes(chunk + bytes(fsize - len(chunk)))
    # commitlog file so hot min is computed against offset 0
    (root / "commitlog" / f"{0:020d}").write_bytes(struct.pack(">i", 0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--units", type=int, default=3_000_000)
    ap.add_argument("--file-units", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workdir", type=Path, help="where the queue is written (default: a temp dir)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        root = Path(tmp)
        _write_queue(root, args.units, args.file_units)
        hot = HotStore(root)
        files = sorted((root / "consumequeue" / "BenchTopic" / "0").iterdir())
        ours, base = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            units = hot.read_units("BenchTopic", 0, 0, args.units)
            ours.append(time.perf_counter() - t0)
            assert units.shape[0] == args.units
            t0 = time.perf_counter()
            raw = b"".join(f.read_bytes() for f in files)
            ref = np.frombuffer(raw, dtype=CQ_UNIT_DTYPE)[: args.units]
            base.append(time.perf_counter() - t0)
            assert int(ref["size"].sum()) == int(units["size"].sum())
    t_ours, t_base = min(ours), min(base)
    print(f"{'reader':<24} {'seconds':>10} {'units/s':>14}")
    print(f"{'HotStore.read_units':<24} {t_ours:>10.4f} {args.units / t_ours:>14,.0f}")
    print(f"{'raw read+frombuffer':<24} {t_base:>10.4f} {args.units / t_base:>14,.0f}")
    ratio = t_base / t_ours
    ok = t_ours < 0.5 * args.units / 3_000_000
    print(machine())
    print(result_line("cq_parse", ratio, "parse<0.5s/3M_units", ok))


if __name__ == "__main__":
    main()
