"""The batch commit: one round's small segments in ONE object, under the lease.

With ``tiering.batching`` on, a catch-up of many small queues writes one batch object
(after the start's batch fence) and no per-queue object; the catalogue records every
slice; cold covers hot exactly. Segments cut by size stay per queue. A successor's fence
stops a stale writer's batch; a create whose reply was lost is recognised as our own; a
catalogue that missed a batch adopts it on the next start.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tests.support.stores.divergence import SPEC as DIVERGING
from tests.support.stores.divergence import TOPIC, rewrite_tail
from tieredstore.backends import open_backend
from tieredstore.backends.base import Backend
from tieredstore.backends.forwarding import ForwardingBackend
from tieredstore.backends.memory import reset_memory_stores
from tieredstore.cli.sidecar.runtime import Runtime, open_runtime
from tieredstore.cold.batch import BATCH_MAGIC, BatchFence, BatchHead
from tieredstore.cold.history import EntryKind, load_history, read_batch
from tieredstore.cold.layout import batch_prefix, broker_prefix, parse_batch_key
from tieredstore.errors import BackendUnavailableError, LeaseLostError
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize
from tieredstore.metadata.rows import QueueState

SPEC = SynthSpec(topics=6, queues=4, messages=1200, body_min=20, body_max=400, seed=21)
PREFIX = batch_prefix(CLUSTER, BROKER) + "/"


@asynccontextmanager
async def sidecar(
    store: Path, cold: str, state: Path, backend: Backend | None = None, **kw: object
) -> AsyncIterator[Runtime]:
    settings = settings_for(store, cold, state, tiering__guard="none", **kw)
    async with open_runtime(settings, backend=backend) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        yield rt


async def batches(backend: Backend) -> dict[int, BatchHead | BatchFence | None]:
    """Every object under ``_batches/``, by sequence, parsed."""
    out: dict[int, BatchHead | BatchFence | None] = {}
    for info in await backend.list(PREFIX):
        sequence = parse_batch_key(info.key, PREFIX)
        assert sequence is not None, info.key
        out[sequence] = await read_batch(backend, info.key, info.size)
    return out


async def manifests(backend: Backend) -> list[str]:
    listed = await backend.list(broker_prefix(CLUSTER, BROKER) + "/")
    return [i.key for i in listed if "/MANIFEST/" in i.key]


async def test_small_queues_share_one_batch_object(store: Path, tmp_path: Path) -> None:
    reset_memory_stores()
    cold = "memory://batch-one"
    async with sidecar(store, cold, tmp_path / "state", tiering__batching=True) as rt:
        report = await rt.dispatcher.catch_up()
        assert not report.errors
        assert report.messages == SPEC.messages
        assert rt.metrics.registry.get_sample_value("tieredstore_batches_committed_total") == 1
        rows = {(q.topic, q.queue_id): q for q in rt.catalogue.queues.all()}
        slices = rt.metrics.registry.get_sample_value("tieredstore_slices_tiered_total")
        assert report.slices == slices == len(rows) and report.segments == 0
        sliced = {k: rt.catalogue.slices.of(*k) for k in rows}
    async with open_backend(cold) as backend:
        found = await batches(backend)
        assert [type(v) for _, v in sorted(found.items())] == [BatchFence, BatchHead]
        head = found[1]
        assert isinstance(head, BatchHead)
        assert len(head.index.slices) == len(rows) == SPEC.topics * SPEC.queues
        assert await manifests(backend) == []  # not one per-queue object
        cold_view = await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)
    for key, links in sliced.items():
        assert [link.kind for link in links] == [EntryKind.SLICE]
        assert links[0].end_offset == rows[key].cold_commit
        assert cold_view[next(q for q in cold_view if (q.topic, q.queue_id) == key)].end == (
            rows[key].cold_commit
        )
    async with sidecar(store, cold, tmp_path / "state", tiering__batching=True) as rt:
        assert (await rt.dispatcher.catch_up()).messages == 0  # nothing twice
    async with open_backend(cold) as backend:
        again = await batches(backend)
        assert len(again) == 3 and isinstance(again[2], BatchFence)  # the restart's fence
    SyntheticStore.open(store).append(240)  # the next batch continues each queue's slice
    async with sidecar(store, cold, tmp_path / "state", tiering__batching=True) as rt:
        assert (await rt.dispatcher.catch_up()).messages == 240
    async with open_backend(cold) as backend:
        assert sorted(await batches(backend)) == [0, 1, 2, 3, 4]
        cold_view = await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)
        assert {len(q.manifests) for q in cold_view.values()} <= {1, 2}


async def test_batching_off_writes_no_batch_object(store: Path, tmp_path: Path) -> None:
    reset_memory_stores()
    # Off explicitly: this test is about the setting being off (TS_TEST_BATCHING turns it on).
    async with sidecar(
        store, "memory://batch-off", tmp_path / "state", tiering__batching=False
    ) as rt:
        assert (await rt.dispatcher.catch_up()).messages == SPEC.messages
    async with open_backend("memory://batch-off") as backend:
        assert await backend.list(PREFIX) == []
        assert len(await manifests(backend)) == SPEC.topics * SPEC.queues


async def test_full_segments_stay_per_queue_and_the_rest_is_batched(
    store: Path, tmp_path: Path
) -> None:
    cold = str(tmp_path / "cold")
    async with sidecar(
        store, cold, tmp_path / "state", tiering__batching=True, tiering__segment_max_messages=20
    ) as rt:
        assert not (await rt.dispatcher.catch_up()).errors
    async with open_backend(cold) as backend:
        assert await manifests(backend)  # the full segments (cut by count)
        history = await load_history(backend, CLUSTER, BROKER)
        kinds = {link.kind for link in history.links()}
        assert kinds == {EntryKind.SEGMENT, EntryKind.SLICE}
        for h in history.queues.values():  # full segments, then the batched remainder
            *full, tail = h.links
            assert all(f.kind is EntryKind.SEGMENT and f.message_count == 20 for f in full)
            assert tail.message_count == 20 or tail.kind is EntryKind.SLICE
        await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)


async def test_a_successors_fence_stops_a_stale_writers_batch(store: Path, tmp_path: Path) -> None:
    """The stale writer's next batch key holds a fence of a newer epoch (a successor took
    the lease and fenced): the batch create fails, the writer stops, nothing of the
    batch is committed in cold or in the catalogue."""
    reset_memory_stores()
    cold = "memory://batch-fenced"
    async with sidecar(store, cold, tmp_path / "state", tiering__batching=True) as rt:
        lease = rt.dispatcher.lease
        fence = BatchFence(
            cluster=CLUSTER, broker=BROKER, sequence=1, lease_epoch=lease.epoch + 1,
            writer_id="successor", created_at_ms=1,
        )  # fmt: skip
        async with open_backend(cold) as backend:
            await backend.create(fence.key, fence.to_json())
        with pytest.raises(LeaseLostError, match="fenced: epoch 2"):
            await rt.dispatcher.catch_up()
        assert all(q.cold_commit == q.init_offset for q in rt.catalogue.queues.all())
    async with open_backend(cold) as backend:
        found = await batches(backend)
        assert sorted(found) == [0, 1]
        assert all(isinstance(v, BatchFence) for v in found.values())


class LostReply(ForwardingBackend):
    """The first batch create lands, but its reply is lost (a transient error)."""

    lost = 0

    async def create(self, key: str, data: bytes) -> str:
        version = await self.inner.create(key, data)
        if data.startswith(BATCH_MAGIC) and not self.lost:
            self.lost += 1
            raise BackendUnavailableError("reply lost", where=key)
        return version


async def test_a_create_whose_reply_was_lost_is_our_own_batch(store: Path, tmp_path: Path) -> None:
    reset_memory_stores()
    cold = "memory://batch-lost-reply"
    async with open_backend(cold) as inner:
        backend = LostReply(inner)
        async with sidecar(store, cold, tmp_path / "state", backend, tiering__batching=True) as rt:
            report = await rt.dispatcher.catch_up()
            assert not report.errors and report.messages == SPEC.messages
        assert backend.lost == 1
        found = await batches(inner)
        assert [type(v) for _, v in sorted(found.items())] == [BatchFence, BatchHead]
        await assert_cold_matches_hot(inner, HotStore(store), CLUSTER, BROKER)


async def test_a_catalogue_that_missed_a_batch_adopts_it_on_start(
    store: Path, tmp_path: Path
) -> None:
    """The crash between the batch create and the catalogue commit: the catalogue of
    before the batch, the batch in cold. The next start adopts every slice; nothing is
    tiered twice."""
    cold = str(tmp_path / "cold")
    state = tmp_path / "state"
    async with sidecar(store, cold, state, tiering__batching=True):
        pass  # the catalogue knows every queue, nothing tiered
    shutil.copytree(state, tmp_path / "before")
    async with sidecar(store, cold, state, tiering__batching=True) as rt:
        assert (await rt.dispatcher.catch_up()).messages == SPEC.messages
        committed = {(q.topic, q.queue_id): q.cold_commit for q in rt.catalogue.queues.all()}
    shutil.rmtree(state)
    shutil.copytree(tmp_path / "before", state)
    async with sidecar(store, cold, state, tiering__batching=True) as rt:
        after = {(q.topic, q.queue_id): q.cold_commit for q in rt.catalogue.queues.all()}
        assert after == committed
        assert (await rt.dispatcher.catch_up()).messages == 0
    async with open_backend(cold) as backend:
        heads = [v for v in (await batches(backend)).values() if isinstance(v, BatchHead)]
        assert len(heads) == 1
        await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)


async def test_continuity_costs_no_read_while_running_and_one_per_queue_after_a_restart(
    store: Path, tmp_path: Path
) -> None:
    reset_memory_stores()
    cold = "memory://batch-continuity"
    queues = SPEC.topics * SPEC.queues
    async with sidecar(store, cold, tmp_path / "state", tiering__batching=True) as rt:
        await rt.dispatcher.catch_up()
        SyntheticStore.open(store).append(queues * 5)
        assert (await rt.dispatcher.catch_up()).messages == queues * 5
        assert rt.dispatcher.writer.continuity.reads == 0  # every tail remembered
    SyntheticStore.open(store).append(queues * 5)
    async with sidecar(store, cold, tmp_path / "state", tiering__batching=True) as rt:
        assert (await rt.dispatcher.catch_up()).messages == queues * 5
        assert rt.dispatcher.writer.continuity.reads == queues  # each tail read once
    async with open_backend(cold) as backend:
        await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)


async def test_a_broker_that_rewrote_batched_offsets_diverges(tmp_path: Path) -> None:
    """The broker lost its tail after it was tiered into batch slices and wrote those
    offsets again: the next commit finds the hot record below the cold commit offset
    differs from the slice's, and the queue turns DIVERGED (cold untouched)."""
    store, cold, state = tmp_path / "store", str(tmp_path / "cold"), tmp_path / "state"
    synthesize(store, DIVERGING)
    async with sidecar(
        store, cold, state, tiering__segment_max_bytes="24K", tiering__batching=True
    ) as rt:
        assert (await rt.dispatcher.catch_up()).messages == DIVERGING.messages
        assert all(rt.catalogue.slices.of(TOPIC, q) for q in range(DIVERGING.queues))
    rewrite_tail(store)
    async with sidecar(
        store, cold, state, tiering__segment_max_bytes="24K", tiering__batching=True
    ) as rt:
        report = await rt.dispatcher.catch_up()
        assert sorted(str(q) for q in report.diverged) == [f"{TOPIC}/0", f"{TOPIC}/1"]
        assert {q.state for q in rt.catalogue.queues.all()} == {QueueState.DIVERGED}
