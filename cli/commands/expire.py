"""``tieredstore expire``: one retention pass now (or at ``--now``), or purge a deleted topic.

Without ``--dry-run`` it takes the catalogue for writing and the writer lease, so it
runs while the sidecar is stopped (the sidecar runs the same pass every
``retention.interval``); it first adopts manifests the catalogue missed and finishes
interrupted deletions. ``--dry-run`` opens the catalogue read-only, never contacts the
cold store and changes nothing, so it also works beside a running sidecar: it prints,
per queue, the segments that would expire (how many, the offsets they span, the newest
max store timestamp among them, its age, the retention and the reason) and each queue
that would be destroyed, with the reason; a real pass prints the same of what it did.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

from tieredstore.cli.commands._settings import add_settings_arguments, settings_from_args
from tieredstore.cli.sidecar.runtime import check_cold_store, open_runtime
from tieredstore.clock import SystemClock
from tieredstore.dispatcher.maintenance.retention import (
    Decision,
    ExpireSegment,
    QueueSnapshot,
    RetentionPolicy,
    format_age,
    plan_purge,
    plan_retention,
    read_hot_view,
    snapshot_catalogue,
)
from tieredstore.errors import ConfigError
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.humanize import iso_time
from tieredstore.logs import configure_logging
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.settings.loader import Settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings_arguments(p)
    p.add_argument(
        "--now",
        type=int,
        metavar="MS",
        help="evaluate retention at this instant, in epoch milliseconds (default: now)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print what would be deleted and why; change nothing"
    )
    p.add_argument("--topic", help="only this topic")
    p.add_argument("--retention", help="retention for this run, e.g. 72h [retention.default]")
    p.add_argument(
        "--purge",
        action="store_true",
        help="with --topic: delete all of the topic's cold data now (the topic must already "
        "be gone from the broker)",
    )
    p.add_argument(
        "--confirm", action="store_true", help="required with --purge (unless --dry-run)"
    )


def _check_flags(args: argparse.Namespace) -> None:
    if args.now is not None and args.now < 0:
        raise ConfigError(f"--now {args.now} is not an epoch time in milliseconds")
    if args.purge and not args.topic:
        raise ConfigError("--purge needs --topic T")
    if args.purge and not (args.dry_run or args.confirm):
        raise ConfigError(
            f"--purge deletes every cold segment of topic {args.topic!r} at once; "
            "add --confirm (or look first with --dry-run)"
        )


def _plan_only(settings: Settings, args: argparse.Namespace, now_ms: int) -> tuple[Decision, ...]:
    """The dry run: read-only catalogue and hot store, no backend, no lease."""
    with Catalogue.read_only_for(settings) as catalogue:
        snaps: Sequence[QueueSnapshot] = snapshot_catalogue(catalogue)
    hot = read_hot_view(
        HotStore(settings.store.path), [QueueKey(s.row.topic, s.row.queue_id) for s in snaps]
    )
    policy = RetentionPolicy.of(settings.retention)
    if args.purge:
        return plan_purge(snaps, hot, topic=args.topic, now_ms=now_ms, policy=policy)
    if args.topic:
        snaps = [s for s in snaps if s.row.topic == args.topic]
    return plan_retention(snaps, hot, now_ms=now_ms, policy=policy)


async def _expire(
    settings: Settings, args: argparse.Namespace, now_ms: int
) -> tuple[Decision, ...]:
    await check_cold_store(settings)  # before the state dir: nothing left if unreachable
    async with open_runtime(settings) as rt:
        # start(): the lease, adoption of missed manifests, interrupted deletions.
        await rt.dispatcher.start(wait_for_lease=False)
        if args.purge:
            report = await rt.retention.purge(args.topic, now_ms=now_ms)
        else:
            report = await rt.retention.run_pass(now_ms=now_ms, topic=args.topic)
        return report.decisions


def per_queue(decisions: Sequence[Decision]) -> list[tuple[bool, str]]:
    """One line per queue (``(expires, text)``): its expiring segments summarised — how
    many, the offsets they span, the newest store time among them, its age and the
    retention and reason — then each queue destroyed. In the order decided."""
    groups: dict[tuple[str, int], list[ExpireSegment]] = {}
    out: list[tuple[bool, str]] = []
    for d in decisions:
        if isinstance(d, ExpireSegment):
            groups.setdefault((d.segment.topic, d.segment.queue_id), []).append(d)
    for (topic, queue), segs in groups.items():
        newest = max(segs, key=lambda d: d.max_store_timestamp)
        reasons = sorted({d.reason.value for d in segs})
        n = len(segs)
        out.append((True, (
            f"{n} segment{'s' if n != 1 else ''} "
            f"[{min(d.segment.start_offset for d in segs)}, "
            f"{max(d.segment.end_offset for d in segs)}) of queue {topic}/{queue}: newest "
            f"max store timestamp {newest.max_store_timestamp} "
            f"({iso_time(newest.max_store_timestamp, timespec='milliseconds')}), age "
            f"{format_age(newest.age_ms)}, retention {format_age(newest.retention_ms)}: "
            f"{', '.join(reasons)}"
        )))  # fmt: skip
    out += [(False, d.describe()) for d in decisions if not isinstance(d, ExpireSegment)]
    return out


def _print(decisions: Sequence[Decision], *, dry_run: bool, now_ms: int) -> None:
    segments = sum(isinstance(d, ExpireSegment) for d in decisions)
    queues = len(decisions) - segments
    verbs = {True: ("would expire", "would destroy"), False: ("expired", "destroyed")}[dry_run]
    for expires, text in per_queue(decisions):
        print(f"{verbs[0] if expires else verbs[1]} {text}")
    print(
        f"{'dry run: ' if dry_run else ''}{verbs[0]} {segments} segments and {verbs[1]} "
        f"{queues} queues (retention evaluated at {iso_time(now_ms, timespec='milliseconds')})"
    )


def run(args: argparse.Namespace) -> int:
    _check_flags(args)
    settings = settings_from_args(args, extra={"retention.default": args.retention})
    configure_logging(settings.log.format, settings.log.level)
    now_ms = SystemClock().now_ms() if args.now is None else args.now
    if args.dry_run:
        decisions = _plan_only(settings, args, now_ms)
    else:
        decisions = asyncio.run(_expire(settings, args, now_ms))
    _print(decisions, dry_run=args.dry_run, now_ms=now_ms)
    return 0
