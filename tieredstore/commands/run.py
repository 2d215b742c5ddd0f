"""``tieredstore run``: the sidecar. ``--once`` = one catch-up pass, then exit 0."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from tieredstore.commands._settings import add_settings_arguments, settings_from_args
from tieredstore.config import Settings
from tieredstore.logs import configure_logging

log = logging.getLogger("tieredstore.run")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings_arguments(p)
    p.add_argument("--once", action="store_true", help="one catch-up pass, then exit")
    p.add_argument("--init-policy", help="earliest | latest | timestamp:<ms> [tiering.init_policy]")
    p.add_argument("--guard", choices=["checkpoint", "none"], help="[tiering.guard]")
    p.add_argument("--no-wait", action="store_true", help="exit if another sidecar holds the lease")
    p.add_argument(
        "--progress",
        choices=["auto", "on", "off"],
        default="auto",
        help="progress line on stderr (auto: only on a TTY)",
    )


async def _serve(settings: Settings, *, once: bool, wait: bool, progress: bool) -> int:
    from dispatcher.progress import ProgressLine
    from dispatcher.runtime import open_runtime

    bar = ProgressLine(enabled=progress)
    async with open_runtime(settings, on_segment=bar.update) as rt:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, rt.dispatcher.stop)
        try:
            await rt.dispatcher.start(wait_for_lease=wait)
            if once:
                report = await rt.dispatcher.catch_up()
                bar.close()
                log.info(
                    "catch-up done: %d segments, %d messages, %d bytes",
                    report.segments,
                    report.messages,
                    report.bytes,
                )
                if report.diverged or report.lost or report.errors:
                    log.error(
                        "catch-up incomplete: %d queues diverged, %d lost hot data, %d errors",
                        len(report.diverged),
                        len(report.lost),
                        len(report.errors),
                    )
                    return 1
                return 0
            await rt.dispatcher.run(shutdown_deadline=settings["shutdown.deadline"])
            log.info("stopped")
            return 0
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(
        args,
        extra={
            "tiering.init_policy": args.init_policy,
            "tiering.guard": args.guard,
            "lease.wait": False if args.no_wait else None,
        },
    )
    configure_logging(settings["log.format"], settings["log.level"])
    progress = args.progress == "on" or (args.progress == "auto" and sys.stderr.isatty())
    return asyncio.run(
        _serve(settings, once=args.once, wait=bool(settings["lease.wait"]), progress=progress)
    )
