"""SIGKILL a real sidecar at random moments; after restarts cold is exact."""

from __future__ import annotations

import asyncio
import random
import subprocess
from pathlib import Path

import pytest

from tests.support.sidecar.process import crash_cycles, sidecar_cmd, sidecar_env
from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.backends import open_backend
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize

#: The campaigns: per-queue segments, and batch objects (a run of --once writes a batch
#: fence and one batch object: killed after one to three files, the kill lands around the
#: fence, the batch create and the catalogue commit after it).
CAMPAIGNS = {
    "per-queue": ({}, 30, 6),
    "batch": (
        {"TIEREDSTORE_TIERING_BATCHING": "true", "TIEREDSTORE_TIERING_SEGMENT_MAX_BYTES": "1M"},
        3,
        4,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("campaign", sorted(CAMPAIGNS))
def test_sigkill_at_random_moments_keeps_cold_exact(tmp_path: Path, campaign: str) -> None:
    extra, most_objects, least_kills = CAMPAIGNS[campaign]
    rng = random.Random(20261121)
    spec = SynthSpec(
        topics=2,
        queues=2,
        messages=4000,
        body_min=50,
        body_max=2500,
        seed=5,
        commitlog_file_size=512 << 10,
    )
    synthesize(tmp_path / "store", spec)
    kills = crash_cycles(
        tmp_path,
        rng,
        cycles=12,
        batch=(300, 300),
        args=("--once",),
        env={"TIEREDSTORE_LEASE_RENEW_INTERVAL": "1s", **extra},
        most_objects=most_objects,
    )
    assert kills >= least_kills, "the campaign must actually kill the sidecar mid-run"
    store, cold, state = tmp_path / "store", tmp_path / "cold", tmp_path / "state"
    done = subprocess.run(
        sidecar_cmd(store, cold, state, "--once"),
        env=sidecar_env(**extra),
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    asyncio.run(_check(store, cold))


async def _check(store: Path, cold: Path) -> None:
    async with open_backend(str(cold)) as backend:
        await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)
        # Temp files of killed uploads stay on disk until GC, but are never objects.
        assert not [o.key for o in await backend.list("") if ".tmp" in o.key]
