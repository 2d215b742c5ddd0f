"""The verification job: compose readers and checks, collect, decide; and its command line.

:func:`verify` is the whole run against a given SparkSession (tests pass the shared
one). :func:`main` is the entry point of ``python -m verifier``, ``spark-submit
verifier/__main__.py`` and ``tieredstore verify`` (same arguments everywhere): it builds
the options, starts Spark (``local[*]`` unless ``--master`` or spark-submit says
otherwise), writes ``report.json``, ``anomalies.parquet``, ``report.html`` and
``verify.prom`` (the verdict for Prometheus; also to ``--metrics-file``) to ``--out``,
refreshes ``history.html`` one level up when ``--out`` is one of several dated report
folders, and returns the exit code: 0 CLEAN, 1 DIRTY, 2 CORRUPT, 3 could not run (one
line on stderr: bad URL, missing hot store, Spark failed to start, a task failed...).

Quiet by default: a Spark JVM started here writes everything it prints (log4j lines,
the banner, JVM warnings, the Python workers' stderr) to ``<out>/spark.log``, so the
terminal shows only our own lines; ``--verbose`` leaves it on the terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from tieredstore.clock import Clock, SystemClock
from tieredstore.config import parse_duration
from tieredstore.errors import (
    ConfigError,
    OffsetOutOfRangeError,
    StoreError,
    StoreNotFoundError,
    TieredStoreError,
)
from tieredstore.findings import FindingKind
from tieredstore.hotstore import HotStore, QueueKey
from tieredstore.layout import SegmentKind
from verifier import checks, readers, schemas
from verifier.catalogue import read_catalogue
from verifier.history import DEFAULT_HISTORY_RUNS, history_applies, write_history
from verifier.interrupt import StopOnSignal
from verifier.metrics_file import write_metrics_file
from verifier.model import (
    DEFAULT_LAG_ALLOWANCE,
    DEFAULT_ORPHAN_GRACE_S,
    EXIT_COULD_NOT_RUN,
    Level,
    VerifyOptions,
    parse_lag_allowance,
)
from verifier.report import ReportPaths, write_reports
from verifier.result import Anomaly, QueueReport, Totals, VerificationResult
from verifier.scope import Requirements, apply_requirements

__all__ = ["JobArgs", "add_arguments", "main", "run", "spark_session", "verify"]

_APP_NAME: Final = "tieredstore-verify"
#: Where a Spark JVM started by the verifier writes its output (inside ``--out``).
SPARK_LOG_NAME: Final = "spark.log"


# -- the run --------------------------------------------------------------------------


def _reference_ts(opts: VerifyOptions) -> int:
    """The time the lag allowance in seconds counts back from: the verifier's clock at
    the start of the run (``opts.now_ms``, injected). Not the broker's checkpoint: on an
    idle broker (or one whose checkpoint is stale) that stops moving, and an untiered
    tail within the allowance of it would pass forever."""
    return opts.now_ms


@dataclass(frozen=True)
class _Inputs:
    """What the driver reads itself before any Spark work: cheap metadata only."""

    hot: HotStore
    reference_ts: int
    cold: readers.ColdLocation
    listing: readers.ColdListing
    hot_queues: list[QueueKey]
    catalogue: pa.Table | None

    @property
    def manifests(self) -> int:
        kinds = self.listing.objects["kind"]
        return int(pc.sum(pc.equal(kinds, SegmentKind.MANIFEST.value)).as_py() or 0)


@dataclass(frozen=True)
class _Run:
    """The frames the checks relate (SEGMENTS, OBJECTS, HOT_QUEUES, ...).

    Every one is a driver-side table in one partition (:func:`_local`): the checks
    over them run without a shuffle, all anomaly classes in one Spark job.
    """

    objects: DataFrame
    segments: DataFrame
    valid: DataFrame
    cold_ranges: DataFrame
    hot: DataFrame
    work: DataFrame
    facts: DataFrame
    state: DataFrame
    losses: DataFrame
    spans: DataFrame


def _read_inputs(opts: VerifyOptions) -> _Inputs:
    hot = HotStore(opts.hot)
    cold = readers.ColdLocation(opts.cold_url, dict(opts.storage_options))
    catalogue = None
    if opts.metadata_dir is not None:
        catalogue = read_catalogue(opts.metadata_dir, cluster=opts.cluster, broker=opts.broker)
    listing = readers.list_cold_objects(cold, opts.cluster, opts.broker)
    if listing.tiering is None:
        readers.require_tiered(cold, opts.cluster, opts.broker)  # raises NotTieredError
    return _Inputs(
        hot=hot,
        reference_ts=_reference_ts(opts),
        cold=cold,
        listing=listing,
        hot_queues=hot.queues(),
        catalogue=catalogue,
    )


#: The verifier's own SQL settings (a session of its own over the caller's SparkContext).
#: Its relational work is small (a few rows per segment and per queue), so what costs
#: is planning and scheduling, not data: every join is a sort-merge join inside one
#: partition (a broadcast costs a Spark job per join), one shuffle partition (a frame
#: in one partition then needs no exchange), no adaptive re-planning (a job per shuffle
#: stage) and no code generation (compiling it takes longer than running the query).
_SESSION_CONF: Final = {
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


def _session(spark: SparkSession) -> SparkSession:
    """A session of the verifier's own over ``spark``'s context (:data:`_SESSION_CONF`),
    so that the caller's SQL settings are neither used nor changed."""
    session = spark.newSession()
    for key, value in _SESSION_CONF.items():
        session.conf.set(key, value)
    return session


def _local(spark: SparkSession, table: pa.Table, schema: StructType) -> DataFrame:
    """``table`` (collected, or built on the driver) as a frame of one partition.

    One partition satisfies every distribution a window, an aggregate or a join asks
    for, so a query over such frames has no exchange: one stage, one job.
    """
    return spark.createDataFrame(table, schema=schema).coalesce(1)


def _read(spark: SparkSession, opts: VerifyOptions, inputs: _Inputs) -> _Run:
    """The three reading stages, each collected to the driver once (one Spark job
    each): hot queues, manifests, segments. Everything after relates their results."""
    listed = readers.objects_frame(spark, inputs.listing)
    hot_q = readers.hot_queue_frame(
        spark, inputs.hot_queues, opts.hot, opts.lag_allowance, inputs.reference_ts
    ).toArrow()
    _raise_hot_errors(hot_q)  # before the expensive stage: its results would be meaningless
    objects = listed.coalesce(1)  # the listing, already a driver-side table
    hot = _local(spark, hot_q, schemas.HOT_QUEUES)
    segments = _local(
        spark, readers.manifest_frame(listed, inputs.cold).toArrow(), schemas.SEGMENTS
    )
    valid = checks.valid_segments(segments)
    work = checks.segment_work(valid, objects, hot)
    facts = readers.segment_facts_frame(work, inputs.cold, opts.hot, opts.level, inputs.manifests)
    cold_ranges = checks.cold_queue_ranges(valid)
    losses, spans = readers.losses_frames(spark, inputs.listing.losses)
    return _Run(
        objects=objects,
        segments=segments,
        valid=valid,
        cold_ranges=cold_ranges,
        hot=hot,
        work=work,
        facts=_local(spark, facts.toArrow(), schemas.SEGMENT_FACTS),
        state=checks.queue_state(cold_ranges, hot),
        losses=losses.coalesce(1),
        spans=spans.coalesce(1),
    )


def _anomalies(
    spark: SparkSession, opts: VerifyOptions, inputs: _Inputs, run: _Run
) -> tuple[Anomaly, ...]:
    """Every check, unioned and collected in one Spark job (one stage)."""
    grace_ms = int(opts.orphan_grace_s * 1000)
    found = [
        checks.corrupt_manifest(run.segments),
        checks.gap(run.valid, run.spans),
        checks.overlap(run.valid),
        checks.hot_not_covered(run.state, run.spans),
        checks.lost_before_tiering(run.losses, run.cold_ranges),
        checks.cold_ahead_of_hot(run.state),
        checks.missing_object(run.work, run.facts),
        checks.size_mismatch(run.work),
        checks.digest_mismatch(run.facts),
        checks.record_mismatch(run.facts),
        checks.content_mismatch(run.facts),
        checks.manifest_mismatch(run.facts),
        checks.orphan_object(run.objects, run.valid, opts.now_ms, grace_ms),
    ]
    if inputs.catalogue is not None:
        cat = _local(spark, inputs.catalogue, schemas.CATALOGUE)
        found.append(checks.catalogue_drift(cat, run.valid, opts.now_ms, grace_ms))
    rows = checks.union_anomalies(*found).collect()
    return tuple(Anomaly.from_row(r.asDict()) for r in rows)


def _queues(opts: VerifyOptions, inputs: _Inputs, run: _Run) -> tuple[QueueReport, ...]:
    """QUEUE_SUMMARY, collected in one Spark job; then the lag in seconds (driver).
    Unordered, and without the requirement fields (:func:`_required`)."""
    summary = checks.queue_summary(
        run.cold_ranges,
        run.hot,
        run.facts,
        run.objects,
        run.valid,
        now_ms=opts.now_ms,
        grace_ms=int(opts.orphan_grace_s * 1000),
    )
    queues = (
        _with_lag_seconds(inputs.hot, QueueReport.from_row(r.asDict()), inputs.reference_ts)
        for r in summary.collect()
    )
    return tuple(queues)


def _required(
    inputs: _Inputs, queues: tuple[QueueReport, ...], anomalies: tuple[Anomaly, ...]
) -> tuple[tuple[QueueReport, ...], tuple[Anomaly, ...]]:
    """Each queue's required range from the cold store's own records (driver side,
    :mod:`verifier.scope`), its findings added to the others; both sorted."""
    listing = inputs.listing
    assert listing.tiering is not None  # checked by _read_inputs
    req = Requirements.of(listing.tiering, listing.inits, listing.retention, listing.losses)
    queues, found = apply_requirements(queues, req)
    return (
        tuple(sorted(queues, key=lambda q: (q.topic, q.queue_id))),
        tuple(sorted((*anomalies, *found), key=_anomaly_order)),
    )


def verify(spark: SparkSession, opts: VerifyOptions) -> VerificationResult:
    """Verify that the cold store covers the hot store exactly; see docs/architecture.md.

    Five Spark jobs whatever the store's size: hot queues, manifests and segments (each
    read once, in tasks, and collected), then all anomalies, then the queue summary.
    Runs in a session of its own over ``spark``'s context (:func:`_session`).

    Raises:
        ConfigError: bad URL, missing cold root, seconds allowance without checkpoint.
        StoreError: the hot store is missing, unsupported or a queue's files unreadable.
        CatalogueError: ``metadata_dir`` given but not a catalogue of this broker.
        PySparkException / Py4JError: a Spark job failed.
    """
    started = time.time_ns() // 1_000_000
    inputs = _read_inputs(opts)
    session = _session(spark)
    run = _read(session, opts, inputs)
    queues, anomalies = _required(
        inputs, _queues(opts, inputs, run), _anomalies(session, opts, inputs, run)
    )
    return VerificationResult(
        options=opts,
        queues=queues,
        anomalies=anomalies,
        totals=_totals(queues, anomalies, inputs.listing),
        unrecognised=inputs.listing.unrecognised,
        reference_ts=inputs.reference_ts,
        started_ms=started,
        finished_ms=time.time_ns() // 1_000_000,
    )


def _with_lag_seconds(hot: HotStore, q: QueueReport, reference_ts: int) -> QueueReport:
    """Fill in how much older than the reference time the first untiered record is.

    Done on the driver, two small reads per lagging queue, once the tail start is known.
    A record the broker deleted meanwhile, or one that does not read, leaves the lag in
    seconds unknown (None): it is shown, never judged.
    """
    if not q.lag_messages or q.hot_max is None or q.hot_min is None:
        return q
    tail = q.hot_max - q.lag_messages
    try:
        ts = readers.tail_timestamp(hot, QueueKey(q.topic, q.queue_id), tail)
    except (OffsetOutOfRangeError, StoreError):
        return q
    return replace(q, lag_seconds=(reference_ts - ts) / 1000.0)


def _anomaly_order(a: Anomaly) -> tuple[str, int, int, str, str]:
    start = -1 if a.start is None else a.start
    return (a.topic, a.queue_id, start, a.anomaly.value, a.object_key or "")


def _raise_hot_errors(hot_q: pa.Table) -> None:
    """StoreError for the first hot queue whose files did not read (HOT_QUEUES rows)."""
    bad = hot_q.filter(pc.is_valid(hot_q["error"])).slice(0, 1).to_pylist()
    for row in bad:
        raise StoreError(f"cannot read hot queue {row['topic']}/{row['queue_id']}: {row['error']}")


def _totals(
    queues: Sequence[QueueReport], anomalies: Sequence[Anomaly], listing: readers.ColdListing
) -> Totals:
    corrupt = sum(1 for a in anomalies if a.anomaly is FindingKind.CORRUPT_MANIFEST)
    return Totals(
        queues=len(queues),
        segments=sum(q.segments for q in queues),
        corrupt_manifests=corrupt,
        objects=listing.objects.num_rows,
        unrecognised_objects=len(listing.unrecognised),
        pending_objects=sum(q.pending_objects for q in queues),
        units_compared=sum(q.units_compared for q in queues),
        bytes_compared=sum(q.bytes_compared for q in queues),
        cold_only=sum(q.cold_only for q in queues),
        lag_messages=sum(q.lag_messages for q in queues),
    )


# -- Spark ------------------------------------------------------------------------------


def _under_spark_submit() -> bool:
    # spark-submit starts the Python driver with a gateway to its own JVM.
    return "PYSPARK_GATEWAY_PORT" in os.environ


@contextmanager
def _output_to(log_file: Path | None) -> Iterator[None]:
    """Point this process's stdout and stderr (file descriptors 1 and 2) at ``log_file``
    for the duration, then put them back.

    A JVM started meanwhile inherits the log file as its stdout and stderr for good, and
    so do the Python workers it starts; this process gets its terminal back at once.
    """
    if log_file is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = (os.dup(1), os.dup(2))
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


@contextmanager
def spark_session(
    master: str | None, *, log_file: Path | None = None, log_level: str = "ERROR"
) -> Iterator[SparkSession]:
    """Yield a SparkSession: the active one if there is one (left running), else a new
    one (stopped at exit). ``master`` None means ``local[*]``, or spark-submit's choice.

    A JVM started here prints into ``log_file`` (appended to) when one is given, else on
    this terminal (spark-submit's JVM already runs: its output is its own). Spark logs
    at ``log_level`` from then on. Python workers are reused across tasks; with a local
    master they start from :mod:`verifier.pydaemon`.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    # Python workers must run this interpreter (our venv), not whatever `python3` is.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
    builder = SparkSession.builder.appName(_APP_NAME)
    if master is None and not _under_spark_submit():
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):
        # Spark binds to loopback anyway; saying so spares the "hostname resolves to a
        # loopback address" warning.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "8")
            # Workers run this interpreter, which imports PySpark's installed bytecode
            # (verifier/pydaemon.py) rather than compiling pyspark.zip in each worker.
            .config("spark.python.daemon.module", "verifier.pydaemon")
        )
    # One Python worker per core for the whole run, not one per task (Spark's default,
    # said here because each fresh worker costs a second of imports).
    builder = builder.config("spark.python.worker.reuse", "true")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    with _output_to(None if _under_spark_submit() else log_file):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    try:
        yield spark
    finally:
        spark.stop()


# -- command line -----------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The verifier's flags (shared by ``python -m verifier`` and ``tieredstore verify``)."""
    p.add_argument("--hot", required=True, type=Path, help="broker store root (read-only)")
    p.add_argument("--cold", required=True, help="cold store root URL (path, file://, s3://)")
    p.add_argument("--cluster", required=True, help="broker cluster name")
    p.add_argument("--broker", required=True, help="broker name")
    p.add_argument(
        "--level",
        choices=[lv.value for lv in Level],
        default=Level.OFFSETS.value,
        help="offsets: manifests, objects, consume queues; content: also every record",
    )
    p.add_argument(
        "--lag-allowance",
        default=f"{DEFAULT_LAG_ALLOWANCE.value:g}s",
        help="untiered hot tail tolerated: messages (1000) or seconds (60s, 5m) "
        "(default %(default)s)",
    )
    p.add_argument("--out", type=Path, default=Path("verify-report"), help="report directory")
    p.add_argument(
        "--metrics-file",
        type=Path,
        default=None,
        help="also write the verdict for Prometheus here (a node-exporter textfile "
        "collector *.prom file); verify.prom in --out is always written",
    )
    p.add_argument(
        "--history",
        type=int,
        default=DEFAULT_HISTORY_RUNS,
        metavar="N",
        help="when --out sits among other report folders, write history.html next to them "
        "with the trend of the last N runs (0: never; default %(default)s)",
    )
    p.add_argument("--master", default=None, help="Spark master (default local[*])")
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show Spark's own output on the terminal (default: into <out>/spark.log)",
    )
    p.add_argument(
        "--metadata", type=Path, default=None, help="sidecar state dir: check catalogue drift"
    )
    p.add_argument(
        "--orphan-grace",
        default=f"{DEFAULT_ORPHAN_GRACE_S:g}",
        help="seconds (or 30m, 2h) before an object without manifest is an orphan "
        "(default %(default)s)",
    )
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint URL (MinIO, moto, ...)")
    p.add_argument("--region", default=None, help="S3 region")
    p.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra fsspec storage option (VALUE parsed as JSON when it is JSON); repeatable",
    )


def _storage_options(args: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    if args.endpoint_url:
        opts["endpoint_url"] = args.endpoint_url
    if args.region:
        opts["client_kwargs"] = {"region_name": args.region}
    for item in args.storage_option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"bad --storage-option {item!r}: expected KEY=VALUE")
        try:
            opts[key] = json.loads(value)
        except ValueError:
            opts[key] = value
    return opts


def options_from_args(args: argparse.Namespace, *, now_ms: int) -> VerifyOptions:
    """Validate the flags into options (ConfigError naming the bad flag)."""
    try:
        grace = parse_duration(args.orphan_grace)
    except ValueError as exc:
        raise ConfigError(f"bad --orphan-grace: {exc}") from exc
    return VerifyOptions(
        hot=args.hot,
        cold_url=args.cold,
        cluster=args.cluster,
        broker=args.broker,
        now_ms=now_ms,
        level=Level(args.level),
        lag_allowance=parse_lag_allowance(args.lag_allowance),
        orphan_grace_s=grace,
        metadata_dir=args.metadata,
        storage_options=_storage_options(args),
    )


@dataclass(frozen=True)
class JobArgs:
    """What a command line asked for beyond the options: where to write, which master,
    where Spark's output goes."""

    options: VerifyOptions
    out: Path
    master: str | None
    metrics_file: Path | None = None
    history: int = DEFAULT_HISTORY_RUNS
    verbose: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, now_ms: int) -> JobArgs:
        if args.history < 0:
            raise ConfigError(f"bad --history: {args.history} is negative")
        return cls(
            options_from_args(args, now_ms=now_ms),
            args.out,
            args.master,
            args.metrics_file,
            args.history,
            args.verbose,
        )

    @property
    def spark_log(self) -> Path | None:
        """Where a JVM started here writes (None: the terminal)."""
        if self.verbose or _under_spark_submit():
            return None
        return self.out / SPARK_LOG_NAME

    @property
    def spark_log_level(self) -> str:
        """WARN into a log file or when asked to be verbose; only ERROR otherwise."""
        return "WARN" if self.verbose or self.spark_log is not None else "ERROR"


_SPARK_REASON = re.compile(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$", re.MULTILINE)


def _one_line(exc: BaseException) -> str:
    """A one-line reason, digging the Python error out of a Spark task failure."""
    text = str(exc)
    found = _SPARK_REASON.findall(text)
    if isinstance(exc, PySparkException | Py4JError) and found:
        name, message = found[-1]
        return f"Spark job failed: {name}: {message.strip()}"
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def run(args: argparse.Namespace, *, prog: str = "verifier", clock: Clock | None = None) -> int:
    """Run a verification from parsed flags; return the exit code (see module doc).

    ``clock`` (the system's by default) gives the run's ``now_ms``: the reference of the
    lag allowance in seconds, the orphan grace and catalogue drift.

    SIGINT/SIGTERM stop it (Spark's jobs are cancelled, no report is written) with one
    line and exit 130/143, whatever error the cancelled Spark job raised.
    """
    job: JobArgs | None = None
    with StopOnSignal() as stop:
        try:
            job = JobArgs.from_args(args, now_ms=(clock or SystemClock()).now_ms())
            _check_before_spark(job)
            stop.defer()  # until the session is up (watch): see StopOnSignal.defer
            with spark_session(
                job.master, log_file=job.spark_log, log_level=job.spark_log_level
            ) as spark:
                stop.watch(spark.sparkContext)
                result = verify(spark, job.options)
            paths = _publish(result, job)
        except (TieredStoreError, PySparkException, Py4JError, OSError, KeyboardInterrupt) as exc:
            if stop.signal is not None:
                name = stop.signal.name
                print(f"{prog}: interrupted by {name}; no report written", file=sys.stderr)
                return stop.exit_code()
            if isinstance(exc, KeyboardInterrupt):
                raise
            log = job.spark_log if job is not None else None
            where = f" (Spark log: {log})" if log is not None and log.exists() else ""
            print(f"{prog}: could not run: {_one_line(exc)}{where}", file=sys.stderr)
            return EXIT_COULD_NOT_RUN
    counts = ", ".join(f"{c.value} {n}" for c, n in result.counts().items() if n)
    print(
        f"{result.verdict.value}: {len(result.anomalies)} anomalies"
        f"{f' ({counts})' if counts else ''} in {result.totals.queues} queues; "
        f"report: {paths.html}"
    )
    return result.verdict.exit_code


def _check_before_spark(job: JobArgs) -> None:
    """Fail fast, before Spark starts, on what the driver can check alone."""
    if not job.options.hot.is_dir():
        raise StoreNotFoundError("hot store directory does not exist", where=str(job.options.hot))
    if job.metrics_file is not None and not job.metrics_file.parent.is_dir():
        raise ConfigError(f"bad --metrics-file: directory {job.metrics_file.parent} does not exist")
    # The cold root, and a tiering record at the broker prefix: a typo'd --broker or a
    # --cold one level off must not verify nothing and say CLEAN.
    readers.require_tiered(
        readers.ColdLocation(job.options.cold_url, dict(job.options.storage_options)),
        job.options.cluster,
        job.options.broker,
    )


def _publish(result: VerificationResult, job: JobArgs) -> ReportPaths:
    """Write the reports, the metrics file(s) and (among other runs) the history page."""
    paths = write_reports(result, job.out, history_href=_history_href(job))
    if job.metrics_file is not None:
        write_metrics_file(result, job.metrics_file)
    if job.history:
        write_history(job.out.resolve().parent, last=job.history)
    return paths


def _history_href(job: JobArgs) -> str | None:
    """``../history.html`` when the report will have a history page next to its folder."""
    if not job.history:
        return None
    root = job.out.resolve().parent
    return "../history.html" if history_applies(root, job.out.resolve()) else None


class _Parser(argparse.ArgumentParser):
    """Bad usage is 'could not run': exit 3 with one line, not argparse's 2."""

    def error(self, message: str) -> Any:
        self.exit(EXIT_COULD_NOT_RUN, f"{self.prog}: error: {message}\n")


def main(argv: Sequence[str] | None = None, *, clock: Clock | None = None) -> int:
    """``python -m verifier`` / ``spark-submit verifier/__main__.py``."""
    parser = _Parser(prog="verifier", description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(parser)
    return run(parser.parse_args(argv), clock=clock)
