"""Compressed cold objects (issue 50): what zstd saves on commit-log bytes, and whether
records whose body the producer already compressed are worth compressing again.

For each of four stores of ``--size`` commit-log bytes (bodies ``--body-min`` ..
``--body-max``: JSON events and hex text, each without and with producer compression,
i.e. bodies over ``--compress-over`` ZLIB-compressed with sysFlag COMPRESSED as a
RocketMQ client does), this measures in process, one thread, on the same bytes:

* **(a) raw**: the commit-log data bytes (up to the checkpoint's confirm offset);
* **(b) stream**: ``zstd -3`` over all of them as one stream (the ``zstandard`` package,
  level 3): the physical limit;
* **(c) frames**: the same bytes in independent 1 MiB frames at the sidecar's default
  level (``cold.compression_level``, 1): what the cold store writes with
  ``cold.compression = "zstd"`` (its encoder, seek table included);
* **(d) frames, skip**: (c) with every record whose body is producer-compressed left
  out of the frames and stored raw (its bytes counted as is; the others gathered and
  framed as one run): the best case of skipping, which a cold object cannot have
  without reordering its records;
* **(e) frames, cut**: what skipping costs in an object that keeps the commit log's
  order: each run of records between producer-compressed ones in its own frames (at
  most 1 MiB), each producer-compressed run stored raw.

(d) and (e) include gathering or cutting the records in their CPU, not finding them
(the tiering pass parses every record already).

CPU seconds are per GiB of raw bytes for every column, so they compare. Then, when the
sidecar has the setting ``cold.compression`` (the key is looked up in the settings
declaration), ``--repeat`` pairs of ``tieredstore run --once`` per store with it
``none`` and ``zstd`` (``tiering.batching`` at its default, on: the small queues' tails
go into batch objects, compressed too since batch format 2): the median seconds, CPU
seconds and MiB/s of commit log, the whole cold store's bytes (every object: segments,
manifests, batches), the batch objects' share of them and the runs' peak RSS; otherwise
``skipped: cold.compression not available``.

Last lines (the JSON store without producer compression for the first two, the JSON
store with it for the third)::

    RESULT compression_frames_vs_stream ratio=<(c) bytes ÷ (b) bytes> target=<=1.1 PASS|FAIL
    RESULT compression_frames_vs_raw ratio=<(c) bytes ÷ raw bytes> target=<=0.5 PASS|FAIL
    RESULT compression_skip_bytes ratio=<(e) bytes ÷ (c) bytes> target=>=1 PASS|FAIL

and, when the tiering runs ran, for the JSON store without producer compression::

    RESULT compression_cold_vs_raw ratio=<cold store bytes, zstd ÷ raw> target=<=0.35 PASS|FAIL
    RESULT compression_tiering_speed ratio=<MiB/s, zstd ÷ none> target=>=0.8 PASS|FAIL
    RESULT compression_tiering_rss ratio=<peak RSS MiB of any zstd run> target=<256MiB PASS|FAIL

The third is the measurement behind compressing every frame whole (issue 50's item 3):
PASS when skipping producer-compressed records, in an object that keeps the commit log's
order, would store more bytes than compressing them again, so what cold costs each month
is not lowered by skipping. What skipping would save in CPU, (d) and (e) against (c), is
printed above it.

The tiering runs are ``--repeat`` pairs per store, none and zstd alternating; their
columns are medians (see :func:`_tiering`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import (
    GIB,
    MIB,
    Measured,
    cold_bytes,
    machine,
    mb_per_s,
    result_line,
    run_measured,
    sidecar_cmd,
    sidecar_env,
    size_arg,
    synth_store,
    table,
)

from tieredstore.cold.compressed.frames import FrameSettings, encode
from tieredstore.formats.checkpoint import read_checkpoint
from tieredstore.hot.store import HotStore
from tieredstore.settings.declaration import ColdSettings

FRAME = 1 << 20
STREAM_LEVEL = 3  # the physical limit: zstd -3 over the whole stream
LEVEL = ColdSettings.default_of("compression_level")
SETTINGS = FrameSettings(FRAME, LEVEL)
FRAMES_VS_STREAM = 1.1
FRAMES_VS_RAW = 0.5
SKIP_BYTES = 1.0
COLD_VS_RAW = 0.35
TIERING_SPEED = 0.8
RSS_MIB = 256


@dataclass(frozen=True, slots=True)
class Packed:
    """One way of storing the bytes: its size and the CPU it took (process seconds)."""

    nbytes: int
    cpu: float


@dataclass(frozen=True, slots=True)
class Variant:
    """One store measured: its name, raw bytes, the producer-compressed share, (b)-(d)."""

    name: str
    raw: int
    producer_share: float  # of raw bytes, in records with a producer-compressed body
    stream: Packed
    frames: Packed
    skip: Packed | None  # None: no producer-compressed record to skip
    cut: Packed | None


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--size", default="256M", help="commit-log bytes of each store (256M)")
    ap.add_argument("--topics", type=int, default=16)
    ap.add_argument("--queues", type=int, default=8, help="queues per topic")
    ap.add_argument("--body-min", type=int, default=256, help="smallest body (bytes)")
    ap.add_argument("--body-max", type=int, default=8192, help="largest body (bytes)")
    ap.add_argument(
        "--compress-over", type=int, default=4096,
        help="the producer compresses bodies over this size, in the stores that it does",
    )  # fmt: skip
    ap.add_argument("--no-tiering", action="store_true", help="skip the sidecar runs")
    ap.add_argument(
        "--repeat", type=int, default=5,
        help="pairs of sidecar runs per store, none and zstd alternating; medians (5)",
    )  # fmt: skip
    ap.add_argument("--workdir", type=Path, default=None, help="where to write (a temp dir)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")
    return args


def _commitlog(root: Path) -> bytes:
    """The commit-log data bytes, files in order, up to the confirm offset."""
    end = read_checkpoint(root / "checkpoint").confirm_phy_offset
    parts: list[bytes] = []
    for path in sorted((root / "commitlog").iterdir()):
        base = int(path.name)
        if base < end:
            with path.open("rb") as fh:
                parts.append(fh.read(end - base))
    return b"".join(parts)


def _producer_spans(root: Path) -> list[tuple[int, int]]:
    """(start, end) of every record whose body the producer compressed, merged."""
    spans: list[tuple[int, int]] = []
    for s in HotStore(root).scan_commitlog():
        if not s.record.compressed:
            continue
        end = s.offset + s.record.total_size
        if spans and spans[-1][1] == s.offset:
            spans[-1] = (spans[-1][0], end)
        else:
            spans.append((s.offset, end))
    return spans


def _stream(data: bytes) -> Packed:
    import zstandard

    t0 = time.process_time()
    n = len(zstandard.ZstdCompressor(level=STREAM_LEVEL).compress(data))
    return Packed(n, time.process_time() - t0)


def _frames(data: bytes | memoryview, cctx: Any = None) -> int:
    """Bytes of ``data`` in independent frames of at most 1 MiB, the cold store's frames
    without their seek table (``cctx``: a compressor)."""
    c = cctx or SETTINGS.compressor()
    view = memoryview(data)
    return sum(len(c.compress(view[i : i + FRAME])) for i in range(0, len(view), FRAME))


def _framed(data: bytes) -> Packed:
    """(c): what ``cold.compression = "zstd"`` stores, seek table included."""
    t0 = time.process_time()
    n = len(encode(data, SETTINGS))
    return Packed(n, time.process_time() - t0)


def _skipping(data: bytes, spans: list[tuple[int, int]]) -> Packed:
    """(d): the records outside ``spans`` gathered and framed; ``spans`` stored raw."""
    t0 = time.process_time()
    view = memoryview(data)
    kept: list[memoryview] = []
    pos = 0
    for start, end in spans:
        kept.append(view[pos:start])
        pos = end
    kept.append(view[pos:])
    raw = len(data) - sum(len(k) for k in kept)
    n = _frames(b"".join(kept)) + raw
    return Packed(n, time.process_time() - t0)


def _cutting(data: bytes, spans: list[tuple[int, int]]) -> Packed:
    """(e): each run between ``spans`` framed on its own; ``spans`` stored raw."""
    t0 = time.process_time()
    cctx = SETTINGS.compressor()
    view = memoryview(data)
    n = pos = 0
    for start, end in spans:
        n += _frames(view[pos:start], cctx) + end - start
        pos = end
    n += _frames(view[pos:], cctx)
    return Packed(n, time.process_time() - t0)


def _measure(name: str, root: Path) -> Variant:
    data = _commitlog(root)
    spans = _producer_spans(root)
    share = sum(e - s for s, e in spans) / len(data) if data else 0.0
    skip = _skipping(data, spans) if spans else None
    cut = _cutting(data, spans) if spans else None
    return Variant(name, len(data), share, _stream(data), _framed(data), skip, cut)


def _batch_bytes(cold: Path) -> int:
    """Bytes of the batch objects under ``cold`` (``<broker>/_batches/*.batch``)."""
    return sum(p.stat().st_size for p in cold.rglob("*.batch"))


def _tiering(name: str, root: Path, work: Path, raw: int, repeat: int) -> list[list[Any]]:
    """``repeat`` pairs of ``run --once`` with ``cold.compression`` none and zstd, the
    order alternating from pair to pair (none first, then zstd first, ...), each run into
    its own fresh directories: table rows per mode (the store and mode, then the
    **medians** of seconds, CPU s and MiB/s, the cold MiB, cold ÷ raw, batch share).

    One run of a 256 MiB store takes about a second, a third of it the interpreter's start,
    so a single pair's ratio moved by a tenth from one run to the next on a quiet host;
    the median of alternating pairs does not follow one slow run or the host's drift.

    Nothing is deleted between the runs (the temporary directory goes at the end). On an
    ext4 without a journal, the inode allocator skips every inode freed in the last
    minute, one buffer lookup each, so a run started right after another's cold store
    was removed spent up to half its system CPU there: 0.5 more CPU-s (and 0.2 s) for
    a 256 MiB run, measured with perf; 70 s later it was gone."""
    runs: dict[str, list[Measured]] = {"none": [], "zstd": []}
    stored: dict[str, int] = {}
    share: dict[str, float] = {}
    for i in range(repeat):
        for mode in ("none", "zstd") if i % 2 == 0 else ("zstd", "none"):
            run = work / f"{mode}-{i}"
            cold, state, log = run / "cold", run / "state", run / "sidecar.log"
            run.mkdir(parents=True)
            runs[mode].append(run_measured(
                sidecar_cmd(root, str(cold), state), env=sidecar_env(cold_compression=mode),
                log=log,
            ))  # fmt: skip
            stored[mode] = cold_bytes(cold)
            share[mode] = _batch_bytes(cold) / stored[mode] if stored[mode] else 0.0
    rows: list[list[Any]] = []
    for mode, ms in runs.items():
        seconds = statistics.median(m.seconds for m in ms)
        cpu = statistics.median(m.cpu_seconds for m in ms)
        rows.append([f"{name}, {mode}", seconds, cpu, mb_per_s(raw, seconds),
                     stored[mode] / MIB, stored[mode] / raw if raw else 0.0,
                     share[mode], max(m.peak_rss for m in ms) / MIB])  # fmt: skip
    return rows


def _per_gib(p: Packed, raw: int) -> float:
    return p.cpu / (raw / GIB) if raw else 0.0


def _row(v: Variant, label: str, p: Packed | None) -> list[object]:
    if p is None:
        return [f"{v.name}: {label}", "-", "-", "-", "-"]
    return [f"{v.name}: {label}", p.nbytes / MIB, p.nbytes / v.raw, p.nbytes / v.stream.nbytes,
            _per_gib(p, v.raw)]  # fmt: skip


def main() -> int:
    args = _args()
    size = size_arg(args.size)
    print(machine())
    has_setting = any(s.key == "cold.compression" for s in ColdSettings.settings())
    variants: list[Variant] = []
    tiering: list[list[Any]] = []
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for kind in ("json", "hex"):
            for over in (0, args.compress_over):
                name = f"{kind}, producer {'zlib>' + str(over) if over else 'none'}"
                # Every store and run keeps its own directory until the end: no timed run
                # follows the deletion of another's files (see _tiering).
                work = Path(tmp) / f"{kind}-{over}"
                root = work / "store"
                synth_store(root, size, topics=args.topics, queues=args.queues,
                            body_min=args.body_min, body_max=args.body_max, body_kind=kind,
                            compress_over=over)  # fmt: skip
                os.sync()
                variants.append(_measure(name, root))
                if has_setting and not args.no_tiering:
                    tiering += _tiering(name, root, work, variants[-1].raw, args.repeat)
    rows: list[list[object]] = []
    for v in variants:
        rows.append([f"{v.name}: (a) raw", v.raw / MIB, 1.0, v.raw / v.stream.nbytes, "-"])
        rows.append(_row(v, "(b) zstd -3 stream", v.stream))
        rows.append(_row(v, "(c) 1 MiB frames", v.frames))
        rows.append(_row(v, "(d) frames, skip producer-compressed", v.skip))
        rows.append(_row(v, "(e) frames cut at producer-compressed", v.cut))
    print(table(["store: bytes as", "MiB", "÷ raw", "÷ (b)", "CPU s/GiB"], rows))
    for v in variants:
        if v.skip is not None and v.cut is not None:
            print(
                f"{v.name}: {v.producer_share:.1%} of raw bytes in producer-compressed records; "
                f"skipping them: CPU (d)/(c) {v.skip.cpu / v.frames.cpu:.3f}, "
                f"(e)/(c) {v.cut.cpu / v.frames.cpu:.3f}; "
                f"bytes (d)/(c) {v.skip.nbytes / v.frames.nbytes:.3f}, "
                f"(e)/(c) {v.cut.nbytes / v.frames.nbytes:.3f}"
            )
    if not has_setting:
        print("skipped: cold.compression not available")
    elif tiering:
        print(table(["run --once: store, cold.compression", "median s", "CPU s", "MiB/s",
                     "cold MiB", "cold ÷ raw", "batch share", "peak RSS MiB"],
                    tiering))  # fmt: skip
    print("load average at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    plain, producer = variants[0], variants[1]
    vs_stream = plain.frames.nbytes / plain.stream.nbytes
    vs_raw = plain.frames.nbytes / plain.raw
    cut = producer.cut
    skip = cut.nbytes / producer.frames.nbytes if cut and producer.frames.nbytes else 1.0
    print(result_line("compression_frames_vs_stream", vs_stream, f"<={FRAMES_VS_STREAM:g}",
                      vs_stream <= FRAMES_VS_STREAM))  # fmt: skip
    print(result_line("compression_frames_vs_raw", vs_raw, f"<={FRAMES_VS_RAW:g}",
                      vs_raw <= FRAMES_VS_RAW))  # fmt: skip
    print(result_line("compression_skip_bytes", skip, f">={SKIP_BYTES:g}", skip >= SKIP_BYTES))
    if len(tiering) >= 2:  # the JSON store without producer compression: none, zstd
        off, on = tiering[0], tiering[1]
        cold = float(on[5])
        speed = float(on[3]) / float(off[3]) if off[3] else 0.0
        print(result_line("compression_cold_vs_raw", cold, f"<={COLD_VS_RAW:g}",
                          cold <= COLD_VS_RAW))  # fmt: skip
        print(result_line("compression_tiering_speed", speed, f">={TIERING_SPEED:g}",
                          speed >= TIERING_SPEED))  # fmt: skip
        rss = max(float(row[7]) for row in tiering if row[0].endswith(", zstd"))
        print(result_line("compression_tiering_rss", rss, "<256MiB", rss < RSS_MIB))
    return 0


if __name__ == "__main__":
    sys.exit(main())
