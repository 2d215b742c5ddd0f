"""A manifest found at the frontier of a queue: adopt it, or quarantine it and tier on.

A writer whose manifest create finds another manifest at the same start (a writer of an
older epoch that committed first, or this sidecar's own earlier run whose catalogue
commit a crash lost) never overwrites it. It adopts it only once it has proved it: the
segment's objects are read and fully verified (sizes, digests, CQ pointers) and every
record the hot store still holds equals the cold one outside bytes [28, 36)
(:func:`tieredstore.dispatcher.tiering.quarantine.check_segment`), and the catalogue's reconcile
accepts it as the exact continuation of the queue. Anything else — objects missing or damaged,
records the hot store disowns, a manifest that does not continue the catalogue — is
moved to the quarantine (copy, then delete, and the delete only if the manifest is
still the one checked) and the queue tiers on from the hot store. The successor thus
never stalls on what a fenced writer left.
"""

from __future__ import annotations

import asyncio
import logging

from tieredstore.cold.manifest import FenceMarker, Manifest, read_stored
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.dispatcher.tiering.cold_writer import ColdWriter
from tieredstore.dispatcher.tiering.quarantine import Move, check_segment, quarantine
from tieredstore.errors import CatalogueError, CorruptManifestError, ObjectNotFoundError
from tieredstore.hot.store import HotStore
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueRow

__all__ = ["adopt_or_quarantine"]

log = logging.getLogger(__name__)


async def adopt_or_quarantine(
    key: str,
    *,
    row: QueueRow,
    catalogue: Catalogue,
    writer: ColdWriter,
    hot: HotStore,
    lease: Lease,
    lock: asyncio.Lock,
) -> QueueRow:
    """Adopt the manifest at ``key`` (the queue's next start) or quarantine it.

    Returns the queue's row: past the adopted segment, or ``row`` itself once the
    manifest is out of the way (the caller's next round commits its own segment there).
    Raises CatalogueError when the manifest could be neither adopted nor moved.
    """
    backend = writer.backend
    try:
        data = await backend.read(key)
        stored = read_stored(data, key)
    except ObjectNotFoundError:
        return row  # gone since (quarantined, expired): the next round creates ours
    except CorruptManifestError as exc:
        raise CatalogueError(
            f"cold holds a manifest at the queue's next offset that does not parse: "
            f"{exc.message}; nothing is overwritten (see docs/operations.md)",
            where=key,
        ) from exc
    if isinstance(stored, FenceMarker):
        return row  # a fence the next round replaces
    rng = await asyncio.to_thread(hot.queue_range, row.topic, row.queue_id)
    check = await check_segment(stored, hot, backend, rng)
    why = check.describe()
    if check.agreement.kept:
        async with lock:
            await writer.recover()
            fresh = await asyncio.to_thread(catalogue.queues.get, row.topic, row.queue_id) or row
        if fresh.cold_commit > stored.start_offset:
            log.warning(
                "queue %s: adopted the segment another writer (%s, epoch %d) committed at "
                "offset %d after checking it against its digests and the hot store",
                row, stored.writer_id, stored.lease_epoch, stored.start_offset,
            )  # fmt: skip
            return fresh
        why = "it does not continue the catalogue (see the reconcile report)"
    log.warning(
        "queue %s: quarantining the segment %s (writer %s, epoch %d) left at offset %d: %s; "
        "tiering goes on from the hot store",
        row, key, stored.writer_id, stored.lease_epoch, stored.start_offset, why,
    )  # fmt: skip
    await _quarantine(stored, data, why, writer=writer, lease=lease)
    return row


async def _quarantine(
    stored: Manifest, data: bytes, why: str, *, writer: ColdWriter, lease: Lease
) -> None:
    """Move the segment to the quarantine; CatalogueError if its manifest changed."""
    move = Move(
        stored.start_offset,
        (stored.commit_log_key, stored.consume_queue_key, stored.key),
        f"left at the frontier: {why}",
        data,
    )
    stamp = writer.clock.now_ms()
    if not await quarantine(move, backend=writer.backend, lease=lease, stamp=stamp):
        raise CatalogueError(
            "the manifest at the queue's next offset changed while it was being "
            "quarantined; trying again next tick",
            where=stored.key,
        )
