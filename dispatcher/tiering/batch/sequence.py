"""A broker's batch keys taken under the lease: the next sequence, fences, withdrawals.

Every object at a batch key (``_batches/<name(sequence)>.batch``) is *created*
(create-if-absent) by a holder of the lease, at one past the highest sequence listed or
named by the catalogue's slice rows (``known``): a batch object deleted around
tieredstore while the catalogue names it (the damage its heal reports by key) never has
its sequence taken again, so the key a report names holds that batch or nothing. When the
key is taken already, what is there decides (:meth:`BatchKeys.taken`):

* exactly the bytes this writer created: its own create whose reply was lost (done);
* a batch or fence of a **newer** lease epoch: this writer is fenced
  (:class:`~tieredstore.errors.LeaseLostError`);
* anything else (another sequence taken meanwhile, by this epoch or an older one that
  got there first): list again and take the next sequence.

Users: the batch writer (:mod:`tieredstore.dispatcher.tiering.batch.writer`: its start fence and
each batch), every other takeover (:meth:`BatchKeys.fence_takeover`: ``gc`` and a sidecar
with batching off fence the sequence as the batch writer's start does), and the two
cuts of a queue's history while batch slices may lie past the cut,
``repair`` and the heal of a lost tail (:meth:`BatchKeys.fence` with ``withdrawn``: a
fence that also withdraws the queue's slices of lower sequences from the cut on,
:class:`~tieredstore.cold.batch.Withdrawn`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from tieredstore.backends.base import Backend
from tieredstore.backends.retry import RetryPolicy, retry_call
from tieredstore.clock import Clock
from tieredstore.cold.batch import BatchFence, BatchHead, Withdrawn
from tieredstore.cold.history import read_batch
from tieredstore.cold.layout import batch_prefix, parse_batch_key
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.errors import (
    ConditionFailedError,
    LeaseLostError,
    StoreError,
    TieredStoreError,
)

__all__ = ["MAX_RESEQUENCE", "BatchKeys"]

log = logging.getLogger(__name__)

#: How many times a create moves to a later sequence before it gives up.
MAX_RESEQUENCE: Final = 4


class BatchKeys:
    """Creates objects at one broker's batch keys (module docstring)."""

    def __init__(
        self,
        *,
        backend: Backend,
        lease: Lease,
        clock: Clock,
        retry: RetryPolicy,
        cluster: str,
        broker: str,
        known: Callable[[], Iterable[str]] = frozenset,
    ) -> None:
        self.backend = backend
        self.lease = lease
        self.clock = clock
        self.retry = retry
        self.cluster = cluster
        self.broker = broker
        self.prefix = batch_prefix(cluster, broker) + "/"
        self.known = known  # batch keys the catalogue names (blocking: run in a thread)

    async def listed_next(self) -> int:
        """One past the highest sequence listed under ``_batches/`` or among the
        ``known`` keys (0 if none)."""
        listed = [info.key for info in await self.backend.list(self.prefix)]
        known = await asyncio.to_thread(lambda: list(self.known()))
        sequences = [parse_batch_key(key, self.prefix) for key in (*listed, *known)]
        return max((s for s in sequences if s is not None), default=-1) + 1

    async def fence(self, withdrawn: Sequence[Withdrawn] = ()) -> BatchFence:
        """Create a fence at the next free sequence (withdrawing ``withdrawn``, sorted
        here); return it. Raises LeaseLostError if a newer writer fenced this one."""
        ordered = tuple(sorted(withdrawn, key=lambda w: (w.topic, w.queue_id)))
        for _ in range(MAX_RESEQUENCE):
            fence = BatchFence(
                cluster=self.cluster, broker=self.broker, sequence=await self.listed_next(),
                lease_epoch=self.lease.epoch, writer_id=self.lease.owner,
                created_at_ms=self.clock.now_ms(), withdrawn=ordered,
            )  # fmt: skip
            data = fence.to_json()
            try:
                await self.create(fence.key, data)
            except ConditionFailedError:
                if not await self.taken(fence.key, data):
                    continue  # another batch landed there first: fence above it
            log.info("%s", fence.describe())
            return fence
        raise StoreError(
            f"batch keys kept being taken while fencing ({MAX_RESEQUENCE} tries)",
            where=self.prefix,
        )

    async def fence_takeover(self) -> BatchFence | None:
        """Fence the batch sequence for a holder that takes the lease without committing
        batches itself (``gc``, a sidecar with batching off): a writer of an older epoch
        frozen inside its batch create then finds its key taken by this fence (or lands
        below it, listed before it). None when nothing is listed under ``_batches/``: no
        writer can be inside a batch create then, as each fences its start first.
        Raises LeaseLostError if a newer writer fenced this one."""
        if await self.listed_next() == 0:
            return None
        return await self.fence()

    async def create(self, key: str, data: bytes) -> None:
        """Create ``data`` at ``key`` under the lease (retried per the policy).

        Raises:
            ConditionFailedError: the key is taken (see :meth:`taken`).
            LeaseLostError: the lease is lost.
        """

        async def create() -> str:
            self.lease.check()
            return await self.backend.create(key, data)

        await retry_call("batch create", create, self.retry, sleep=self.clock.sleep)

    async def taken(self, key: str, data: bytes) -> bool:
        """``key`` was taken when this writer created ``data`` there: True if it holds
        exactly ``data`` (ours, a retry after a lost reply); raises LeaseLostError if a
        newer epoch holds it; False otherwise (another sequence must be taken)."""
        try:
            stored = await self.backend.read(key)
        except TieredStoreError as exc:
            raise StoreError(f"batch key taken but unreadable: {exc}", where=key) from exc
        if stored == data:
            return True
        found = await read_batch(self.backend, key, len(stored))
        epoch = found.lease_epoch if isinstance(found, BatchFence) else None
        if isinstance(found, BatchHead):
            epoch = found.index.lease_epoch
        if epoch is not None and epoch > self.lease.epoch:
            fenced = LeaseLostError(
                f"fenced: epoch {epoch} holds batch key first (this writer is epoch "
                f"{self.lease.epoch})",
                where=key,
            )
            log.error("%s; this writer stops", fenced)
            raise fenced
        return False
