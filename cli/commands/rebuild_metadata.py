"""``tieredstore rebuild-metadata``: rebuild the SQLite catalogue from cold manifests alone.

The cold store is self-describing: every committed segment has its manifest. This builds
a fresh catalogue in ``--state-dir`` from them (refusing to overwrite an existing one),
prints what it adopted and any issue found (exit 1 when there are issues), and never
writes to the cold store. Run it with the sidecar stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from tieredstore.backends import open_cold
from tieredstore.cli.commands._settings import add_settings_arguments, settings_from_args
from tieredstore.cli.sidecar.runtime import check_cold_store
from tieredstore.metadata.reconcile import rebuild
from tieredstore.settings.loader import Settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings_arguments(p, store=False)


async def _rebuild(settings: Settings) -> int:
    await check_cold_store(settings)  # before the state dir: nothing left if unreachable
    async with open_cold(settings.cold) as backend:  # retried: an outage says so in one line
        report = await rebuild(
            backend, settings.state.dir, cluster=settings.cold.cluster, broker=settings.cold.broker
        )
    print(
        f"rebuilt {settings.state.dir}: {len(report.created)} queues, "
        f"{len(report.adopted)} segments adopted, {len(report.findings)} issues"
    )
    for issue in report.findings:
        print(f"  {issue}", file=sys.stderr)
    return 0 if report.clean else 1


def run(args: argparse.Namespace) -> int:
    # The hot store is not needed to rebuild: only the cold store and the state dir.
    settings = settings_from_args(args, extra={"store.path": "."}, check=False)
    return asyncio.run(_rebuild(settings))
