"""``tieredstore repair --topic T --queue Q``: bring a DIVERGED queue back to ACTIVE.

Compares the queue's cold segments with the hot store, moves every segment from the
first disagreeing one on to the quarantine prefix (never deleting anything), truncates
the catalogue there and sets the queue ACTIVE: the sidecar re-tiers from the cut on its
next tick. See :mod:`tieredstore.dispatcher.maintenance.repair` for the order of the moves and
:mod:`tieredstore.dispatcher.tiering.quarantine` for the crash-safe order within one.

Without ``--dry-run`` it takes the catalogue for writing and the writer lease (the
sidecar must be stopped). ``--dry-run`` prints the comparison and the plan and changes
nothing.
"""

from __future__ import annotations

import argparse
import asyncio

from tieredstore.backends import open_cold
from tieredstore.cli.commands._settings import (
    add_settings_arguments,
    print_dry_run,
    settings_from_args,
)
from tieredstore.cli.sidecar.runtime import check_cold_store, open_runtime
from tieredstore.dispatcher.maintenance.repair import (
    RepairPlan,
    RepairReport,
    execute_repair,
    plan_repair,
)
from tieredstore.hot.store import HotStore
from tieredstore.logs import configure_logging
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.settings.loader import Settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings_arguments(p)
    p.add_argument("--topic", required=True, help="topic of the DIVERGED queue")
    p.add_argument("--queue", required=True, type=int, help="queue id of the DIVERGED queue")
    p.add_argument("--dry-run", action="store_true", help="compare and plan; change nothing")


async def _plan_only(settings: Settings, topic: str, queue_id: int) -> RepairPlan:
    backend = open_cold(settings.cold)
    async with backend:
        with Catalogue.read_only_for(settings) as catalogue:
            return await plan_repair(
                hot=HotStore(settings.store.path),
                backend=backend,
                catalogue=catalogue,
                topic=topic,
                queue_id=queue_id,
            )


async def _repair(settings: Settings, topic: str, queue_id: int) -> RepairReport:
    await check_cold_store(settings)  # before the state dir: nothing left if unreachable
    async with open_runtime(settings) as rt:
        # start(): the lease, adoption of missed manifests, interrupted deletions.
        await rt.dispatcher.start(wait_for_lease=False)
        plan = await plan_repair(
            hot=rt.hot, backend=rt.backend, catalogue=rt.catalogue, topic=topic, queue_id=queue_id
        )
        return await execute_repair(
            plan,
            backend=rt.backend,
            catalogue=rt.catalogue,
            keys=rt.dispatcher.rounds.batcher.keys,
            clock=rt.dispatcher.clock,
        )


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    configure_logging(settings.log.format, settings.log.level)
    if args.dry_run:
        return print_dry_run(asyncio.run(_plan_only(settings, args.topic, args.queue)).describe())
    report = asyncio.run(_repair(settings, args.topic, args.queue))
    print("\n".join(report.plan.describe()))
    for original, copy in report.moved:
        print(f"  moved {original} -> {copy}")
    print(
        f"queue {report.row} is {report.row.state.value} at cold offset "
        f"{report.row.cold_commit}; the sidecar re-tiers from there"
    )
    return 0
