"""``tieredstore restore``: rebuild a broker store from the cold store (disaster recovery).

Reads only the cold store (its commit points name every byte range); writes ``--out``,
which must be empty (or an interrupted restore with the same flags, which resumes).
``--check`` verifies a restored store against the cold messages it was built from
instead.

The store geometry must match the broker that will boot on it: ``--commitlog-file-size``
= ``mappedFileSizeCommitLog``, ``--consume-queue-file-size`` =
``mappedFileSizeConsumeQueue`` (rounded up to a multiple of 20, as the broker does),
``--index-hash-slots`` / ``--index-max-entries`` = ``maxHashSlotNum`` / ``maxIndexNum``.
The defaults are RocketMQ's. See docs/restore.md.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import TextIO

from tieredstore.backends import open_cold
from tieredstore.cli.commands._settings import (
    add_settings_arguments,
    parse_time,
    positive_int,
    settings_from_args,
)
from tieredstore.cli.sidecar import progress as progress_line
from tieredstore.cold.provenance import find_tiered_prefix
from tieredstore.errors import ConfigError
from tieredstore.humanize import human_bytes, human_rate, human_seconds
from tieredstore.logs import before_each_line, configure_logging
from tieredstore.restore.check import check_restored
from tieredstore.restore.journal import RestoreParams
from tieredstore.restore.restorer import RestoreProgress, Restorer, RestoreReport
from tieredstore.settings.loader import Settings, parse_size

log = logging.getLogger("tieredstore.restore")

_CQ_UNIT = 20


def _size(text: str) -> int:
    try:
        value = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings_arguments(p, store=False)
    p.add_argument("--out", type=Path, required=True, help="store directory to write (empty)")
    p.add_argument(
        "--topics",
        nargs="+",
        default=[],
        metavar="GLOB",
        help="only topics matching these globs (default: all)",
    )
    p.add_argument("--since", type=parse_time, help="first store time (epoch ms or ISO-8601)")
    p.add_argument("--until", type=parse_time, help="last store time (epoch ms or ISO-8601)")
    _broker_geometry_arguments(p)
    _config_arguments(p)
    p.add_argument(
        "--batch-bytes",
        type=_size,
        default=8 << 20,
        help="commitlog bytes read per chunk (bounds memory; default 8M)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="verify the store in --out against the cold messages it was built from",
    )
    progress_line.add_progress_argument(p)


def _broker_geometry_arguments(p: argparse.ArgumentParser) -> None:
    """The file sizes and index sizes of the broker the store is restored for."""
    p.add_argument(
        "--commitlog-file-size",
        type=_size,
        default=1 << 30,
        help="the broker's mappedFileSizeCommitLog (default 1G)",
    )
    p.add_argument(
        "--consume-queue-file-size",
        type=_size,
        default=300_000 * _CQ_UNIT,
        help="the broker's mappedFileSizeConsumeQueue (default 6000000)",
    )
    p.add_argument(
        "--index-hash-slots",
        type=positive_int,
        default=5_000_000,
        help="the broker's maxHashSlotNum (default 5000000)",
    )
    p.add_argument(
        "--index-max-entries",
        type=positive_int,
        default=20_000_000,
        help="the broker's maxIndexNum (default 20000000)",
    )
    p.add_argument(
        "--no-index",
        action="store_true",
        help="do not write index files (queryMsgByKey finds no restored message)",
    )


def _config_arguments(p: argparse.ArgumentParser) -> None:
    """Which backed-up broker config files are restored."""
    p.add_argument(
        "--config-at",
        type=parse_time,
        help="restore the config copies current at this time (default: latest)",
    )
    p.add_argument(
        "--no-config",
        action="store_true",
        help="do not restore backed-up config/ files (topics.json is generated)",
    )


def _params(settings: Settings, args: argparse.Namespace) -> RestoreParams:
    if args.since is not None and args.until is not None and args.since > args.until:
        raise ConfigError(f"--since {args.since} is after --until {args.until}")
    cq = -(-args.consume_queue_file_size // _CQ_UNIT) * _CQ_UNIT  # the broker rounds up
    return RestoreParams(
        cold_url=settings.cold_url_redacted,
        cluster=settings.cold.cluster,
        broker=settings.cold.broker,
        topics=tuple(args.topics),
        since=args.since,
        until=args.until,
        commitlog_file_size=args.commitlog_file_size,
        cq_file_size=cq,
        index_hash_slots=args.index_hash_slots,
        index_max_entries=args.index_max_entries,
        write_index=not args.no_index,
        restore_config=not args.no_config,
        config_at=args.config_at,
    )


def _progress_text(p: RestoreProgress, elapsed: float) -> str:
    """``restored 3/10 segments, 1,200 messages, 1.2/4.0 MiB (2.0 MiB/s), ETA 1.4 s``."""
    rate = human_rate(p.bytes / max(elapsed, 1e-9))
    return (
        f"restored {p.segments:,}/{p.segments_total:,} segments, {p.messages:,} messages, "
        f"{human_bytes(p.bytes)}/{human_bytes(p.bytes_total)} ({rate}), "
        f"{progress_line.eta(p.bytes, p.bytes_total, elapsed)}"
    )


def _print_report(report: RestoreReport, seconds: float, out: TextIO) -> None:
    verb = "resumed and restored" if report.resumed else "restored"
    for line in report.losses:
        out.write(line + "\n")
    out.write(
        f"{verb} {report.messages:,} messages of {report.queues} queues into {report.out} "
        f"({human_bytes(report.bytes)} in {human_seconds(seconds)}); commitlog "
        f"[{report.commitlog_base}, {report.commitlog_end}), {report.index_files} index files "
        f"({report.index_entries:,} keys), config: {', '.join(report.configs) or 'none'}\n"
    )


async def _restore(settings: Settings, args: argparse.Namespace, progress: bool) -> int:
    params = _params(settings, args)
    async with open_cold(settings.cold) as backend:
        # Before anything is written: a wrong prefix leaves no --out behind.
        await find_tiered_prefix(
            backend, settings.cold.cluster, settings.cold.broker,
            where=settings.cold_url_redacted, require_record=False,
        )  # fmt: skip
        if args.check:
            result = await check_restored(
                backend, args.out, batch_bytes=args.batch_bytes, source=params
            )
            sys.stdout.write(result.describe() + "\n")
            return 0 if result.ok else 2
        line = progress_line.RewrittenLine(progress)
        unhook = before_each_line(line.close)
        started = time.monotonic()
        try:
            report = await Restorer(
                backend, params, args.out, batch_bytes=args.batch_bytes,
                on_progress=lambda p: line.draw(
                    _progress_text(p, line.elapsed), last=p.segments == p.segments_total
                ),
            ).run()  # fmt: skip
        finally:
            unhook()
            line.close()
        _print_report(report, time.monotonic() - started, sys.stdout)
    return 0


def run(args: argparse.Namespace) -> int:
    # restore needs only the cold store: no broker store, no state dir.
    settings = settings_from_args(args, extra={"store.path": "-", "state.dir": "-"}, check=False)
    configure_logging(settings.log.format, settings.log.level)
    return asyncio.run(_restore(settings, args, progress_line.progress_enabled(args)))
