"""Repair of a queue whose diverged tail lies in batch slices: a batch is shared by many
queues and never rewritten, so repair withdraws the queue's slices past the cut with one
batch fence, after copying them to the quarantine; no reader reads them again, the queue
is tiered again from hot, the Spark verifier says CLEAN at content level (the withdrawn
copies, which disagree with the new ones, are not compared), and once compaction is done
the batch collector deletes the batches that held them."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.fixtures_sidecar import Diverge, RepairQueue
from tests.support.sidecar.settings import BROKER, CLUSTER, put_in_force
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tests.support.stores.divergence import TOPIC, divergence_settings
from tieredstore.backends.base import Backend
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.cold.batch import BatchFence, Withdrawn
from tieredstore.cold.history import EntryKind, load_history, read_batch, span_bytes
from tieredstore.cold.layout import QueuePath, batch_prefix, broker_prefix
from tieredstore.cold.reader import ColdReader
from tieredstore.dispatcher.maintenance.repair import execute_repair, plan_repair
from tieredstore.dispatcher.tiering.batch.collect import MIN_GRACE_MS, collect_batches
from tieredstore.hot.store import HotStore
from tieredstore.verifier.job import verify
from tieredstore.verifier.vocabulary import Level, Verdict, VerifyOptions

pytestmark = [pytest.mark.slow, pytest.mark.spark]


async def _fences(backend: Backend, prefix: str) -> list[BatchFence]:
    """The batch fences under ``prefix`` that withdraw slices."""
    out = []
    for info in await backend.list(prefix + "/"):
        found = await read_batch(backend, info.key, info.size)
        if isinstance(found, BatchFence) and found.withdrawn:
            out.append(found)
    return out


async def _quarantined(backend: Backend) -> set[bytes]:
    """The bytes of every object under the broker's quarantine."""
    prefix = f"{broker_prefix(CLUSTER, BROKER)}/_quarantine/"
    return {await backend.read(info.key) for info in await backend.list(prefix)}


async def test_repair_withdraws_the_slices_past_the_cut_and_every_reader_agrees(
    tmp_path: Path,
    diverge: Diverge,
    repair_queue: RepairQueue,
    spark: SparkSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TS_TEST_BATCHING", "1")
    await diverge(tmp_path)  # tiered with batching on, then the broker re-wrote its tail
    q0 = QueuePath(CLUSTER, BROKER, TOPIC, 0)
    async with open_runtime(divergence_settings(tmp_path)) as rt:
        assert rt.settings.tiering.batching
        before = (await load_history(rt.backend, CLUSTER, BROKER)).queues[q0]
        plan = await plan_repair(
            hot=rt.hot, backend=rt.backend, catalogue=rt.catalogue, topic=TOPIC, queue_id=0
        )
        sliced = [c for c in before.links if c.kind is EntryKind.SLICE and c.end_offset > plan.cut]
        past = {c.key for c in sliced}
        assert past, "the diverged tail must lie (at least partly) in batch slices"
        evidence = [await span_bytes(rt.backend, c.commit_log) for c in sliced]
        assert plan.withdraws
        assert f"withdraw the batch slices at or after offset {plan.cut}" in "\n".join(
            plan.describe()
        )
        await repair_queue(rt, 0)  # starts the sidecar (lease) and repairs queue 0
        other = await plan_repair(
            hot=rt.hot, backend=rt.backend, catalogue=rt.catalogue, topic=TOPIC, queue_id=1
        )
        await execute_repair(
            other, backend=rt.backend, catalogue=rt.catalogue,
            keys=rt.dispatcher.rounds.batcher.keys, clock=rt.dispatcher.clock,
        )  # fmt: skip
        fences = await _fences(rt.backend, batch_prefix(CLUSTER, BROKER))
        assert Withdrawn(TOPIC, 0, plan.cut) in {w for f in fences for w in f.withdrawn}
        after = (await load_history(rt.backend, CLUSTER, BROKER)).queues[q0]
        assert after.commit == plan.cut  # nothing past the cut is read any more...
        assert {c.key for c in after.withdrawn} == past
        quarantined = await _quarantined(rt.backend)
        for data in evidence:  # ...and every withdrawn slice's bytes are kept, copied
            assert data in quarantined
        reader = ColdReader(rt.backend, CLUSTER, BROKER)
        assert (await reader.range(TOPIC, 0)).commit == plan.cut
        # Tiered again from hot: cold covers hot exactly, read through the one rule.
        tick = await rt.dispatcher.catch_up()
        assert not tick.diverged and tick.messages > 0
        await assert_cold_matches_hot(rt.backend, rt.hot, CLUSTER, BROKER)
        assert (await load_history(rt.backend, CLUSTER, BROKER)).queues[q0].withdrawn
        # Once everything is compacted, the batches that held the withdrawn slices go too
        # (their bytes are in the quarantine), and cold still covers hot exactly.
        put_in_force(rt.in_force, tiering__compact_after=1e-6)
        while any(rt.catalogue.slices.of(TOPIC, q) for q in (0, 1)):
            assert not (await rt.compactor.run_pass()).problems
        collected = await collect_batches(
            rt.compactor.keys, rt.catalogue,
            now_ms=rt.dispatcher.clock.now_ms() + MIN_GRACE_MS, grace_ms=MIN_GRACE_MS,
        )  # fmt: skip
        assert not collected.problems
        batch_keys = {key.partition("#")[0] for key in past}
        assert batch_keys <= set(collected.deleted)
        await assert_cold_matches_hot(rt.backend, rt.hot, CLUSTER, BROKER)
    store = tmp_path / "store"
    result = await asyncio.to_thread(
        verify,
        spark,
        VerifyOptions(
            hot=store, cold_url=str(tmp_path / "cold"), cluster=CLUSTER, broker=BROKER,
            now_ms=time.time_ns() // 1_000_000, level=Level.CONTENT,
        ),
    )  # fmt: skip
    assert result.verdict is Verdict.CLEAN, [str(a) for a in result.anomalies][:10]
    assert HotStore(store).queue_range(TOPIC, 0).max > plan.cut
