"""The crash campaign: 100 SIGKILLs of a real sidecar tiering a growing store.

Four tests of 25 seeded cycles each. In every cycle the "broker" appends a batch, then
a real ``tieredstore run`` subprocess (long-running, or ``--once`` in the last test)
starts and is SIGKILLed after a seeded random number of objects written: the kill is
the chaos, placed by progress rather than by time so that it lands mid-tiering on any
machine. The lease is renewed every half second (also while a sidecar starts), so a
killed sidecar's lease lapses within 1.5 s and the next one takes over. After the
campaign one catch-up pass finishes the job, ``tieredstore gc`` removes the leftovers,
and the Spark verifier, at content level, must report CLEAN: no gap, overlap,
duplicate, corrupt or divergent record, and no orphan object.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.sidecar.process import crash_cycles, sidecar_cmd, sidecar_env
from tests.support.sidecar.settings import BROKER, CLUSTER, location_args
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize
from tieredstore.verifier.job import verify
from tieredstore.verifier.vocabulary import Level, Verdict, VerifyOptions

CYCLES = 25
LEASE = {"TIEREDSTORE_LEASE_RENEW_INTERVAL": "500ms"}
LOOP = {
    **LEASE,
    "TIEREDSTORE_TIERING_TICK_INTERVAL": "50ms",
    "TIEREDSTORE_TIERING_SEGMENT_MAX_AGE": "100ms",
}

#: Totals across the campaign, printed at the end of each test for docs/reliability.md.
TOTALS = {"cycles": 0, "kills": 0, "messages": 0}


def _campaign(tmp_path: Path, seed: int, *, once: bool) -> tuple[Path, Path, Path]:
    rng = random.Random(seed)
    spec = SynthSpec(topics=2, queues=2, messages=1500, body_min=20, body_max=3000, seed=seed,
                     commitlog_file_size=512 << 10, cq_file_size=300 * 20)  # fmt: skip
    synthesize(tmp_path / "store", spec)
    kills = crash_cycles(
        tmp_path,
        rng,
        cycles=CYCLES,
        batch=(200, 600),
        args=("--once",) if once else (),
        env=LEASE if once else LOOP,
    )
    assert kills >= CYCLES // 2, "the campaign must really kill the sidecar mid-run"
    store, cold, state = tmp_path / "store", tmp_path / "cold", tmp_path / "state"
    done = subprocess.run(sidecar_cmd(store, cold, state, "--once"), env=sidecar_env(**LEASE),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    gc = subprocess.run(
        [sys.executable, "-m", "tieredstore.cli", "gc", "--grace", "0",
         *location_args(store, cold, state)],
        env=sidecar_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert gc.returncode == 0, gc.stderr[-3000:]
    TOTALS["cycles"] += CYCLES
    TOTALS["kills"] += kills
    TOTALS["messages"] += SyntheticStore.open(store).written
    return store, cold, state


def _verify_clean(spark: SparkSession, store: Path, cold: Path, state: Path) -> None:
    result = verify(
        spark,
        VerifyOptions(
            hot=store, cold_url=str(cold), cluster=CLUSTER, broker=BROKER,
            now_ms=time.time_ns() // 1_000_000 + 1000, level=Level.CONTENT,
            orphan_grace_s=0, metadata_dir=state,
        ),
    )  # fmt: skip
    assert result.verdict is Verdict.CLEAN, [str(a) for a in result.anomalies][:10]
    assert not result.anomalies
    print(f"crash campaign so far: {TOTALS}")


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize(("seed", "once"), [(101, False), (202, False), (303, False), (404, True)])
def test_crash_campaign(tmp_path: Path, spark: SparkSession, seed: int, once: bool) -> None:
    store, cold, state = _campaign(tmp_path, seed, once=once)
    _verify_clean(spark, store, cold, state)
