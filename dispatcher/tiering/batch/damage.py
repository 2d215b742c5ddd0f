"""A damaged batch object found by the tick that reads it: loud per queue, and healed.

A batch object holds slices of many queues (:mod:`tieredstore.cold.batch`). When a read
a tick needs finds it missing, of another size than committed, with a head that does
not parse, or a slice whose bytes do not check (the continuity check,
:mod:`tieredstore.dispatcher.tiering.continuity`, raises
:class:`~tieredstore.errors.DamagedObjectError` naming its key), that is damage to
every queue whose slice it held, not a store that does not answer and not a divergence
of the one queue whose read found it. :func:`handle_damage` then, for each such queue
(the catalogue's slice rows of the batch,
:meth:`~tieredstore.metadata.slice_table.SliceTable.in_batch`):

* makes it loud as reconcile's damage at start is
  (:func:`~tieredstore.dispatcher.tiering.cold_writer.report_batch_damage`): one ERROR line naming
  the batch key and the queue's offsets in it, ``tieredstore_queue_cold_damaged`` (the
  alert ``TieredstoreColdDamaged``), and the queue DEGRADED in ``status`` with that note
  for the rest of the process;
* heals it as a lost tail (:func:`~tieredstore.dispatcher.tiering.cold_writer.heal_lost_tail`):
  a ``_retiered`` record naming the batch, the queue's slices from the lost one on
  withdrawn by one batch fence, the catalogue truncated there, and the offsets the
  broker still holds tiered again from hot by the next tick, under new keys.

The other queues of the round go on; the healed ones start again from their truncated
row on the next tick. A queue whose lost tail cannot be healed (the broker no longer
holds those offsets, or the catalogue refused the truncation) would have the same batch
read and reported again by every tick: it is STOPPED instead, with one ERROR line, until
the sidecar restarts (whose reconcile finds the damage again, once). The same batch
found again (another queue's read in the same round) is handled once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from tieredstore.dispatcher.metrics import Metrics
from tieredstore.dispatcher.shared_state import Damaged, SharedState
from tieredstore.dispatcher.tiering.batch.sequence import BatchKeys
from tieredstore.dispatcher.tiering.cold_writer import ColdWriter, heal_damaged, report_batch_damage
from tieredstore.errors import DamagedObjectError
from tieredstore.findings import FindingKind
from tieredstore.hot.store import QueueKey
from tieredstore.metadata.rows import QueueState

__all__ = ["handle_damage"]

log = logging.getLogger(__name__)


async def handle_damage(
    found: Sequence[DamagedObjectError],
    *,
    writer: ColdWriter,
    keys: BatchKeys,
    states: SharedState,
    metrics: Metrics,
) -> set[QueueKey]:
    """Make the damaged batch objects ``found`` loud for every queue each held, and heal
    those queues (module docstring); return the queues it touched (their rows are stale
    now: the caller drops them until the next tick). Takes the lock of catalogue writes.
    Backend errors of the heal propagate (the damage is found again next tick)."""
    damaged: Damaged = {}
    batches: set[str] = set()
    async with states.lock:
        for exc in found:
            metrics.errors.labels(type(exc).__name__).inc()
            if exc.key in batches:
                continue
            batches.add(exc.key)
            held = await asyncio.to_thread(writer.catalogue.slices.in_batch, exc.key)
            if not held:  # compacted or withdrawn meanwhile: no queue reads it any more
                log.error("cold damage (no queue): %s; no catalogue slice names it", exc)
                continue
            kind = FindingKind(exc.damage.value)
            report_batch_damage(exc.key, kind, exc.message, held, metrics, damaged)
        kept = await heal_damaged(
            damaged, writer=writer, hot=writer.hot, metrics=metrics,
            keys=keys, lost_batches=batches,
        )  # fmt: skip
    states.damaged.update(damaged)  # the newest damage of a queue is its note
    for queue in sorted(kept):  # each tick would read the same damage again: stop
        log.error(
            "queue %s STOPPED: its damaged tail cannot be healed (%s); nothing more is "
            "tiered for it until the sidecar restarts: restore the batch object from a "
            "bucket version or backup, then restart",
            queue, damaged[queue],
        )  # fmt: skip
        states.stop_queue(queue, f"{damaged[queue]}; stopped until a restart")
        metrics.set_queue_state(queue.topic, queue.queue_id, QueueState.STOPPED)
    states.save()  # `status` shows them DEGRADED, or STOPPED
    return set(damaged)
