"""A full disk under the state directory: a clear error, and no corrupt catalogue.

The sidecar runs with RLIMIT_FSIZE so the SQLite catalogue cannot grow past a few KiB
(as on a full disk, writes fail with EFBIG; Python ignores SIGXFSZ). It must fail with
a readable error, leave a catalogue that passes SQLite's integrity check, and a later
run with room must finish the job with cold exactly covering hot.
"""

from __future__ import annotations

import asyncio
import resource
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.support.sidecar.process import sidecar_cmd, sidecar_env
from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.backends import open_backend
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize

pytestmark = pytest.mark.slow  # every test here takes over a second: not in make quick

LIMIT = 48 << 10  # bigger than any cold object here, smaller than the catalogue needs


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def test_full_state_disk_fails_cleanly_and_recovers(tmp_path: Path) -> None:
    spec = SynthSpec(topics=4, queues=4, messages=6000, body_min=20, body_max=400, seed=9)
    synthesize(tmp_path / "store", spec)
    store, cold, state = tmp_path / "store", tmp_path / "cold", tmp_path / "state"
    env = sidecar_env(TIEREDSTORE_TIERING_SEGMENT_MAX_BYTES="8K")
    full = subprocess.run(
        sidecar_cmd(store, cold, state, "--once"), env=env, capture_output=True, text=True,
        timeout=300, preexec_fn=_limit_file_size,
    )  # fmt: skip
    assert full.returncode != 0
    assert "disk" in full.stderr.lower() or "full" in full.stderr.lower(), full.stderr[-2000:]
    with sqlite3.connect(state / "catalogue.sqlite3") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    room = subprocess.run(
        sidecar_cmd(store, cold, state, "--once"), env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert room.returncode == 0, room.stderr[-2000:]

    async def check() -> None:
        async with open_backend(str(cold)) as backend:
            await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)

    asyncio.run(check())
