"""Shared pieces of the ``bench/`` scripts: stores, subprocess timing, tables, RESULT lines.

Every script prints a short table and, last, one line per target::

    RESULT <name> ratio=<x> target=<y> PASS|FAIL

``ratio`` is ours ÷ baseline when there is a baseline, else the measured value itself;
``target`` says what PASS means. Timing lives here and in the scripts only, never in the
unit tests (``tests/repo/test_bench_smoke.py`` checks only that each script runs and prints a
well-formed RESULT line).

Peak RSS of a child process is its own ``VmHWM`` from ``/proc/<pid>/status``, sampled
until it exits, so the benchmark's own memory never counts (see :func:`run_measured`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: The repository root. The test support (tests/support/) is not installed (the wheel holds
#: no test code), so each bench script, run as ``python bench/<name>.py``, imports it from
#: here; every script imports this module before ``tests.support``.
REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support.moto import AWS_ENV as MOTO_ENV
from tieredstore.cold.batch import BatchHead, data_section, read_batch_head
from tieredstore.cold.digests import digest
from tieredstore.cold.layout import object_name
from tieredstore.cold.manifest import DIGEST_ALGORITHM, FORMAT_VERSION, Manifest, ObjectRef
from tieredstore.formats.checkpoint import read_checkpoint
from tieredstore.formats.consumequeue import CQ_UNIT_DTYPE, CQ_UNIT_SIZE, encode_units
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize
from tieredstore.settings.loader import parse_size

#: The upload attempt in the names of the objects the offsets-store builder writes.
ATTEMPT = "0000000000000000"

__all__ = [
    "AWS_ENV",
    "BROKER",
    "CLUSTER",
    "GIB",
    "MIB",
    "Measured",
    "SparkProfile",
    "Stopwatch",
    "StoreSummary",
    "VerifierRun",
    "add_fixed_cost_argument",
    "add_sidecar_env_argument",
    "add_store_arguments",
    "cold_bytes",
    "content_store",
    "extra_env",
    "fixed_cost_line",
    "machine",
    "mb_per_s",
    "offsets_store",
    "result_line",
    "run_measured",
    "sidecar_cmd",
    "sidecar_env",
    "size_arg",
    "spark_profile",
    "store_from_args",
    "synth_store",
    "table",
    "tiered_totals",
    "timed_verify",
    "timed_verify_jobs",
    "tiny_store",
    "verifier_run",
    "verifier_stage_seconds",
    "verify_options",
    "vm_hwm",
    "warm",
]

#: Dummy credentials for moto on loopback (tests.support.moto); nothing here ever
#: reaches AWS.
AWS_ENV = {
    **MOTO_ENV,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": "/nonexistent/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
}
CLUSTER = "BenchCluster"
BROKER = "bench-broker"
MIB = 1 << 20
GIB = 1 << 30


def size_arg(text: str) -> int:
    """argparse type for ``--size``: ``2G``, ``512M``, ``1073741824``."""
    try:
        size = parse_size(text)
    except ValueError as exc:
        raise ValueError(f"bad --size {text!r}: {exc}") from exc
    if size <= 0:
        raise ValueError(f"--size must be positive, got {text!r}")
    return size


def mb_per_s(nbytes: int, seconds: float) -> float:
    """MB/s in MiB (2^20 bytes) per second; 0 for a zero-length interval."""
    return nbytes / MIB / seconds if seconds > 0 else 0.0


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain fixed-width table: first column left-aligned, the rest right-aligned.

    Floats are printed with two decimals and ints with thousands separators.
    """

    def cell(v: object) -> str:
        if isinstance(v, float):
            return f"{v:,.2f}"
        if isinstance(v, int) and not isinstance(v, bool):
            return f"{v:,}"
        return str(v)

    body = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest]).rstrip()

    return "\n".join([line(list(headers)), *(line(r) for r in body)])


def result_line(name: str, ratio: float, target: str, passed: bool) -> str:
    """The last line a script prints for one target (parsed by the smoke test).

    ``name`` and ``target`` must not contain whitespace: the line is split on spaces.
    """
    if any(c.isspace() for c in name + target):
        raise ValueError(f"RESULT name and target must not contain spaces: {name!r} {target!r}")
    return f"RESULT {name} ratio={ratio:.3g} target={target} {'PASS' if passed else 'FAIL'}"


def machine() -> str:
    """One line describing this machine and its load right now."""
    cpu = platform.processor() or platform.machine()
    try:
        for text in Path("/proc/cpuinfo").read_text().splitlines():
            if text.startswith("model name"):
                cpu = text.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {mem:.0f} GiB RAM, Python "
        f"{platform.python_version()}, load average {load}"
    )


class Stopwatch:
    """Wall-clock seconds of a ``with`` block: ``with Stopwatch() as sw: ...; sw.seconds``."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._t0 = 0.0

    def __enter__(self) -> Stopwatch:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0


@dataclass(frozen=True, slots=True)
class Measured:
    """One finished child process: wall seconds, CPU seconds (user + system, its own and
    its reaped children's), its own peak RSS, its exit code."""

    seconds: float
    cpu_seconds: float
    peak_rss: int
    returncode: int
    #: The user part of ``cpu_seconds`` (the rest is the kernel's, on the process's behalf).
    user_seconds: float = 0.0
    #: The peak of its anonymous memory (``RssAnon``): ``peak_rss`` less the pages of
    #: files it mapped (the page cache it reads through a map) and shared memory.
    peak_anon: int = 0


def _status_bytes(pid: int, *fields: str) -> tuple[int, ...]:
    """``fields`` of a live process's ``/proc/<pid>/status`` in bytes (0 each once it has
    exited, or where a field is missing)."""
    found = dict.fromkeys(fields, 0)
    try:
        for text in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, rest = text.partition(":")
            if name in found:
                found[name] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return tuple(found[f] for f in fields)


def vm_hwm(pid: int) -> int:
    """Peak RSS (VmHWM) of a live process in bytes; 0 once it has exited."""
    return _status_bytes(pid, "VmHWM")[0]


def run_measured(
    cmd: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    poll: float = 0.02,
) -> Measured:
    """Run ``cmd`` to completion; return its wall time, CPU time and peak RSS.

    CPU time is the change of ``RUSAGE_CHILDREN`` across the wait (the benchmarks run
    one measured child at a time). The peak is the child's own ``VmHWM``, sampled every
    ``poll`` seconds until it exits (it only grows, so the last sample is the peak to
    within ``poll``). Not ``wait4``'s ``ru_maxrss``: Linux carries the parent's
    high-water mark across fork and exec into it, so a child would never look smaller
    than the benchmark that started it. Its ``RssAnon`` is sampled alongside (that one can
    fall, so its peak is the highest sample).

    Output goes to ``log`` (appended) or is discarded. A non-zero exit raises
    RuntimeError with the last lines of the log: a failed run has no meaningful time.
    """
    out = log.open("ab") if log else open(os.devnull, "wb")  # noqa: SIM115 - closed below
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(cmd), env=dict(env) if env else None, stdout=out, stderr=out)
        peaks = [0]
        anon = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(poll):
                hwm, rss_anon = _status_bytes(proc.pid, "VmHWM", "RssAnon")
                peaks.append(hwm)
                anon.append(rss_anon)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        proc.wait()  # in this thread, so the wall time is exact whatever the poll interval
        seconds = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        done.set()
        sampler.join()
        peak = max(peaks)
    finally:
        out.close()
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log else []
        raise RuntimeError(
            f"{' '.join(cmd[:4])} ... exited {proc.returncode}; last lines of its output:\n"
            + "\n".join(tail)
        )
    user = after.ru_utime - before.ru_utime
    cpu = user + after.ru_stime - before.ru_stime
    return Measured(seconds, cpu, peak, proc.returncode, user, max(anon))


def sidecar_cmd(store: Path, cold: str, state: Path, *extra: str, once: bool = True) -> list[str]:
    """``tieredstore run`` (``--once`` unless told) for the bench cluster and broker."""
    return [
        sys.executable,
        "-m",
        "tieredstore.cli",
        "run",
        *(["--once"] if once else []),
        "--store",
        str(store),
        "--cold",
        cold,
        "--state-dir",
        str(state),
        "--cluster",
        CLUSTER,
        "--broker",
        BROKER,
        "--progress",
        "off",
        "--no-wait",
        *extra,
    ]


def sidecar_env(**settings: str) -> dict[str, str]:
    """This environment minus inherited ``TIEREDSTORE_*``, plus ``settings``.

    Keys are setting names with ``_`` for ``.`` (``tiering_guard="none"`` →
    ``TIEREDSTORE_TIERING_GUARD=none``). The HTTP API is off: a benchmark must not
    collide with a sidecar someone else runs on the default port. Everything else is
    the default, lease renewal included.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIEREDSTORE_")}
    env["TIEREDSTORE_HTTP_ENABLED"] = "false"
    env.update({f"TIEREDSTORE_{k.upper()}": v for k, v in settings.items()})
    return env


@dataclass(frozen=True, slots=True)
class StoreSummary:
    """A synthesized store: messages, commitlog data bytes, and queues."""

    root: Path
    messages: int
    commitlog_bytes: int
    queues: int

    @property
    def commitlog_dir(self) -> Path:
        return self.root / "commitlog"


def synth_store(
    root: Path,
    size: int,
    *,
    topics: int,
    queues: int,
    body_min: int,
    body_max: int,
    file_size: int = 128 << 20,
    chunk_messages: int = 20_000,
    body_kind: str = "hex",
    compress_over: int = 0,
) -> StoreSummary:
    """Write a synthetic store of about ``size`` commitlog bytes into ``root``.

    Appends in chunks (the synthesizer holds one chunk in memory) until the commitlog
    reaches ``size``; the last chunk is trimmed by the average record size so far.
    ``body_kind`` is the synthesizer's (hex or json); ``compress_over`` (0: never) makes
    the "producer" ZLIB-compress bodies over that size (sysFlag COMPRESSED).
    """
    spec = SynthSpec(
        topics=topics,
        queues=queues,
        messages=chunk_messages,
        body_min=body_min,
        body_max=body_max,
        commitlog_file_size=file_size,
        cq_file_size=300_000 * CQ_UNIT_SIZE,
        # By default payloads as produced (no client-side compression).
        compress_over=compress_over,
        body_kind=body_kind,
    )
    store = SyntheticStore.create(root, spec)
    while True:
        written = _commitlog_end(store)
        if written >= size:
            break
        avg = written / store.written if store.written else (body_min + body_max) / 2 + 250
        store.append(max(1, min(chunk_messages, int((size - written) / avg) + 1)))
    return StoreSummary(root, store.written, _commitlog_end(store), topics * queues)


def _commitlog_end(store: SyntheticStore) -> int:
    # The checkpoint's confirmPhyOffset: every record byte plus end-of-file fillers.
    return read_checkpoint(store.root / "checkpoint").confirm_phy_offset


def warm(paths: Iterable[Path]) -> int:
    """Read every regular file under ``paths`` once, so it sits in the page cache.

    Both sides of a comparison are warmed the same way; returns the bytes read.
    """
    total = 0
    for path in _files(paths):
        with path.open("rb", buffering=0) as fh:
            while chunk := fh.read(8 << 20):
                total += len(chunk)
    return total


def _files(paths: Iterable[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_file():
            yield path
        elif path.is_dir():
            for dirpath, _dirs, names in os.walk(path):
                for name in sorted(names):
                    yield Path(dirpath) / name


def batch_objects(cold: Path) -> Iterator[tuple[Path, bytes, BatchHead]]:
    """Every batch object of a local cold directory (``tiering.batching``), by path: its
    path, its bytes in uncompressed coordinates (a compressed batch's data section
    decoded: slices' spans index them), its parsed head. A batch fence commits nothing:
    left out."""
    for path in sorted(cold.rglob("_batches/*.batch")):
        raw = path.read_bytes()
        head = read_batch_head(raw, key=str(path.relative_to(cold)), object_size=len(raw))
        if isinstance(head, BatchHead):
            yield path, raw[: head.data_offset] + data_section(head, raw), head


def cold_bytes(root: Path) -> int:
    """Bytes of every file under ``root`` (the cold tier as written)."""
    return sum(p.stat().st_size for p in _files([root]))


_DONE = re.compile(
    r"catch-up done: ([\d,]+) segments?, (?:([\d,]+) batch slices? in [\d,]+ batch objects?, )?"
    r"(\d+) messages, [^(]*\((\d+) bytes\)"
)


def tiered_totals(log: Path) -> tuple[int, int, int]:
    """(segments, messages, bytes) from the sidecar's ``catch-up done`` log line (batch
    slices count as segments)."""
    found = _DONE.findall(log.read_text(errors="replace"))
    if not found:
        raise RuntimeError(f"no 'catch-up done' line in {log}")
    segments, slices, messages, nbytes = found[-1]
    count = int(segments.replace(",", "")) + int(slices.replace(",", "") or 0)
    return count, int(messages), int(nbytes)


def add_store_arguments(ap: argparse.ArgumentParser, *, size: str) -> None:
    """``--size`` and the shape of the synthetic store (defaults: 128 queues, 256..4096 B)."""
    ap.add_argument("--size", type=size_arg, default=size, help=f"commitlog bytes ({size})")
    ap.add_argument("--topics", type=int, default=16)
    ap.add_argument("--queues", type=int, default=8, help="queues per topic")
    ap.add_argument("--body-min", type=int, default=256, help="smallest body (bytes)")
    ap.add_argument("--body-max", type=int, default=4096, help="largest body (bytes)")
    ap.add_argument("--workdir", type=Path, default=None, help="where to write (a temp dir)")


def add_fixed_cost_argument(ap: argparse.ArgumentParser) -> None:
    """``--fixed-cost`` / ``--no-fixed-cost``: also time a whole verifier process on a
    near-empty store (:func:`fixed_cost_line`, one more JVM; on by default)."""
    ap.add_argument(
        "--fixed-cost",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time a whole verifier process on a near-empty store (a second JVM)",
    )


def add_sidecar_env_argument(ap: argparse.ArgumentParser) -> None:
    """``--sidecar-env NAME=VALUE`` (repeatable): extra environment for the sidecar."""
    ap.add_argument(
        "--sidecar-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment variable for the sidecar, e.g. TIEREDSTORE_TIERING_CONCURRENCY=8",
    )


def extra_env(args: argparse.Namespace) -> dict[str, str]:
    """The ``--sidecar-env`` pairs as a dict (printed once, so a run says how it ran)."""
    pairs = dict(item.split("=", 1) for item in args.sidecar_env)
    if pairs:
        print("sidecar environment: " + " ".join(f"{k}={v}" for k, v in pairs.items()))
    return pairs


def store_from_args(args: argparse.Namespace, root: Path) -> StoreSummary:
    """Synthesize the store the arguments describe; print one line about it.

    The store is synced to disk before anything is timed: otherwise the kernel writes
    its gigabytes back during the first timed runs, which then share the disk with it.
    """
    with Stopwatch() as sw:
        store = synth_store(
            root,
            args.size,
            topics=args.topics,
            queues=args.queues,
            body_min=args.body_min,
            body_max=args.body_max,
        )
        os.sync()
    print(
        f"store: {store.messages:,} messages, {store.commitlog_bytes / MIB:,.0f} MiB "
        f"commitlog, {store.queues} queues, bodies {args.body_min}..{args.body_max} B "
        f"(synthesized in {sw.seconds:.1f} s)"
    )
    return store


@dataclass(frozen=True, slots=True)
class SparkProfile:
    """Where a Spark application's time went, from its event log."""

    jobs: int
    stages: int
    tasks: int
    stage_seconds: float  # stage wall time, summed over stages
    task_seconds: float  # executor run time, summed over tasks
    top: tuple[tuple[str, float, int], ...]  # (call site, wall seconds, stages) by wall

    def lines(self) -> list[str]:
        head = (
            f"spark event log: {self.jobs} jobs, {self.stages} stages, {self.tasks} tasks; "
            f"stage wall {self.stage_seconds:.1f} s, task run {self.task_seconds:.1f} s"
        )
        return [head, *(f"  {sec:6.1f} s in {n:3} stages: {site}" for site, sec, n in self.top)]


def spark_profile(event_dir: Path) -> SparkProfile:
    """Summarise the (zstd-compressed, Spark 4) event log Spark wrote under ``event_dir``."""
    import zstandard  # a dependency of tieredstore

    files = sorted(event_dir.glob("*/events_*"))
    if not files:
        raise RuntimeError(f"no Spark event log under {event_dir}")
    jobs = tasks = 0
    task_ms = 0
    by_site: dict[str, list[float]] = {}
    with files[-1].open("rb") as raw:
        reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        data = reader.read()
    for line in data.decode().splitlines():
        event = json.loads(line)
        kind = event["Event"]
        if kind == "SparkListenerJobStart":
            jobs += 1
        elif kind == "SparkListenerTaskEnd":
            tasks += 1
            task_ms += int((event.get("Task Metrics") or {}).get("Executor Run Time", 0))
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            site = str(info["Stage Name"]).replace(str(REPO) + "/", "")
            wall = (info["Completion Time"] - info["Submission Time"]) / 1000
            entry = by_site.setdefault(site, [0.0, 0])
            entry[0] += wall
            entry[1] += 1
    top = sorted(((s, w, int(n)) for s, (w, n) in by_site.items()), key=lambda t: -t[1])
    return SparkProfile(
        jobs=jobs,
        stages=int(sum(n for _, _, n in top)),
        tasks=tasks,
        stage_seconds=sum(w for _, w, _ in top),
        task_seconds=task_ms / 1000,
        top=tuple(top[:4]),
    )


@dataclass(frozen=True, slots=True)
class VerifierRun:
    """One ``python -m tieredstore.verifier`` process: its wall time, the job's own time, totals.

    ``job_seconds`` is ``finished_ms - started_ms`` of ``report.json``: the Spark job
    (reading, checking, collecting), without JVM and SparkSession start-up and without
    writing the reports. ``profile`` summarises Spark's event log of the run.
    """

    seconds: float
    job_seconds: float
    units: int
    bytes: int
    verdict: str
    profile: SparkProfile


def verifier_run(
    hot: Path, cold: str, *, level: str, out: Path, master: str, cluster: str, broker: str
) -> VerifierRun:
    """Run the verifier CLI on ``hot``/``cold``; RuntimeError unless it says CLEAN.

    Spark's event log is switched on (through ``PYSPARK_SUBMIT_ARGS``) and summarised.
    """
    cmd = [sys.executable, "-m", "tieredstore.verifier", "--store", str(hot), "--cold", cold]
    cmd += ["--cluster", cluster, "--broker", broker, "--level", level]
    cmd += ["--out", str(out), "--master", master, "--lag-allowance", "0"]
    events = out.parent / f"spark-events-{level}"
    events.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_SUBMIT_ARGS": f"--conf spark.eventLog.enabled=true "
        f"--conf spark.eventLog.dir={events.as_uri()} pyspark-shell",
    }
    log = out.parent / f"verifier-{level}.log"
    measured = run_measured(cmd, env=env, log=log)
    report = json.loads((out / "report.json").read_text())
    if report["verdict"] != "CLEAN":
        raise RuntimeError(f"verifier said {report['verdict']}, not CLEAN; see {out}")
    return VerifierRun(
        seconds=measured.seconds,
        job_seconds=(report["finished_ms"] - report["started_ms"]) / 1000,
        units=int(report["totals"]["units_compared"]),
        bytes=int(report["totals"]["bytes_compared"]),
        verdict=str(report["verdict"]),
        profile=spark_profile(events),
    )


def tiny_store(root: Path) -> Path:
    """A near-empty tiered store under ``root`` (one queue of 10 units, one segment; the
    bench cluster and broker): what a verify costs on it is the fixed cost per run."""
    offsets_store(root, 1, 10, 10)
    return root


def fixed_cost_line(root: Path, *, master: str, measure: bool = True) -> str:
    """One line: a whole ``python -m tieredstore.verifier`` process (fresh JVM) on a near-empty
    store, its job time and its Spark jobs and stages: the fixed cost of one run. With
    ``measure`` false (``--no-fixed-cost``) no process runs and the line says so."""
    if not measure:
        return "fixed cost per run: not measured (--no-fixed-cost)"
    store = tiny_store(root / "tiny")
    run = verifier_run(
        store / "hot",
        str(store / "cold"),
        level="offsets",
        out=store / "report",
        master=master,
        cluster=CLUSTER,
        broker=BROKER,
    )
    p = run.profile
    return (
        f"fixed cost per run (near-empty store, fresh JVM, {master}): process "
        f"{run.seconds:.1f} s, job {run.job_seconds:.1f} s, {p.jobs} Spark jobs, "
        f"{p.stages} stages, {p.tasks} tasks"
    )


#: Bytes per (imaginary) record of :func:`offsets_store`.
RECORD = 200
#: Units per hot CQ file of :func:`offsets_store`.
FILE_UNITS = 300_000  # units per hot CQ file, as the broker's default


def offsets_store(root: Path, queues: int, units: int, segment_units: int) -> int:
    """Write hot CQ files and cold segments for ``units`` units; return the count.

    Built with numpy, not by tiering: ``root/hot`` holds ``queues`` queues of topic
    ``BenchTopic`` whose records are ``RECORD`` bytes apart, ``root/cold`` their segments
    of ``segment_units`` units with valid manifests and CQ objects. COMMIT_LOG objects are
    sparse files of the right size: the offsets level never reads them.
    """
    per_queue = units // queues
    (root / "hot" / "commitlog").mkdir(parents=True)
    (root / "hot" / "commitlog" / f"{0:020d}").write_bytes(bytes(8))
    (root / "hot" / "checkpoint").write_bytes(bytes(4096))
    _records(root / "cold", queues)
    for q in range(queues):
        hot = np.zeros(per_queue, dtype=CQ_UNIT_DTYPE)
        hot["commitlog_offset"] = (np.arange(per_queue, dtype=np.int64) * queues + q) * RECORD
        hot["size"] = RECORD
        hot["tags_code"] = np.arange(per_queue) % 7
        qdir = root / "hot" / "consumequeue" / "BenchTopic" / str(q)
        qdir.mkdir(parents=True)
        raw, size = hot.tobytes(), FILE_UNITS * CQ_UNIT_SIZE
        for base in range(0, len(raw), size):
            chunk = raw[base : base + size]
            (qdir / f"{base:020d}").write_bytes(chunk + bytes(size - len(chunk)))
        for start in range(0, per_queue, segment_units):
            end = min(start + segment_units, per_queue)
            cold = hot[start:end].copy()
            cold["commitlog_offset"] = (start + np.arange(end - start)) * RECORD
            cq = encode_units(cold)
            cl_base, cl_size = start * RECORD, (end - start) * RECORD
            manifest = Manifest(
                format_version=FORMAT_VERSION,
                cluster=CLUSTER,
                broker=BROKER,
                topic="BenchTopic",
                queue_id=q,
                start_offset=start,
                end_offset=end,
                cl_base=cl_base,
                cl_end=cl_base + cl_size,
                # Never read at the offsets level: a well-formed placeholder digest.
                commit_log=ObjectRef(
                    object_name(cl_base, ATTEMPT), cl_size, "0" * DIGEST_ALGORITHM.hex_length
                ),
                consume_queue=ObjectRef(
                    object_name(start * CQ_UNIT_SIZE, ATTEMPT), len(cq), digest(cq)
                ),
                digest_algorithm=DIGEST_ALGORITHM,
                min_store_timestamp=1,
                max_store_timestamp=1,
                message_count=end - start,
                writer_id="bench",
                lease_epoch=1,
                created_at_ms=0,
            )
            for key, data in ((manifest.consume_queue_key, cq), (manifest.key, manifest.to_json())):
                path = root / "cold" / key
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            path = root / "cold" / manifest.commit_log_key
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as fh:
                fh.truncate(cl_size)  # sparse: never read at this level
    return per_queue * queues


def _records(cold: Path, queues: int) -> None:
    """What a sidecar writes besides segments: the tiering record (every topic) and each
    queue's init record (offset 0), so the verifier has a required range to check."""
    from tieredstore.cold.layout import QueuePath
    from tieredstore.cold.provenance import QueueInit, RuleEpoch, TieringRecord
    from tieredstore.topic_rules import TopicRules

    record = TieringRecord(CLUSTER, BROKER, (RuleEpoch(0, TopicRules(), "bench", 1),))
    inits = [
        QueueInit.new(
            QueuePath(CLUSTER, BROKER, "BenchTopic", q),
            0,
            "earliest",
            created_at_ms=0,
            writer_id="bench",
            lease_epoch=1,
        )
        for q in range(queues)
    ]
    for key, data in [(record.key, record.to_json()), *((i.key, i.to_json()) for i in inits)]:
        (cold / key).parent.mkdir(parents=True, exist_ok=True)
        (cold / key).write_bytes(data)


# -- the verifier's content stage and the archive, on one store --------------------------


def content_store(root: Path, messages: int, segment_messages: int) -> None:
    """``root/hot``: ``messages`` ~1 KiB messages in 2 topics x 4 queues (uncompressed);
    ``root/cold``: every queue tiered with the real segment codec into segments of
    ``segment_messages`` (cluster DefaultCluster, broker broker-a)."""
    from tests.support.stores.coldimage import tier, write_local

    spec = SynthSpec(
        topics=2, queues=4, messages=messages, body_min=900, body_max=1100,
        commitlog_file_size=256 << 20, cq_file_size=300_000 * CQ_UNIT_SIZE, compress_over=0,
    )  # fmt: skip
    synthesize(root / "hot", spec)
    write_local(tier(root / "hot", segment_messages=segment_messages), root / "cold")


def verify_options(hot: Path, cold: Path, level: str, cluster: str, broker: str) -> Any:
    """VerifyOptions for a run with no lag allowance."""
    from tieredstore.verifier.vocabulary import LagAllowance, LagUnit, Level, VerifyOptions

    return VerifyOptions(
        hot=hot, cold_url=str(cold), cluster=cluster, broker=broker,
        now_ms=time.time_ns() // 1_000_000, level=Level(level),
        lag_allowance=LagAllowance(LagUnit.MESSAGES, 0),
    )  # fmt: skip


def timed_verify(spark: Any, opts: Any) -> tuple[float, Any]:
    """One whole ``verify`` in ``spark``: (seconds, result)."""
    from tieredstore.verifier.job import verify

    t0 = time.perf_counter()
    result = verify(spark, opts)
    return time.perf_counter() - t0, result


def timed_verify_jobs(spark: Any, opts: Any) -> tuple[float, int, Any]:
    """One whole ``verify`` in ``spark``: (seconds, Spark jobs it ran, result)."""
    sc = spark.sparkContext
    group = f"bench-verify-{time.monotonic_ns()}"
    sc.setJobGroup(group, "one verify run")
    try:
        took, result = timed_verify(spark, opts)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return took, len(sc.statusTracker().getJobIdsForGroup(group)), result


def verifier_stage_seconds(spark: Any, opts: Any) -> float:
    """Seconds of the per-segment verification stage over cached inputs."""
    from tieredstore.hot.store import HotStore
    from tieredstore.verifier import checks, readers, schemas

    cold = readers.ColdLocation(opts.cold_url)
    listing = readers.list_cold_objects(cold, opts.cluster, opts.broker)
    objects = readers.objects_frame(spark, listing).cache()
    # As the job does: the links collected, the one reading rule marks the covering ones.
    links = readers.mark_covering(readers.manifest_frame(objects, cold).toArrow())
    segments = spark.createDataFrame(links, schema=schemas.SEGMENTS).cache()
    hot_q = readers.hot_queue_frame(
        spark, HotStore(opts.hot).queues(), opts.hot, opts.lag_allowance, 0
    ).cache()
    work = checks.segment_work(checks.valid_segments(segments), objects, hot_q).cache()
    n = work.count()
    facts = readers.segment_facts_frame(work, cold, opts.hot, opts.level, n)
    t0 = time.perf_counter()
    facts.collect()
    took = time.perf_counter() - t0
    for df in (work, hot_q, segments, objects):
        df.unpersist()
    return took
