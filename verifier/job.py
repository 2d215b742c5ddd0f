"""The verification job: compose readers and checks, collect, decide; and its command line.

:func:`verify` is the whole run against a given SparkSession (tests pass the shared
one). :func:`main` is the entry point of ``python -m verifier``, ``spark-submit
verifier/__main__.py`` and ``tieredstore verify`` (same arguments everywhere): it builds
the options, starts Spark (``local[*]`` unless ``--master`` or spark-submit says
otherwise), writes ``report.json``, ``anomalies.parquet`` and ``report.html`` to
``--out`` and returns the exit code: 0 CLEAN, 1 DIRTY, 2 CORRUPT, 3 could not run (one
line on stderr: bad URL, missing hot store, Spark failed to start, a task failed...).
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

from tieredstore.config import parse_duration
from tieredstore.errors import (
    ConfigError,
    OffsetOutOfRangeError,
    StoreError,
    StoreNotFoundError,
    TieredStoreError,
)
from tieredstore.hotstore import HotStore, QueueKey
from tieredstore.layout import SegmentKind
from verifier import checks, readers, schemas
from verifier.catalogue import read_catalogue
from verifier.model import (
    DEFAULT_LAG_ALLOWANCE,
    DEFAULT_ORPHAN_GRACE_S,
    EXIT_COULD_NOT_RUN,
    AnomalyClass,
    LagAllowance,
    LagUnit,
    Level,
    VerifyOptions,
    parse_lag_allowance,
)
from verifier.report import write_reports
from verifier.result import Anomaly, QueueReport, Totals, VerificationResult

__all__ = ["JobArgs", "add_arguments", "main", "run", "spark_session", "verify"]

_APP_NAME: Final = "tieredstore-verify"


# -- the run --------------------------------------------------------------------------


def _reference_ts(hot: HotStore, allowance: LagAllowance) -> int | None:
    try:
        return hot.checkpoint().physic_msg_timestamp
    except StoreNotFoundError as exc:
        if allowance.unit is LagUnit.SECONDS:
            raise ConfigError(
                f"a lag allowance in seconds needs the hot store's checkpoint ({exc}); "
                "give one in messages instead (e.g. --lag-allowance 1000)"
            ) from exc
        return None


@dataclass
class _Frames:
    """The cached frames of one run, released at its end."""

    cached: list[DataFrame]

    def keep(self, df: DataFrame) -> DataFrame:
        self.cached.append(df.cache())
        return df

    def release(self) -> None:
        for df in self.cached:
            df.unpersist()


@dataclass(frozen=True)
class _Inputs:
    """What the driver reads itself before any Spark work: cheap metadata only."""

    hot: HotStore
    reference_ts: int | None
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
    """The frames the checks relate (SEGMENTS, OBJECTS, HOT_QUEUES, ...)."""

    objects: DataFrame
    segments: DataFrame
    valid: DataFrame
    cold_ranges: DataFrame
    hot: DataFrame
    work: DataFrame
    facts: DataFrame
    state: DataFrame


def _read_inputs(opts: VerifyOptions) -> _Inputs:
    hot = HotStore(opts.hot)
    cold = readers.ColdLocation(opts.cold_url, dict(opts.storage_options))
    catalogue = None
    if opts.metadata_dir is not None:
        catalogue = read_catalogue(opts.metadata_dir, cluster=opts.cluster, broker=opts.broker)
    return _Inputs(
        hot=hot,
        reference_ts=_reference_ts(hot, opts.lag_allowance),
        cold=cold,
        listing=readers.list_cold_objects(cold, opts.cluster, opts.broker),
        hot_queues=hot.queues(),
        catalogue=catalogue,
    )


def _build(spark: SparkSession, opts: VerifyOptions, inputs: _Inputs, frames: _Frames) -> _Run:
    """The three reading stages (manifests, hot queues, segments) and their joins."""
    objects = frames.keep(readers.objects_frame(spark, inputs.listing))
    segments = frames.keep(readers.manifest_frame(objects, inputs.cold))
    valid = checks.valid_segments(segments)
    cold_ranges = frames.keep(checks.cold_queue_ranges(valid))
    hot = frames.keep(
        readers.hot_queue_frame(
            spark, inputs.hot_queues, opts.hot, opts.lag_allowance, inputs.reference_ts or 0
        )
    )
    _raise_hot_errors(hot)  # before the expensive stage: its results would be meaningless
    work = frames.keep(checks.segment_work(valid, objects, hot))
    facts = frames.keep(
        readers.segment_facts_frame(work, inputs.cold, opts.hot, opts.level, inputs.manifests)
    )
    state = frames.keep(checks.queue_state(cold_ranges, hot))
    return _Run(objects, segments, valid, cold_ranges, hot, work, facts, state)


def _anomalies(
    spark: SparkSession, opts: VerifyOptions, inputs: _Inputs, run: _Run
) -> tuple[Anomaly, ...]:
    grace_ms = int(opts.orphan_grace_s * 1000)
    found = [
        checks.corrupt_manifest(run.segments),
        checks.gap(run.valid),
        checks.overlap(run.valid),
        checks.hot_not_covered(run.state),
        checks.cold_ahead_of_hot(run.state),
        checks.missing_object(run.work, run.facts),
        checks.size_mismatch(run.work),
        checks.digest_mismatch(run.facts),
        checks.record_mismatch(run.facts),
        checks.content_mismatch(run.facts),
        checks.orphan_object(run.objects, run.valid, opts.now_ms, grace_ms),
    ]
    if inputs.catalogue is not None:
        cat = spark.createDataFrame(inputs.catalogue, schema=schemas.CATALOGUE)
        found.append(checks.catalogue_drift(cat, run.valid, opts.now_ms, grace_ms))
    rows = checks.union_anomalies(*found).collect()
    return tuple(sorted((Anomaly.from_row(r.asDict()) for r in rows), key=_anomaly_order))


def _queues(opts: VerifyOptions, inputs: _Inputs, run: _Run) -> tuple[QueueReport, ...]:
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
    return tuple(sorted(queues, key=lambda q: (q.topic, q.queue_id)))


def verify(spark: SparkSession, opts: VerifyOptions) -> VerificationResult:
    """Verify that the cold store covers the hot store exactly; see DESIGN.md §8.

    Raises:
        ConfigError: bad URL, missing cold root, seconds allowance without checkpoint.
        StoreError: the hot store is missing, unsupported or a queue's files unreadable.
        CatalogueError: ``metadata_dir`` given but not a catalogue of this broker.
        PySparkException / Py4JError: a Spark job failed.
    """
    started = time.time_ns() // 1_000_000
    inputs = _read_inputs(opts)
    frames = _Frames([])
    try:
        run = _build(spark, opts, inputs, frames)
        anomalies = _anomalies(spark, opts, inputs, run)
        queues = _queues(opts, inputs, run)
    finally:
        frames.release()
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


def _with_lag_seconds(hot: HotStore, q: QueueReport, reference_ts: int | None) -> QueueReport:
    """Fill in how much older than the checkpoint time the first untiered record is.

    Done on the driver, two small reads per lagging queue, once the tail start is known.
    A record the broker deleted meanwhile, or one that does not read, leaves the lag in
    seconds unknown (None): it is shown, never judged.
    """
    if reference_ts is None or not q.lag_messages or q.hot_max is None or q.hot_min is None:
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


def _raise_hot_errors(hot_q: DataFrame) -> None:
    bad = hot_q.where(hot_q.error.isNotNull()).select("topic", "queue_id", "error").limit(1)
    for row in bad.collect():
        raise StoreError(f"cannot read hot queue {row.topic}/{row.queue_id}: {row.error}")


def _totals(
    queues: Sequence[QueueReport], anomalies: Sequence[Anomaly], listing: readers.ColdListing
) -> Totals:
    corrupt = sum(1 for a in anomalies if a.anomaly is AnomalyClass.CORRUPT_MANIFEST)
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
def spark_session(master: str | None) -> Iterator[SparkSession]:
    """Yield a SparkSession: the active one if there is one (left running), else a new
    one (stopped at exit). ``master`` None means ``local[*]``, or spark-submit's choice.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    # Python workers must run this interpreter (our venv), not whatever `python3` is.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(_APP_NAME)
    if master is None and not _under_spark_submit():
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "8")
        )
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
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
    p.add_argument("--master", default=None, help="Spark master (default local[*])")
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
    """What a command line asked for beyond the options: where to write, which master."""

    options: VerifyOptions
    out: Path
    master: str | None


_SPARK_REASON = re.compile(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$", re.MULTILINE)


def _one_line(exc: BaseException) -> str:
    """A one-line reason, digging the Python error out of a Spark task failure."""
    text = str(exc)
    found = _SPARK_REASON.findall(text)
    if isinstance(exc, PySparkException | Py4JError) and found:
        name, message = found[-1]
        return f"Spark job failed: {name}: {message.strip()}"
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def run(args: argparse.Namespace, *, prog: str = "verifier") -> int:
    """Run a verification from parsed flags; return the exit code (see module doc)."""
    try:
        job = JobArgs(
            options_from_args(args, now_ms=time.time_ns() // 1_000_000), args.out, args.master
        )
        if not job.options.hot.is_dir():
            raise StoreNotFoundError(
                "hot store directory does not exist", where=str(job.options.hot)
            )
        # Fail fast, before Spark starts, on what the driver can check alone.
        readers.open_cold(
            readers.ColdLocation(job.options.cold_url, dict(job.options.storage_options))
        )
        with spark_session(job.master) as spark:
            result = verify(spark, job.options)
        paths = write_reports(result, job.out)
    except (TieredStoreError, PySparkException, Py4JError, OSError) as exc:
        print(f"{prog}: could not run: {_one_line(exc)}", file=sys.stderr)
        return EXIT_COULD_NOT_RUN
    counts = ", ".join(f"{c.value} {n}" for c, n in result.counts().items() if n)
    print(
        f"{result.verdict.value}: {len(result.anomalies)} anomalies"
        f"{f' ({counts})' if counts else ''} in {result.totals.queues} queues; "
        f"report: {paths.html}"
    )
    return result.verdict.exit_code


class _Parser(argparse.ArgumentParser):
    """Bad usage is 'could not run': exit 3 with one line, not argparse's 2."""

    def error(self, message: str) -> Any:
        self.exit(EXIT_COULD_NOT_RUN, f"{self.prog}: error: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m verifier`` / ``spark-submit verifier/__main__.py``."""
    parser = _Parser(prog="verifier", description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(parser)
    return run(parser.parse_args(argv))
