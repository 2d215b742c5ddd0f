"""A stale state directory never deletes or quarantines another writer's segments.

Sidecar A (state dir SA) tiers a queue. The broker loses its tail and comes back with
other messages at the same offsets; sidecar B (SB, a copy of SA) finds the queue
DIVERGED, repairs it and re-tiers from the cut. Then ``expire``, ``repair`` and ``gc``
run with A's old state directory. B's fresh segments must survive each, byte for byte:

* ``expire`` (SA): its start reconciles by content — the catalogue is truncated where
  cold holds B's manifests instead of A's and follows cold from there — and each
  deletion first checks that the manifest key still holds the manifest decided about;
* ``repair`` (a DIVERGED copy of SA, planned without any reconcile): the catalogue's
  moves find B's manifests at their keys and are skipped; B's manifests the catalogue
  never knew agree with the hot store and are kept;
* ``gc --grace 0`` (SA): nothing a manifest names is garbage.

On the old code ``expire`` deleted B's manifests (judging them by A's cached
timestamps) and ``repair`` quarantined them.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER, location_args, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.cli.main import main
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.dispatcher.maintenance.repair import execute_repair, plan_repair
from tieredstore.dispatcher.maintenance.retention import delete_segment
from tieredstore.errors import CatalogueError
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize
from tieredstore.metadata.rows import QueueState
from tieredstore.settings.loader import Settings

T0 = 1_800_000_000_000
LATER = T0 + 10_000_000
SPEC = SynthSpec(
    topics=1, queues=1, messages=600, body_min=100, body_max=500, start_time=T0,
    interval_ms=1, seed=5, commitlog_file_size=64 << 10,
)  # fmt: skip
KEPT = 450
TOPIC = "SynthTopic0"


def _settings(tmp_path: Path, state: str) -> Settings:
    return settings_for(
        tmp_path / "store", str(tmp_path / "cold"), tmp_path / state,
        tiering__segment_max_bytes="24K", tiering__guard="none",
    )  # fmt: skip


def _manifests(cold: Path) -> dict[str, bytes]:
    return {
        p.relative_to(cold).as_posix(): p.read_bytes()
        for p in sorted(cold.rglob("MANIFEST/*.json"))
        if "_quarantine" not in p.parts
    }


async def _tier_diverge_repair(tmp_path: Path) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """A tiers; the broker re-writes its tail; B (a copy of A's state) repairs and
    re-tiers. Returns the manifests as A left them and B's fresh ones."""
    store = tmp_path / "store"
    synthesize(store, SPEC)
    async with open_runtime(_settings(tmp_path, "sa")) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.catch_up()
    by_a = _manifests(tmp_path / "cold")
    shutil.copytree(tmp_path / "sa", tmp_path / "sb")
    shutil.rmtree(store)
    synthesize(store, replace(SPEC, messages=KEPT))
    SyntheticStore.open(store).append(SPEC.messages - KEPT + 100, store_time=LATER)
    async with open_runtime(_settings(tmp_path, "sb")) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        assert (await rt.dispatcher.catch_up()).diverged
        plan = await plan_repair(
            hot=rt.hot, backend=rt.backend, catalogue=rt.catalogue, topic=TOPIC, queue_id=0
        )
        await execute_repair(
            plan, backend=rt.backend, catalogue=rt.catalogue,
            keys=rt.dispatcher.rounds.batcher.keys, clock=rt.dispatcher.clock,
        )  # fmt: skip
        await rt.dispatcher.catch_up()
    now = _manifests(tmp_path / "cold")
    fresh = {k: v for k, v in now.items() if by_a.get(k) != v}
    assert len(fresh) >= 3, "B re-tiered several segments"
    assert any(k in by_a for k in fresh), "some of B's segments sit at A's start offsets"
    return by_a, fresh


def _assert_survive(tmp_path: Path, fresh: dict[str, bytes]) -> None:
    now = _manifests(tmp_path / "cold")
    for key, data in fresh.items():
        assert now.get(key) == data, f"B's segment {key} was deleted or replaced"


@pytest.mark.slow
async def test_expire_repair_and_gc_from_a_stale_state_dir_leave_b_s_segments(
    tmp_path: Path,
) -> None:
    _, fresh = await _tier_diverge_repair(tmp_path)
    shutil.copytree(tmp_path / "sa", tmp_path / "sa-repair")
    loc = location_args(tmp_path / "store", tmp_path / "cold", tmp_path / "sa")
    # A's cached timestamps (T0) are all past a 1 h retention at LATER; B's fresh ones not.
    expire = ["expire", *loc, "--retention", "1h", "--now", str(LATER + 1_800_000)]
    assert await asyncio.to_thread(main, expire) == 0
    _assert_survive(tmp_path, fresh)

    settings = _settings(tmp_path, "sa-repair")
    async with open_runtime(settings) as rt:  # no start(): the stale catalogue as it is
        await rt.dispatcher.lease.acquire(wait=False)
        rt.catalogue.queues.set_state(TOPIC, 0, QueueState.DIVERGED)
        plan = await plan_repair(
            hot=rt.hot, backend=rt.backend, catalogue=rt.catalogue, topic=TOPIC, queue_id=0
        )
        assert plan.moves, "the stale catalogue decided to move A's segments"
        await execute_repair(
            plan, backend=rt.backend, catalogue=rt.catalogue,
            keys=rt.dispatcher.rounds.batcher.keys, clock=rt.dispatcher.clock,
        )  # fmt: skip
        await rt.dispatcher.lease.release()
    _assert_survive(tmp_path, fresh)

    assert await asyncio.to_thread(main, ["gc", *loc, "--grace", "0"]) == 0
    _assert_survive(tmp_path, fresh)
    async with open_runtime(_settings(tmp_path, "sb")) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.catch_up()
        await assert_cold_matches_hot(
            rt.backend, HotStore(tmp_path / "store"), CLUSTER, BROKER, expect_full=False
        )


async def test_retention_reads_the_manifest_key_before_each_delete(tmp_path: Path) -> None:
    """Without any reconcile in between (a catalogue that went stale while open):
    deciding to expire a segment whose key now holds another writer's manifest deletes
    nothing and reconciles instead."""
    _, fresh = await _tier_diverge_repair(tmp_path)
    async with open_runtime(_settings(tmp_path, "sa")) as rt:  # A's stale catalogue
        await rt.dispatcher.lease.acquire(wait=False)
        segments = rt.catalogue.segments.of(TOPIC, 0)
        stale = next(s for s in segments if s.manifest.key in fresh)
        if stale is not segments[0]:  # only the oldest may be marked; drop what is older
            for older in segments[: segments.index(stale)]:
                rt.catalogue.segments.mark_deleting(TOPIC, 0, older.start_offset)
                rt.catalogue.segments.drop(TOPIC, 0, older.start_offset)
        with pytest.raises(CatalogueError, match="nothing deleted"):
            await delete_segment(
                stale, catalogue=rt.catalogue, backend=rt.backend, lease=rt.dispatcher.lease
            )
        _assert_survive(tmp_path, fresh)
        # The reconcile it ran made the catalogue follow cold: B's manifest is its row now.
        assert rt.catalogue.segments.of(TOPIC, 0)[-1].manifest.to_json() in fresh.values()
        await rt.dispatcher.lease.release()
