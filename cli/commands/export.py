"""``tieredstore export``: the archive as Parquet, partitioned by topic and day.

Reads one broker's committed history from the cold store (its commit points, never
the catalogue) and writes it under ``--out`` with pyarrow — no Spark needed — exporting
only what the output's export manifest does not record yet (see
:mod:`tieredstore.export.parquet`). ``--since``/``--until`` take epoch milliseconds or an ISO
8601 date or time (UTC unless it says otherwise) and select the segments whose store
times overlap ``[since, until)``. The output URL uses the cold store's S3 endpoint and
region settings.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Final

from tieredstore.backends import backend_options, open_backend, open_cold
from tieredstore.backends.posix import posix_root_from_url
from tieredstore.backends.retry import RetryPolicy
from tieredstore.cli.commands._settings import (
    add_settings_arguments,
    parse_time,
    positive_int,
    settings_from_args,
)
from tieredstore.cli.sidecar.progress import (
    RewrittenLine,
    add_progress_argument,
    eta,
    progress_enabled,
)
from tieredstore.clock import SystemClock
from tieredstore.cold.provenance import find_tiered_prefix
from tieredstore.errors import ConfigError, OverlapError
from tieredstore.export.parquet import ExportProgress, ExportRequest, export_parquet
from tieredstore.humanize import human_bytes, human_rate, human_seconds
from tieredstore.logs import before_each_line
from tieredstore.settings.loader import Settings

#: Exit code of a refused export: the history has two versions of some offsets.
EXIT_OVERLAP: Final = 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings_arguments(p, store=False)
    p.add_argument("--format", choices=["parquet"], required=True, help="output format")
    p.add_argument("--out", required=True, help="output root URL (path, file://, s3://)")
    p.add_argument(
        "--topics", nargs="+", default=[], metavar="GLOB", help="only topics matching a glob"
    )
    p.add_argument("--since", type=parse_time, help="segments with messages at or after this")
    p.add_argument("--until", type=parse_time, help="segments with messages before this")
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        help="segments decoded at once, one process each (default 1; memory: about three "
        "times a segment's size per job)",
    )
    add_progress_argument(p)


def _progress_text(p: ExportProgress, elapsed: float) -> str:
    """``exported 12 of 40/91 segments, 34,000 rows, 5.1 MiB (1.2 MiB/s), ETA 40.0 s``."""
    return (
        f"exported {p.exported:,} of {p.segments:,}/{p.segments_total:,} segments, "
        f"{p.rows:,} rows, {human_bytes(p.bytes)} ({human_rate(p.bytes / max(elapsed, 1e-9))}), "
        f"{eta(p.segments, p.segments_total, elapsed)}"
    )


async def _export(settings: Settings, args: argparse.Namespace, line: RewrittenLine) -> int:
    options = backend_options(settings.cold)
    request = ExportRequest(
        cluster=settings.cold.cluster,
        broker=settings.cold.broker,
        topics=tuple(args.topics),
        since_ms=args.since,
        until_ms=args.until,
    )
    async with (
        open_cold(settings.cold) as cold,
        open_backend(args.out, options=options, retry=RetryPolicy()) as out,
    ):
        await find_tiered_prefix(
            cold, settings.cold.cluster, settings.cold.broker,
            where=settings.cold_url_redacted, require_record=False,
        )  # fmt: skip
        unhook = before_each_line(line.close)
        try:
            report = await export_parquet(
                cold, out, request, clock=SystemClock(), jobs=args.jobs,
                on_progress=lambda p: line.draw(
                    _progress_text(p, line.elapsed), last=p.segments == p.segments_total
                ),
            )  # fmt: skip
        finally:
            unhook()
            line.close()
    print(
        f"exported {report.exported} segments ({report.rows} rows, {report.files} files, "
        f"{human_bytes(report.bytes)}) to {args.out} in {human_seconds(line.elapsed)}; "
        f"{report.skipped} of {report.selected} selected were exported before"
    )
    if report.removed:
        print(
            f"removed {report.removed} segments ({report.removed_rows} rows) that left the "
            "committed history (superseded after repair)"
        )
    return 0


def run(args: argparse.Namespace) -> int:
    if args.since is not None and args.until is not None and args.since >= args.until:
        raise ConfigError(f"--since {args.since} is not before --until {args.until}")
    # export needs only the cold store: the broker store and state dir are not used.
    settings = settings_from_args(args, extra={"store.path": "-", "state.dir": "-"}, check=False)
    _check_local_root(settings.cold.url)
    try:
        return asyncio.run(_export(settings, args, RewrittenLine(progress_enabled(args))))
    except OverlapError as exc:  # damaged history: refused as restore refuses it
        print(f"tieredstore export: {exc}", file=sys.stderr)
        return EXIT_OVERLAP


def _check_local_root(url: str) -> None:
    """A local cold root that does not exist is a typo, not an empty archive."""
    if "://" in url and not url.startswith("file://"):
        return  # object stores: a missing bucket fails the listing with its own error
    if not posix_root_from_url(url).is_dir():
        raise ConfigError("cold store root does not exist", where=url)
