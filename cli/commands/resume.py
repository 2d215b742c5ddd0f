"""``tieredstore resume --topic T --queue Q --accept-loss``: bring a PAUSED queue back.

A queue is PAUSED when the broker deleted offsets before they were tiered. ``resume``
records that loss in the cold store (a loss record beside the manifests: the range, when
it was accepted, by which writer and lease epoch), accepts it in the catalogue and sets
the queue ACTIVE: the sidecar tiers from hot min on its next tick. See
:mod:`tieredstore.dispatcher.maintenance.resume`.

It takes the catalogue for writing and the writer lease (the sidecar must be stopped).
Without ``--accept-loss`` a resume that would skip lost offsets is refused (exit 3, the
range named); ``--dry-run`` prints the plan and changes nothing.
"""

from __future__ import annotations

import argparse
import asyncio

from tieredstore.cli.commands._settings import (
    add_settings_arguments,
    print_dry_run,
    settings_from_args,
)
from tieredstore.cli.sidecar.runtime import check_cold_store, open_runtime
from tieredstore.dispatcher.maintenance.resume import (
    ResumePlan,
    ResumeReport,
    execute_resume,
    plan_resume,
)
from tieredstore.hot.store import HotStore
from tieredstore.logs import configure_logging
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.settings.loader import Settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings_arguments(p)
    p.add_argument("--topic", required=True, help="topic of the PAUSED queue")
    p.add_argument("--queue", required=True, type=int, help="queue id of the PAUSED queue")
    p.add_argument(
        "--accept-loss",
        action="store_true",
        help="record the offsets the broker deleted before they were tiered as lost, resume",
    )
    p.add_argument("--dry-run", action="store_true", help="show the plan; change nothing")


async def _plan_only(settings: Settings, topic: str, queue_id: int) -> ResumePlan:
    with Catalogue.read_only_for(settings) as catalogue:
        return await plan_resume(
            hot=HotStore(settings.store.path), catalogue=catalogue, topic=topic, queue_id=queue_id
        )


async def _resume(settings: Settings, topic: str, queue_id: int, accept: bool) -> ResumeReport:
    await check_cold_store(settings)  # before the state dir: nothing left if unreachable
    async with open_runtime(settings) as rt:
        # start(): the lease, adoption of missed manifests and loss records.
        await rt.dispatcher.start(wait_for_lease=False)
        plan = await plan_resume(hot=rt.hot, catalogue=rt.catalogue, topic=topic, queue_id=queue_id)
        return await execute_resume(
            plan,
            hot=rt.hot,
            backend=rt.backend,
            catalogue=rt.catalogue,
            lease=rt.dispatcher.lease,
            clock=rt.dispatcher.clock,
            accept_loss=accept,
        )


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    configure_logging(settings.log.format, settings.log.level)
    if args.dry_run:
        return print_dry_run(asyncio.run(_plan_only(settings, args.topic, args.queue)).describe())
    report = asyncio.run(_resume(settings, args.topic, args.queue, args.accept_loss))
    print("\n".join(report.plan.describe()))
    for record in report.records:
        print(f"  recorded {record.key}: [{record.start_offset}, {record.end_offset}) lost")
    print(
        f"queue {report.row} is {report.row.state.value} at cold offset "
        f"{report.row.cold_commit}; the sidecar tiers from there"
    )
    return 0
