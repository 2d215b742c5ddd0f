"""Healing a lost committed tail from hot, without ever hiding the loss.

When reconcile finds that the manifests of a queue's newest committed segments are
gone from cold (deleted by hand, a bucket lifecycle rule, a bad restore of the bucket)
while the broker still holds their offsets, those messages are tiered again. The rules:

* only a **tail**: every catalogue segment from the first lost one to the queue's end
  has its manifest key absent. A lost segment with intact ones after it is left
  DEGRADED (tiering it again would overlap them);
* only when the broker still holds **every** offset from the first lost one (hot min at
  or below it): a partial heal would hide the part it cannot restore;
* never over a committed key: a manifest key that still holds something (an emptied,
  unparsable or newer-format manifest) is never replaced, and such a queue is not
  healed. The new segments are uploaded under new attempt names (as every upload is)
  and their manifests *created* where the lost ones were;
* the event is **recorded in cold** before anything changes (a ``_retiered`` record,
  :func:`~tieredstore.layout.retiered_key`: the lost range, the lost manifests' keys,
  when, by whom) and **counted** (``tieredstore_cold_ranges_retiered_total``). The
  queue stays DEGRADED in ``status`` for the rest of the process.

Then the catalogue forgets the lost segments (:meth:`SegmentTable.truncate`) and the
next tick tiers the offsets again from hot.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass

from dispatcher.metrics import Metrics
from metadata.catalogue import Catalogue
from metadata.rows import SegmentRow, SegmentStatus
from tieredstore.backends.base import Backend
from tieredstore.canonical_json import canonical
from tieredstore.clock import Clock
from tieredstore.errors import ConditionFailedError, TieredStoreError
from tieredstore.hot_store import HotStore, QueueKey
from tieredstore.layout import QueuePath, retiered_key

__all__ = ["RETIERED_FORMAT", "HealOutcome", "heal_lost_tail"]

log = logging.getLogger(__name__)

RETIERED_FORMAT = "tieredstore-retiered/1"


class HealOutcome(enum.Enum):
    HEALED = "the lost tail is tiered again from hot"
    NOT_A_TAIL = "a committed segment after the lost one is intact"
    KEY_TAKEN = "its damaged segment's manifest key still holds something (never replaced)"
    HOT_LOST = "the broker no longer holds every lost offset"


@dataclass(frozen=True, slots=True)
class _Tail:
    segments: tuple[SegmentRow, ...]

    @property
    def start(self) -> int:
        return self.segments[0].start_offset

    @property
    def end(self) -> int:
        return self.segments[-1].end_offset


async def heal_lost_tail(
    queue: QueueKey,
    *,
    catalogue: Catalogue,
    backend: Backend,
    hot: HotStore,
    queue_path: QueuePath,
    metrics: Metrics,
    clock: Clock,
    writer_id: str,
    epoch: int,
    check: Callable[[], None],
) -> HealOutcome:
    """Heal ``queue``'s lost committed tail if the rules allow (module doc); the
    caller holds the writer lease (``check`` raises when it is lost) and the lock of
    catalogue writes, and calls this only for a queue reconcile found damaged. Returns
    what was done (anything but HEALED is one ERROR line); backend errors propagate."""
    segments = [
        s
        for s in await asyncio.to_thread(catalogue.segments.of, queue.topic, queue.queue_id)
        if s.status is SegmentStatus.COMMITTED
    ]
    present = [await backend.exists(s.manifest.key) for s in segments]
    if all(present):  # damaged, not gone: an object missing, a manifest emptied
        return _said(queue, HealOutcome.KEY_TAKEN)
    first = present.index(False)
    if any(present[first:]):
        return _said(queue, HealOutcome.NOT_A_TAIL)
    tail = _Tail(tuple(segments[first:]))
    try:
        rng = await asyncio.to_thread(hot.queue_range, queue.topic, queue.queue_id)
    except TieredStoreError:
        return _said(queue, HealOutcome.HOT_LOST)
    if rng.min > tail.start or rng.max < tail.end:
        return _said(queue, HealOutcome.HOT_LOST)
    now = clock.now_ms()
    record = {
        "format": RETIERED_FORMAT,
        "topic": queue.topic,
        "queue_id": queue.queue_id,
        "lost_start_offset": tail.start,
        "lost_end_offset": tail.end,
        "lost_manifests": [s.manifest.key for s in tail.segments],
        "recorded_at_ms": now,
        "writer_id": writer_id,
        "lease_epoch": epoch,
    }
    check()
    key = retiered_key(queue_path, tail.start, stamp_ms=now)
    with contextlib.suppress(ConditionFailedError):  # recorded by a try this millisecond
        await backend.create(key, canonical(record))
    await asyncio.to_thread(catalogue.segments.truncate, queue.topic, queue.queue_id, tail.start)
    metrics.cold_ranges_retiered.labels(queue.topic, str(queue.queue_id)).inc()
    log.error(
        "queue %s: committed offsets [%d, %d) were lost from cold (%d manifests gone); "
        "the broker still holds them, so they are tiered again from hot under new "
        "names; the loss is recorded in cold",
        queue, tail.start, tail.end, len(tail.segments),
    )  # fmt: skip
    return HealOutcome.HEALED


def _said(queue: QueueKey, outcome: HealOutcome) -> HealOutcome:
    log.error("queue %s: its cold damage is not healed: %s", queue, outcome.value)
    return outcome
