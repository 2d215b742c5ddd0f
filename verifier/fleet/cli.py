"""``verify --fleet``: the fleet job's flags and run (:mod:`tieredstore.verifier.fleet.job`).

The same entry points as the single-broker run (``tieredstore verify``, ``python -m
verifier``, ``spark-submit verifier/__main__.py``) with ``--fleet``: no ``--hot`` or
``--broker`` (each broker's newest hot fingerprint stands for its hot store), ``--cluster``
optional (without it, every cluster in the cold store). Exit code: the worst broker's
verdict's (:mod:`tieredstore.verifier.verdict`; INCOMPLETE 4), 3 could not run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException

from tieredstore.clock import Clock, SystemClock
from tieredstore.errors import ConfigError, TieredStoreError
from tieredstore.settings.loader import parse_duration
from tieredstore.verifier.fleet.job import DEFAULT_MAX_FINGERPRINT_AGE_S, FleetOptions, verify_fleet
from tieredstore.verifier.fleet.report import write_fleet_reports
from tieredstore.verifier.readers import probe_cold
from tieredstore.verifier.spark.interrupt import StopOnSignal
from tieredstore.verifier.spark.session import (
    SPARK_LOG_NAME,
    failure_line,
    spark_session,
    under_spark_submit,
)
from tieredstore.verifier.storage_flags import storage_options
from tieredstore.verifier.verdict import EXIT_COULD_NOT_RUN
from tieredstore.verifier.vocabulary import parse_lag_allowance

__all__ = ["add_fleet_arguments", "run_fleet"]

#: Flags of the single-broker run that a fleet run refuses (what they name has no
#: meaning across brokers): argparse dest → the flag.
_SINGLE_ONLY = {"hot": "--store", "broker": "--broker", "metadata": "--state-dir"}


def add_fleet_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--fleet",
        action="store_true",
        help="verify every tiered broker of --cluster (or of every cluster) against its "
        "newest hot fingerprint (tieredstore fingerprint), in one job",
    )
    p.add_argument(
        "--max-fingerprint-age",
        default=f"{DEFAULT_MAX_FINGERPRINT_AGE_S / 3600:g}h",
        help="--fleet: a broker whose newest fingerprint is older is INCOMPLETE "
        "(default %(default)s)",
    )


def _options(args: argparse.Namespace, now_ms: int) -> FleetOptions:
    for dest, flag in _SINGLE_ONLY.items():
        if getattr(args, dest, None) is not None:
            raise ConfigError(f"{flag} does not apply to --fleet (each broker has its own)")
    if not args.cold:
        raise ConfigError("--fleet needs --cold: the cold store every broker tiers to")
    if args.metrics_file is not None and not args.metrics_file.parent.is_dir():
        raise ConfigError(
            f"bad --metrics-file: directory {args.metrics_file.parent} does not exist"
        )
    try:
        age = parse_duration(args.max_fingerprint_age)
    except ValueError as exc:
        raise ConfigError(f"bad --max-fingerprint-age: {exc}") from exc
    return FleetOptions(
        cold_url=args.cold,
        now_ms=now_ms,
        clusters=(args.cluster,) if args.cluster else (),
        lag_allowance=parse_lag_allowance(args.lag_allowance),
        max_fingerprint_age_s=age,
        storage_options=storage_options(args),
    )


def run_fleet(args: argparse.Namespace, *, prog: str, clock: Clock | None = None) -> int:
    """Run the fleet job from parsed flags; return the exit code (module doc)."""
    out: Path = args.out
    log = None if args.verbose or under_spark_submit() else out / SPARK_LOG_NAME
    with StopOnSignal() as stop:
        try:
            opts = _options(args, (clock or SystemClock()).now_ms())
            probe_cold(opts.cold)
            if log is not None:
                out.mkdir(parents=True, exist_ok=True)
            stop.defer()
            level = "WARN" if log is not None or args.verbose else "ERROR"
            with spark_session(args.master, log_file=log, log_level=level) as spark:
                stop.watch(spark.sparkContext)
                result = verify_fleet(spark, opts)
            paths = write_fleet_reports(result, out, metrics_file=args.metrics_file)
        except (TieredStoreError, PySparkException, Py4JError, OSError, KeyboardInterrupt) as exc:
            if stop.signal is not None:
                print(
                    f"{prog}: interrupted by {stop.signal.name}; no report written", file=sys.stderr
                )
                return stop.exit_code()
            if isinstance(exc, KeyboardInterrupt):
                raise
            where = f" (Spark log: {log})" if log is not None and log.exists() else ""
            print(f"{prog}: could not run: {failure_line(exc)}{where}", file=sys.stderr)
            return EXIT_COULD_NOT_RUN
    counts = {v: sum(1 for r in result.brokers if r.verdict is v) for v in type(result.verdict)}
    shown = ", ".join(f"{v.value} {n}" for v, n in counts.items() if n)
    print(f"{result.verdict.value}: {len(result.brokers)} brokers ({shown}); report: {paths.html}")
    return result.verdict.exit_code
