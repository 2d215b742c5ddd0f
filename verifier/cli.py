"""Prove that the cold store covers the hot store exactly (the verifier's command line).

:func:`main` is the entry point of ``python -m tieredstore.verifier``, ``spark-submit
verifier/__main__.py`` and ``tieredstore verify`` (same arguments everywhere): it builds
the options, starts Spark (``local[*]`` unless ``--master`` or spark-submit says
otherwise), writes ``report.json``, ``anomalies.parquet``, ``report.html`` and
``verify.prom`` (the verdict for Prometheus; also to ``--metrics-file``) to ``--out``,
refreshes ``history.html`` one level up when ``--out`` is one of several dated report
folders, and returns the exit code: 0 CLEAN, 1 DIRTY, 2 CORRUPT, 3 could not run (one
line on stderr: bad URL, missing hot store, Spark failed to start, a task failed...).
``--fleet`` runs the fleet job instead (:mod:`tieredstore.verifier.fleet.cli`; 4 INCOMPLETE).

While it runs, ``--progress`` (on a terminal by default) writes one line per stage on
stderr, prefixed by the time since the start, so stdout keeps only the verdict line::

    tieredstore verify: [   12 ms] checking the cold store at s3://bucket/tiered
    tieredstore verify: [   1.4 s] starting Spark
    tieredstore verify: [  19.0 s] reading 16 hot queues
    tieredstore verify: [  23.4 s] checking 610 segments of 16 queues (offsets level)

Quiet by default: a Spark JVM started here writes everything it prints (log4j lines,
the banner, JVM warnings, the Python workers' stderr) to ``<out>/spark.log``, so the
terminal shows only our own lines; ``--verbose`` leaves it on the terminal.
"""

from __future__ import annotations

import argparse
import enum
import os
import re
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException

from tieredstore.clock import Clock, SystemClock
from tieredstore.errors import ConfigError, StoreNotFoundError, TieredStoreError
from tieredstore.humanize import human_seconds
from tieredstore.settings.flags import setting_help, settings_by_dest
from tieredstore.settings.loader import load_settings, parse_duration
from tieredstore.state_dir import CATALOGUE_FILE
from tieredstore.verifier import readers
from tieredstore.verifier.fleet.cli import add_fleet_arguments, run_fleet
from tieredstore.verifier.job import silent, verify
from tieredstore.verifier.outcome import Anomaly, VerificationResult
from tieredstore.verifier.reporting.metrics_file import write_metrics_file
from tieredstore.verifier.reporting.report import ReportPaths, queue_status, write_reports
from tieredstore.verifier.reporting.trend import (
    DEFAULT_HISTORY_RUNS,
    history_applies,
    write_history,
)
from tieredstore.verifier.spark.interrupt import StopOnSignal
from tieredstore.verifier.spark.session import (
    SPARK_LOG_NAME,
    failure_line,
    spark_session,
    under_spark_submit,
)
from tieredstore.verifier.storage_flags import add_storage_arguments, storage_options
from tieredstore.verifier.verdict import rank_of
from tieredstore.verifier.vocabulary import (
    DEFAULT_LAG_ALLOWANCE,
    DEFAULT_ORPHAN_GRACE_S,
    EXIT_COULD_NOT_RUN,
    Level,
    VerifyOptions,
    parse_lag_allowance,
)

__all__ = [
    "JobArgs",
    "ProgressMode",
    "Stages",
    "add_arguments",
    "main",
    "options_from_args",
    "run",
    "with_config",
]


class ProgressMode(enum.Enum):
    """``--progress``: ``on``, ``off``, or ``auto`` (on when stderr is a terminal)."""

    ON = "on"
    OFF = "off"
    AUTO = "auto"

    def enabled(self, stream: TextIO) -> bool:
        if self is ProgressMode.AUTO:
            return stream.isatty()
        return self is ProgressMode.ON


@dataclass
class Stages:
    """Callable stage reporter: ``stages("reading 16 hot queues")`` writes one line.

    ``clock`` times the run from the reporter's creation; ``out`` is stderr unless a
    test gives another stream.
    """

    prog: str
    clock: Clock
    out: TextIO = field(default_factory=lambda: sys.stderr)
    started_ms: int = field(init=False)

    def __post_init__(self) -> None:
        self.started_ms = self.clock.now_ms()

    def __call__(self, text: str) -> None:
        elapsed = human_seconds(max(self.clock.now_ms() - self.started_ms, 0) / 1000)
        self.out.write(f"{self.prog}: [{elapsed:>8}] {text}\n")
        self.out.flush()


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The verifier's flags (shared by ``python -m tieredstore.verifier`` and ``tieredstore
    verify``).

    The locations are named as every other command names them (``--store``,
    ``--state-dir``; ``--hot`` and ``--metadata`` are kept as aliases) and can come from
    the sidecar's own config file (``--config``), flags winning.
    """
    _add_location_arguments(p)
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
        "--progress",
        choices=[m.value for m in ProgressMode],
        default=ProgressMode.AUTO.value,
        help="one line per stage on stderr (auto: when stderr is a terminal; default %(default)s)",
    )
    p.add_argument(
        "--orphan-grace",
        default=f"{DEFAULT_ORPHAN_GRACE_S:g}",
        help="seconds (or 30m, 2h) before an object without manifest is an orphan "
        "(default %(default)s)",
    )


def _add_location_arguments(p: argparse.ArgumentParser) -> None:
    """Where the stores are: flags, or the sidecar's config file (``[setting]``)."""
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="the sidecar's TOML config: store.path, cold.url/cluster/broker/endpoint_url/"
        "region and state.dir from it, flags winning (default: $TIEREDSTORE_CONFIG if set)",
    )
    p.add_argument(
        "--store",
        "--hot",
        dest="hot",
        type=Path,
        metavar="DIR",
        help=setting_help("--store", "broker store root, read-only"),
    )
    p.add_argument(
        "--cold", help=setting_help("--cold", "cold store root URL (path, file://, s3://)")
    )
    p.add_argument("--cluster", help=setting_help("--cluster", "broker cluster name"))
    p.add_argument("--broker", help=setting_help("--broker", "broker name"))
    p.add_argument(
        "--state-dir",
        "--metadata",
        dest="metadata",
        type=Path,
        metavar="DIR",
        default=None,
        help=setting_help(
            "--state-dir",
            "the sidecar's state dir: check catalogue drift",
            more="with --config, checked when it holds a catalogue",
        ),
    )
    add_storage_arguments(p)
    add_fleet_arguments(p)


#: flag (its argparse dest) → the sidecar setting it stands for; ``--store`` and
#: ``--state-dir`` keep the dests of their older names ``--hot`` and ``--metadata``.
_SETTING_OF: Final = settings_by_dest({"--store": "hot", "--state-dir": "metadata"})
_REQUIRED: Final = {
    "hot": "--store",
    "cold": "--cold",
    "cluster": "--cluster",
    "broker": "--broker",
}


def with_config(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with the locations a ``--config`` file (or ``$TIEREDSTORE_CONFIG``) gives,
    read by the sidecar's own loader (so every key is validated as ``run`` validates it);
    a flag given wins over the file.

    The file's ``state.dir`` adds the catalogue drift check only when a catalogue is
    there (a verifier on another host than the sidecar has none); ``--state-dir``
    always asks for it. ConfigError names what is missing or bad.
    """
    config = args.config
    if config is None and os.environ.get("TIEREDSTORE_CONFIG"):
        config = Path(os.environ["TIEREDSTORE_CONFIG"])
    if config is None:
        missing = [flag for dest, flag in _REQUIRED.items() if getattr(args, dest) is None]
        if missing:
            raise ConfigError(
                f"missing {', '.join(missing)} (or --config naming the sidecar's config file)"
            )
        return args
    given = {dest: key for dest, key in _SETTING_OF.items() if dest in vars(args)}
    overrides = {key: getattr(args, dest) for dest, key in given.items()}
    settings = load_settings(
        config, overrides={k: None if v is None else str(v) for k, v in overrides.items()}
    )
    state = Path(settings.state.dir)
    catalogue = args.metadata or (state if (state / CATALOGUE_FILE).is_file() else None)
    # The file's value of each flag (an empty endpoint or region: none), flags winning.
    found = {dest: settings.values[key] or None for dest, key in given.items()}
    return argparse.Namespace(**{**vars(args), **found, "metadata": catalogue})


def options_from_args(args: argparse.Namespace, *, now_ms: int) -> VerifyOptions:
    """Validate the flags into options (ConfigError naming the bad flag)."""
    args = with_config(args)
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
        storage_options=storage_options(args),
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
    progress: ProgressMode = ProgressMode.OFF

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
            ProgressMode(getattr(args, "progress", ProgressMode.OFF.value)),
        )

    @property
    def spark_log(self) -> Path | None:
        """Where a JVM started here writes (None: the terminal)."""
        if self.verbose or under_spark_submit():
            return None
        return self.out / SPARK_LOG_NAME

    @property
    def spark_log_level(self) -> str:
        """WARN into a log file or when asked to be verbose; only ERROR otherwise."""
        return "WARN" if self.verbose or self.spark_log is not None else "ERROR"


def run(args: argparse.Namespace, *, prog: str = "verifier", clock: Clock | None = None) -> int:
    """Run a verification from parsed flags; return the exit code (see module doc).

    ``clock`` (the system's by default) gives the run's ``now_ms``: the reference of the
    lag allowance in seconds, the orphan grace and catalogue drift.

    SIGINT/SIGTERM stop it (Spark's jobs are cancelled, no report is written) with one
    line and exit 130/143, whatever error the cancelled Spark job raised.
    """
    if args.fleet:
        return run_fleet(args, prog=prog, clock=clock)
    job: JobArgs | None = None
    clock = clock or SystemClock()
    with StopOnSignal() as stop:
        try:
            job = JobArgs.from_args(args, now_ms=clock.now_ms())
            stages = Stages(prog, clock) if job.progress.enabled(sys.stderr) else silent
            stages(
                f"checking the cold store at {re.sub(r'//[^/@]*@', '//***@', job.options.cold_url)}"
            )
            _check_before_spark(job)
            stop.defer()  # until the session is up (watch): see StopOnSignal.defer
            stages(f"starting Spark ({job.master})" if job.master else "starting Spark")
            with spark_session(
                job.master, log_file=job.spark_log, log_level=job.spark_log_level
            ) as spark:
                stop.watch(spark.sparkContext)
                result = verify(spark, job.options, stages)
            stages(_queues_done(result))
            stages(f"writing the reports into {job.out.resolve()}")
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
            print(f"{prog}: could not run: {failure_line(exc)}{where}", file=sys.stderr)
            return EXIT_COULD_NOT_RUN
    counts = ", ".join(f"{c.value} {n}" for c, n in result.counts().items() if n)
    print(
        f"{result.verdict.value}: {len(result.anomalies)} anomalies"
        f"{f' ({counts})' if counts else ''} in {result.totals.queues} queues; "
        f"report: {paths.html}"
    )
    return result.verdict.exit_code


def _queues_done(result: VerificationResult) -> str:
    """``verified 16 queues: 14 ok, 1 dirty, 1 corrupt; 3 anomalies`` (worst first)."""
    by_queue: dict[tuple[str, int], list[Anomaly]] = {}
    for a in result.anomalies:
        by_queue.setdefault((a.topic, a.queue_id), []).append(a)
    statuses = Counter(
        queue_status(q, by_queue.get((q.topic, q.queue_id), [])) for q in result.queues
    )
    order = sorted(statuses, key=_worst_status_first)
    counts = ", ".join(f"{statuses[s]} {s}" for s in order)
    found = len(result.anomalies)
    return f"verified {len(result.queues)} queues: {counts or 'none'}; {found} anomalies"


def _worst_status_first(status: str) -> tuple[int, str]:
    """A queue status named for a verdict (``corrupt``, ``dirty``) sorts by that verdict's
    rank, worst first; the others after, by name."""
    return (-rank_of(status), status)


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
    """``python -m tieredstore.verifier`` / ``spark-submit verifier/__main__.py``."""
    parser = _Parser(prog="verifier", description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(parser)
    return run(parser.parse_args(argv), clock=clock)
