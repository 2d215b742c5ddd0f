"""SIGKILL a real sidecar at random moments; after restarts cold is exact."""

from __future__ import annotations

import asyncio
import random
import subprocess
from pathlib import Path

import pytest

from tests.coldcheck import assert_cold_matches_hot
from tests.dispatcher.helpers import BROKER, CLUSTER
from tests.dispatcher.sidecar import kill_after_objects, sidecar_cmd, sidecar_env, start
from tieredstore.backends import open_backend
from tieredstore.hotstore import HotStore
from tieredstore.synth import SyntheticStore, SynthSpec, synthesize


@pytest.mark.slow
def test_sigkill_at_random_moments_keeps_cold_exact(tmp_path: Path) -> None:
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
    store, cold, state, log = (
        tmp_path / "store",
        tmp_path / "cold",
        tmp_path / "state",
        tmp_path / "log",
    )
    kills = 0
    for _ in range(12):
        SyntheticStore.open(store).append(300)  # the broker keeps writing between crashes
        proc = start(store, cold, state, "--once", log=log, TIEREDSTORE_LEASE_RENEW_INTERVAL="1s")
        # Killed after a seeded random amount of progress: mid-run on any machine.
        ending = kill_after_objects(proc, cold, rng.randint(1, 30))
        kills += ending == "killed"
        if ending == "exited":
            assert proc.returncode == 0, log.read_text()[-3000:]
    assert kills >= 6, "the campaign must actually kill the sidecar mid-run"
    done = subprocess.run(
        sidecar_cmd(store, cold, state, "--once"),
        env=sidecar_env(),
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
