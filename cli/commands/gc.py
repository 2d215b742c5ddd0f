"""``tieredstore gc``: remove uncommitted objects and crash leftovers older than the grace.

Lists every object under the broker's cold prefix, reads every manifest, and removes
COMMIT_LOG / CONSUME_QUEUE objects no manifest references (and, on POSIX, temp files of
interrupted writes) whose mtime is older than ``--grace`` [gc.grace]. Objects the
catalogue references are spared too when a catalogue exists in the state directory.
Manifests whose objects are missing or of the wrong size are reported, never "fixed".

Without ``--dry-run`` it holds the writer lease while it scans and deletes, so it runs
while the sidecar is stopped. ``--dry-run`` only lists (and works beside the sidecar).
Exit code 1 when committed data is damaged (missing objects, corrupt manifests).
"""

from __future__ import annotations

import argparse
import asyncio

from tieredstore.backends import open_cold
from tieredstore.cli.commands._settings import add_settings_arguments, settings_from_args
from tieredstore.cli.sidecar.runtime import check_cold_store
from tieredstore.clock import SystemClock
from tieredstore.dispatcher.assembly import lease_for
from tieredstore.dispatcher.maintenance.gc import GcReport, delete_garbage, scan_garbage
from tieredstore.logs import configure_logging
from tieredstore.metadata.catalogue import DB_NAME, Catalogue
from tieredstore.metadata.rows import SegmentStatus
from tieredstore.settings.loader import Settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings_arguments(p)
    p.add_argument(
        "--grace",
        metavar="SECONDS",
        help="only objects older than this are garbage (seconds, or e.g. 30m, 1h) [gc.grace]",
    )
    p.add_argument("--dry-run", action="store_true", help="list the garbage; delete nothing")


def _catalogue_keys(
    settings: Settings,
) -> tuple[frozenset[str], frozenset[str], dict[str, int]]:
    """Every object key the catalogue references, those of its COMMITTED segments, and
    the batch objects its slices name with their committed sizes (none when there is no
    catalogue)."""
    if not (settings.state.dir / DB_NAME).exists():
        return frozenset(), frozenset(), {}
    with Catalogue.read_only_for(settings) as catalogue:
        keys: set[str] = set()
        committed: set[str] = set()
        batches: dict[str, int] = {}
        for row in catalogue.queues.all():
            for seg in catalogue.segments.of(row.topic, row.queue_id):
                m = seg.manifest
                keys.update((m.key, m.commit_log_key, m.consume_queue_key))
                if seg.status is SegmentStatus.COMMITTED:
                    committed.update((m.key, m.commit_log_key, m.consume_queue_key))
            for link in catalogue.slices.of(row.topic, row.queue_id):
                batches[link.key] = link.commit_log.stored_size
    return frozenset(keys), frozenset(committed), batches


async def _gc(settings: Settings, *, dry_run: bool) -> tuple[GcReport, int]:
    clock = SystemClock()
    protected, committed, batches = _catalogue_keys(settings)
    await check_cold_store(settings)  # a refusing store: its one line, before the lease
    backend = open_cold(settings.cold)
    async with backend:
        lease = lease_for(settings, backend, clock)
        if not dry_run:
            # Held from before the scan: no sidecar may rewrite an old leftover meanwhile.
            await lease.acquire(wait=False)
        try:
            report = await scan_garbage(
                backend,
                cluster=settings.cold.cluster,
                broker=settings.cold.broker,
                now_ms=clock.now_ms(),
                grace_s=settings.gc.grace,
                protected=protected,
                committed=committed,
                batches=batches,
            )
            deleted = 0 if dry_run else await delete_garbage(report, backend=backend, lease=lease)
        finally:
            await lease.release()
    return report, deleted


def run(args: argparse.Namespace) -> int:
    # GC reads no broker store: the store directory need not be reachable from here.
    settings = settings_from_args(args, extra={"gc.grace": args.grace}, check=False)
    configure_logging(settings.log.format, settings.log.level)
    report, deleted = asyncio.run(_gc(settings, dry_run=args.dry_run))
    verb = "would delete" if args.dry_run else "deleted"
    for item in report.garbage:
        print(f"{verb} {item.describe()}")
    for finding in report.findings:
        print(f"{'DAMAGED' if finding.kind.damage else 'kept'} {finding.describe()}")
    count = len(report.garbage) if args.dry_run else deleted
    print(
        f"{'dry run: ' if args.dry_run else ''}{verb} {count} objects; "
        f"{report.young} uncommitted objects within the grace period kept; "
        f"{report.manifests} manifests read, {len(report.damaged)} problems"
    )
    return 1 if report.damaged else 0
