"""``tieredstore lease show`` / ``tieredstore lease break --force``: the writer lease.

``show`` prints the broker's lease record (holder, epoch, lease time, and how far the
holder's clock is from this host's). ``break --force`` frees a lease whose holder is
gone: it watches the record for one lease time on this host's monotonic clock, refuses
(exit 1) if the record is renewed meanwhile, and otherwise releases it at the next epoch,
which fences the old holder (:mod:`tieredstore.dispatcher.lease.admin`). Without ``--force`` it
refuses (exit 3). Neither command needs the broker's store or the state directory. A
broker prefix with no lease and nothing tiered (a typo'd ``--broker``) exits 3 naming
the brokers that exist, as ``read``, ``export`` and ``restore`` do.
"""

from __future__ import annotations

import argparse
import asyncio

from tieredstore.backends import open_cold
from tieredstore.cli.commands._settings import add_settings_arguments, settings_from_args
from tieredstore.clock import SystemClock
from tieredstore.cold.provenance import find_tiered_prefix
from tieredstore.dispatcher.assembly import lease_for
from tieredstore.dispatcher.lease.admin import break_lease, describe_lease
from tieredstore.dispatcher.lease.lease import Sighting
from tieredstore.errors import ConfigError
from tieredstore.logs import configure_logging
from tieredstore.settings.loader import Settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    sub.required = True
    show = sub.add_parser("show", help="print the writer lease record")
    add_settings_arguments(show, store=False)
    brk = sub.add_parser(
        "break",
        help="release a lease whose holder is gone (watches it for one lease time first)",
    )
    add_settings_arguments(brk, store=False)
    brk.add_argument("--force", action="store_true", help="required: fences whoever held the lease")


async def _show(settings: Settings) -> list[str]:
    clock = SystemClock()
    async with open_cold(settings.cold) as backend:
        record = await lease_for(settings, backend, clock).read()
        if record is None:  # a typo'd --broker or --cold: exit 3 naming the brokers there
            await find_tiered_prefix(
                backend, settings.cold.cluster, settings.cold.broker,
                where=settings.cold_url_redacted, require_record=False,
            )  # fmt: skip
    return describe_lease(record, now_ms=clock.now_ms())


async def _break(settings: Settings) -> str:
    def announce(seen: Sighting) -> None:
        print(
            f"watching the lease of {seen.holder}: broken if unchanged for "
            f"{seen.left_s:.0f}s more on this host's clock",
            flush=True,
        )

    async with open_cold(settings.cold) as backend:
        report = await break_lease(lease_for(settings, backend, SystemClock()), on_watch=announce)
    return report.describe()


def run(args: argparse.Namespace) -> int:
    # Only the cold store is used: neither the broker's store nor the state directory.
    settings = settings_from_args(args, extra={"store.path": ".", "state.dir": "."}, check=False)
    configure_logging(settings.log.format, settings.log.level)
    if args.action == "show":
        for line in asyncio.run(_show(settings)):
            print(line)
        return 0
    if not args.force:
        raise ConfigError(
            "lease break fences the current holder: run it with --force once that sidecar "
            "is known to be gone"
        )
    print(asyncio.run(_break(settings)))
    return 0
