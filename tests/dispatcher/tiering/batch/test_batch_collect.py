"""The batch delete: a batch object goes only when unreferenced, covered by segments with
the same bytes and older than the grace; the highest sequence only once a fence is above
it; lease checked first. With batching turned off, what it left is still collected.

Stores as in test_compaction.py (the ``batched`` fixture: batches 10-13, real runtime,
memory backend, virtual time).
"""

from __future__ import annotations

import asyncio

import pytest

from tests.dispatcher.tiering.conftest import Batched, OpenBatched
from tests.support.sidecar.settings import BROKER, CLUSTER, put_in_force
from tests.support.stores.batches import upload_batch
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tests.support.stores.segments import T0, WRITER, chain
from tieredstore.clock import VirtualClock
from tieredstore.cold.batch import BatchFence, SlicePart, build_batch
from tieredstore.cold.history import Committed, read_batch, span_bytes
from tieredstore.cold.layout import QueuePath, batch_key
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.dispatcher.tiering.batch.collect import (
    MIN_GRACE_MS,
    BatchCollection,
    collect_batches,
)
from tieredstore.dispatcher.tiering.batch.compaction import Compactor
from tieredstore.errors import LeaseLostError

#: When the fixture's batches were made (``tests.support.stores.batches.batch_of``).
CREATED = T0 + 60_000
GRACE = MIN_GRACE_MS
OLD = CREATED + GRACE


async def _collect(b: Batched, now_ms: int) -> BatchCollection:
    rt = b.rt
    return await collect_batches(rt.compactor.keys, rt.catalogue, now_ms=now_ms, grace_ms=GRACE)


async def _compact_all(b: Batched, per_slice: bool = False) -> Compactor:
    """Compact every slice (``compact_after`` 1 min; the batches stay inside the grace,
    10 min): one segment per slice or one per queue."""
    compactor = b.rt.compactor
    size = 1 if per_slice else 1 << 20
    put_in_force(b.rt.in_force, tiering__segment_max_bytes=size, tiering__compact_after=60.0)
    b.clock.set_ms(CREATED + 60_000)
    while (await compactor.run_pass()).queues:
        assert b.clock.now_ms() < OLD  # young: nothing deleted yet
    assert not b.rt.catalogue.slices.referenced_batches()
    return compactor


async def _exists(b: Batched, keys: list[str]) -> list[bool]:
    return [await b.rt.backend.exists(k) for k in keys]


async def test_a_referenced_batch_is_kept(batched: OpenBatched) -> None:
    async with batched("SSS", first_sequence=10) as b:
        assert await _collect(b, OLD * 2) == BatchCollection(left=3)
        assert await _exists(b, b.batches) == [True] * 3


async def test_every_rule_holding_deletes_every_batch_the_highest_under_a_fence(
    batched: OpenBatched,
) -> None:
    async with batched("SSSS", first_sequence=10) as b:
        await _compact_all(b)
        assert await _collect(b, OLD - 1) == BatchCollection(left=4)  # inside the grace
        got = await _collect(b, OLD)  # exactly the grace: old enough
        assert got == BatchCollection(tuple(b.batches))
        assert await _exists(b, b.batches) == [False] * 4
        # The highest went only after a fence of this writer landed above it: the next
        # sequence a writer lists is still past every batch there ever was.
        key = batch_key(CLUSTER, BROKER, 14)
        fence = await read_batch(b.rt.backend, key, await b.rt.backend.size(key))
        assert isinstance(fence, BatchFence) and fence.lease_epoch == b.rt.compactor.lease.epoch
        assert await b.rt.compactor.keys.listed_next() == 15
        assert await _collect(b, OLD * 2) == BatchCollection()  # fences stay, nothing left
        await assert_cold_matches_hot(b.rt.backend, b.rt.hot, CLUSTER, BROKER)


async def test_batching_turned_off_still_collects_what_it_left_then_stops(
    batched: OpenBatched,
) -> None:
    async with batched("SS", first_sequence=10) as b:
        compactor = await _compact_all(b)
        put_in_force(b.rt.in_force, tiering__batching=False)
        b.clock.set_ms(OLD)
        report = await compactor.run_if_needed()  # no slice row left, batches still there
        assert report is not None and set(report.batches_deleted) == set(b.batches)
        assert await _exists(b, b.batches) == [False, False]
        assert not compactor.batches_left
        assert await compactor.run_if_needed() is None  # nothing left: no more passes
        await assert_cold_matches_hot(b.rt.backend, b.rt.hot, CLUSTER, BROKER)


async def _fake(b: Batched, link: Committed, *, sequence: int, flip: int | None) -> str:
    """A batch at ``sequence`` holding ``link``'s offsets and bytes (one byte flipped at
    ``flip`` of its commit log), which no catalogue row names."""
    cl = bytearray(await span_bytes(b.rt.backend, link.commit_log))
    if flip is not None:
        cl[flip] ^= 0x01
    part = SlicePart(
        link.topic, link.queue_id, link.start_offset, link.end_offset, link.cl_base,
        bytes(cl), await span_bytes(b.rt.backend, link.consume_queue),
        link.min_store_timestamp, link.max_store_timestamp,
    )  # fmt: skip
    index, data = build_batch(
        cluster=CLUSTER, broker=BROKER, sequence=sequence, writer_id=WRITER, lease_epoch=1,
        created_at_ms=CREATED, parts=[part],
    )  # fmt: skip
    await b.rt.backend.create(index.key, data)
    return index.key


@pytest.mark.parametrize("per_slice", [False, True], ids=["merged", "same-boundaries"])
async def test_a_covering_segment_with_other_bytes_keeps_the_batch(
    batched: OpenBatched, per_slice: bool
) -> None:
    async with batched("SSS", first_sequence=10) as b:
        await _compact_all(b, per_slice=per_slice)
        link = b.slices[0][1]
        differs = await _fake(b, link, sequence=1, flip=link.commit_log.size // 2)
        same = await _fake(b, link, sequence=2, flip=None)
        got = await _collect(b, OLD)
        assert got.deleted == (same, *b.batches)
        assert got.left == 1  # the batch with other bytes stays (and is said each pass)
        assert len(got.problems) == 1
        assert differs in got.problems[0] and "other bytes" in got.problems[0]
        assert await b.rt.backend.exists(differs)


async def test_a_slice_no_segment_holds_keeps_the_batch(batched: OpenBatched) -> None:
    async with batched("SS", first_sequence=10) as b:
        await _compact_all(b)
        stray = chain(QueuePath(CLUSTER, BROKER, "NeverTiered", 0), [3])
        key = await upload_batch(b.rt.backend, stray, sequence=3)
        got = await _collect(b, OLD)
        assert got.deleted == tuple(b.batches) and got.left == 1
        assert len(got.problems) == 1
        assert key in got.problems[0] and "in no committed segment" in got.problems[0]
        assert await b.rt.backend.exists(key)


async def test_fences_are_never_deleted_nor_a_corrupt_head(
    batched: OpenBatched,
) -> None:
    async with batched("SS", first_sequence=10) as b:
        await _compact_all(b)
        backend = b.rt.backend
        old = BatchFence(CLUSTER, BROKER, 1, lease_epoch=1, writer_id="w", created_at_ms=CREATED)
        young = BatchFence(CLUSTER, BROKER, 2, lease_epoch=1, writer_id="w", created_at_ms=OLD)
        for fence in (old, young):
            await backend.create(fence.key, fence.to_json())
        corrupt = batch_key(CLUSTER, BROKER, 3)
        await backend.create(corrupt, b"TSBATCH\x01 not an index")
        top = BatchFence(CLUSTER, BROKER, 20, lease_epoch=1, writer_id="w", created_at_ms=0)
        await backend.create(top.key, top.to_json())  # the highest, however old
        got = await _collect(b, OLD)
        assert set(got.deleted) == set(b.batches)
        assert len(got.problems) == 1 and corrupt in got.problems[0]
        assert "does not parse" in got.problems[0]
        assert await _exists(b, [old.key, young.key, corrupt, top.key]) == [True] * 4


async def _take_over(lease: Lease, clock: VirtualClock) -> None:
    """Another writer watches ``lease``'s record (nobody renews it) and takes over once
    it stayed unchanged for the lease time; time moves only while the successor sleeps."""
    successor = Lease(lease.backend, lease.key, clock)
    acquiring = asyncio.create_task(successor.acquire(wait=False))
    while not acquiring.done():
        await clock.parked_or_done(acquiring)
        if not acquiring.done():
            await clock.advance(1)
    await acquiring


async def test_a_lost_lease_deletes_nothing(batched: OpenBatched) -> None:
    async with batched("SSS", first_sequence=10) as b:
        lease = (await _compact_all(b)).lease
        b.clock.set_ms(OLD)
        await asyncio.wait_for(_take_over(lease, b.clock), 30)
        with pytest.raises(LeaseLostError):
            await _collect(b, b.clock.now_ms())
        assert await _exists(b, b.batches) == [True] * 3
