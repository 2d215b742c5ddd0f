"""The successor never stalls on a manifest a fenced writer left at the frontier.

The catalogue ends at offset S; cold holds a manifest at S the catalogue never adopted,
whose objects are gone (what an older GC did to a paused writer's upload) or differ
from the hot store. The next commit at S finds it, checks it against its digests and
the hot store, quarantines it (copy, then delete) and commits its own segment there.
On the old code every tick failed with "the committed segment there could not be
adopted" and the queue's lag grew for good.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.cold.manifest import Manifest
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.settings.loader import Settings

SPEC = SynthSpec(topics=1, queues=1, messages=200, body_min=100, body_max=400, seed=11)
TOPIC = "SynthTopic0"


def _settings(tmp_path: Path) -> Settings:
    return settings_for(
        tmp_path / "store", str(tmp_path / "cold"), tmp_path / "state",
        tiering__segment_max_bytes="12K", tiering__guard="none",
    )  # fmt: skip


async def _leave_behind(tmp_path: Path, damage: str) -> Manifest:
    """Tier everything, then make the catalogue forget the last segment and damage it."""
    synthesize(tmp_path / "store", SPEC)
    async with open_runtime(_settings(tmp_path)) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.catch_up()
        last = rt.catalogue.segments.of(TOPIC, 0)[-1].manifest
        rt.catalogue.segments.truncate(TOPIC, 0, last.start_offset)
        cold = tmp_path / "cold"
        if damage == "deleted":
            (cold / last.commit_log_key).unlink()
            (cold / last.consume_queue_key).unlink()
        else:  # same size, other bytes: a record that is not the hot one
            path = cold / last.commit_log_key
            data = bytearray(path.read_bytes())
            data[-1] ^= 0xFF
            path.write_bytes(bytes(data))
    return last


@pytest.mark.parametrize("damage", ["deleted", "altered"])
async def test_a_frontier_manifest_that_does_not_check_out_is_quarantined(
    tmp_path: Path, damage: str
) -> None:
    left = await _leave_behind(tmp_path, damage)
    async with open_runtime(_settings(tmp_path)) as rt:
        # start() without reconcile's adoption (it refuses a manifest whose objects are
        # missing, and never reads digests): the commit path meets the manifest itself.
        await rt.dispatcher.lease.acquire(wait=False)
        row = rt.catalogue.queues.get(TOPIC, 0)
        assert row is not None and row.cold_commit == left.start_offset
        rows = await rt.dispatcher.discover()
        await asyncio.wait_for(rt.dispatcher.tier_queues(rows, flush=True), 60)
        fresh = rt.catalogue.segments.of(TOPIC, 0)[-1].manifest
        assert fresh.start_offset == left.start_offset and fresh != left
        await assert_cold_matches_hot(rt.backend, HotStore(tmp_path / "store"), CLUSTER, BROKER)
        await rt.dispatcher.lease.release()
    quarantined = list((tmp_path / "cold").rglob("_quarantine/**/MANIFEST/*.json"))
    assert [p.read_bytes() for p in quarantined] == [left.to_json()]
