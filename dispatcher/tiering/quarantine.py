"""A committed segment judged against the hot store, and moved to the quarantine.

Both a writer that finds another writer's manifest at a queue's frontier
(:mod:`tieredstore.dispatcher.tiering.adoption`) and ``tieredstore repair``
(:mod:`tieredstore.dispatcher.maintenance.repair`) decide with :func:`check_segment` whether a
committed segment agrees with the hot store, and move what it disowns aside with
:func:`quarantine`, to ``_quarantine/<topic>/<queue>/<stamp>/<KIND>/<name>``
(:func:`~tieredstore.cold.layout.quarantine_key`): moved, never deleted.

Crash safety of a move:

* copy COMMIT_LOG, then CONSUME_QUEUE, then the MANIFEST (*last written*): a quarantined
  manifest always has its objects beside it;
* delete the original MANIFEST (*first deleted*: the segment is uncommitted before any
  of its data goes), then CONSUME_QUEUE, then COMMIT_LOG.

A crash therefore leaves the segment either still committed (its originals intact) or
with a complete quarantined copy; moving it again copies every original still present
(under the new stamp) before it is deleted, so nothing is ever deleted without a copy.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from tieredstore.backends.base import Backend
from tieredstore.cold.history import Committed, as_link, span_bytes
from tieredstore.cold.layout import parse_object_key, quarantine_key
from tieredstore.cold.manifest import Manifest
from tieredstore.cold.segment import verify_segment
from tieredstore.dispatcher.lease.guard import hold_lease
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.errors import ColdDataError, CorruptDataError, ObjectNotFoundError
from tieredstore.formats.record import same_outside_physical_offset
from tieredstore.hot.store import HotRange, HotStore

__all__ = ["Agreement", "Move", "SegmentCheck", "check_segment", "quarantine"]

log = logging.getLogger(__name__)


class Agreement(enum.Enum):
    """How one cold segment compares with the hot store (named apart from the
    verifier's whole-run :class:`tieredstore.verifier.vocabulary.Verdict`)."""

    AGREES = "agrees with the hot store"
    HOT_GONE = "the broker deleted these offsets; nothing contradicts cold (kept)"
    HOT_SHORT = "reaches past the hot max offset"
    DIFFERS = "differs from the hot store"
    UNREADABLE = "its cold objects are missing or corrupt"

    @property
    def kept(self) -> bool:
        return self in (Agreement.AGREES, Agreement.HOT_GONE)


@dataclass(frozen=True, slots=True)
class SegmentCheck:
    """How one committed link (a segment, or a batch slice) compares with the hot store."""

    link: Committed
    agreement: Agreement
    detail: str

    def describe(self) -> str:
        extra = f": {self.detail}" if self.detail else ""
        return f"{self.link.describe()} {self.agreement.value}{extra}"


@dataclass(frozen=True, slots=True)
class Move:
    """One segment to quarantine. ``keys`` are its objects with the manifest last
    (copied last, deleted first); ``why`` says how it was found. ``manifest`` is the
    manifest's bytes as decided on: nothing of the move is deleted unless the manifest
    key still holds exactly them (a stale catalogue never moves another writer's
    segment); empty for a manifest that did not parse (moved alone, whatever it is)."""

    start_offset: int
    keys: tuple[str, ...]
    why: str
    manifest: bytes = b""


async def check_segment(
    committed: Manifest | Committed, hot: HotStore, backend: Backend, rng: HotRange
) -> SegmentCheck:
    """Compare one committed link (a segment's manifest, or a batch slice) with the hot
    store: its bytes are read and fully verified (sizes, digests, CQ pointers), then every
    record the hot store still holds is compared outside bytes [28, 36), with each unit's
    size and tagsCode."""
    m = as_link(committed)
    if m.end_offset > rng.max:
        return SegmentCheck(m, Agreement.HOT_SHORT, f"hot max offset is {rng.max}")
    lo = max(m.start_offset, rng.min)
    if lo >= m.end_offset:
        return SegmentCheck(m, Agreement.HOT_GONE, f"hot min offset is {rng.min}")
    try:
        cl = await span_bytes(backend, m.commit_log)
        cq = await span_bytes(backend, m.consume_queue)
        units = verify_segment(m, cl, cq, where=backend.url)
    except (ColdDataError, CorruptDataError) as exc:
        return SegmentCheck(m, Agreement.UNREADABLE, str(exc))
    hot_units = await asyncio.to_thread(hot.read_units, m.topic, m.queue_id, lo, m.end_offset)
    cold_units = units[lo - m.start_offset :]
    for field in ("size", "tags_code"):
        bad = (cold_units[field] != hot_units[field]).nonzero()[0]
        if bad.size:
            return SegmentCheck(
                m, Agreement.DIFFERS, f"CQ {field} differs at queue offset {lo + int(bad[0])}"
            )
    records = await asyncio.to_thread(
        hot.read_records_bytes, hot_units["commitlog_offset"], hot_units["size"]
    )
    for i, record in enumerate(records):
        pos = int(cold_units["commitlog_offset"][i]) - m.cl_base
        if not same_outside_physical_offset(record, cl[pos : pos + len(record)]):
            return SegmentCheck(m, Agreement.DIFFERS, f"record differs at queue offset {lo + i}")
    return SegmentCheck(m, Agreement.AGREES, "")


async def quarantine(
    move: Move, *, backend: Backend, lease: Lease, stamp: int
) -> Sequence[tuple[str, str]]:
    """Copy the segment's objects (manifest last), then delete them (manifest first).

    Right before the deletes, the manifest key is read again: unless it still holds
    ``move.manifest`` (when given), nothing is deleted (the copies stay as evidence) and
    the move is reported skipped in the log — the segment there is not the one decided
    about (another writer's, e.g. judged by a stale catalogue).
    """
    await hold_lease(lease)
    copied: list[tuple[str, str]] = []
    for key in move.keys:
        try:
            data = await backend.read(key)
        except ObjectNotFoundError:
            continue  # moved by an interrupted earlier repair, or never written
        target = quarantine_key(parse_object_key(key), stamp_ms=stamp)
        await backend.write(target, data)
        copied.append((key, target))
    await hold_lease(lease)
    if move.manifest and not await _still_there(backend, move.keys[-1], move.manifest):
        log.warning(
            "not quarantining the segment at %s: the manifest there is not the one repair "
            "decided about (another writer's); left in place",
            move.keys[-1],
        )
        return ()
    for key in reversed(move.keys):
        await backend.delete(key)
    return copied


async def _still_there(backend: Backend, key: str, expected: bytes) -> bool:
    """Whether ``key`` holds ``expected`` (absent counts: there is nothing to protect)."""
    try:
        return await backend.read(key) == expected
    except ObjectNotFoundError:
        return True
