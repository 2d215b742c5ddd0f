"""Real processes: a writer frozen by SIGSTOP, a successor, and the thaw.

1. Sidecar A tiers a store (lease renewed every second, so it lasts 3 s).
2. A is frozen with SIGSTOP once it has committed some segments — wherever it is,
   mid-upload included.
3. Sidecar B (`run --once`, waiting for the lease) takes over once A's lease has
   expired, and commits everything.
4. A is thawed with SIGCONT. Its own deadline passed long ago and its renewal loses
   the compare-and-swap: it stops with "lease" in its error, exit status 1, and writes
   nothing over B's commits.

The cold store then covers the hot store exactly and the Spark verifier says CLEAN at
content level — on POSIX and on S3 (moto server, real conditional requests).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.support.moto import S3Bucket
from tests.support.sidecar.process import sidecar_cmd, sidecar_env, start, wait_until
from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.backends import open_backend
from tieredstore.backends.options import BackendOptions
from tieredstore.cold.history import load_history
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.verifier.job import verify
from tieredstore.verifier.vocabulary import Level, Verdict, VerifyOptions

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPEC = SynthSpec(topics=2, queues=2, messages=3000, body_min=200, body_max=1200, seed=3)
FAST = {
    "TIEREDSTORE_LEASE_RENEW_INTERVAL": "1s",
    "TIEREDSTORE_TIERING_TICK_INTERVAL": "100ms",
    "TIEREDSTORE_TIERING_GUARD": "none",
    "TIEREDSTORE_TIERING_CONCURRENCY": "1",
    # The synthetic store's messages are from 2023: keep them (no expiry during the test).
    "TIEREDSTORE_RETENTION_DEFAULT": "87600h",
}
BOUND_S = 120.0  # upper bound for each step (real seconds); the steps end on events
#: B's own lease: nobody takes over from B, so it needs no short one, and a 3 s lease
#: could lapse while a busy host starves B's first renewal (``--once`` exits 1 on a lapse).
#: How soon B takes over depends on A's lease time (the holder's), not on this.
SUCCESSOR = {"TIEREDSTORE_LEASE_RENEW_INTERVAL": "5s"}


def _committed(url: str, options: BackendOptions) -> int:
    """The links a reader sees (segments and batch slices): with batching on, a queue's
    tail may go into a batch object rather than a segment of its own, so counting
    manifests alone would miss what B commits after a busy A got far."""

    async def count() -> int:
        async with open_backend(url, options=options) as backend:
            return len((await load_history(backend, CLUSTER, BROKER)).links())

    return asyncio.run(count())


@pytest.mark.parametrize("kind", ["posix", pytest.param("s3", marks=pytest.mark.s3)])
def test_sigstop_a_writer_let_another_take_over_then_sigcont(
    kind: str, tmp_path: Path, spark: SparkSession, request: pytest.FixtureRequest
) -> None:
    store = synthesize(tmp_path / "store", SPEC).root
    env = dict(FAST)
    storage: dict[str, Any] = {}
    options = BackendOptions()
    if kind == "posix":
        url = str(tmp_path / "cold")
    else:
        bucket: S3Bucket = request.getfixturevalue("s3_bucket")
        url, options = f"{bucket.url}/sigstop", bucket.options()
        env["TIEREDSTORE_COLD_ENDPOINT_URL"] = bucket.endpoint_url
        storage = bucket.fsspec_options()
    log_a = tmp_path / "a.log"
    a = start(store, url, tmp_path / "state-a", log=log_a, **env)
    try:
        wait_until(
            "three commits by A", lambda: _committed(url, options) >= 3, a, log_a, timeout=BOUND_S
        )
        a.send_signal(signal.SIGSTOP)  # frozen wherever it is: mid-upload, mid-commit
        committed_by_a = _committed(url, options)
        b = subprocess.run(
            sidecar_cmd(store, url, tmp_path / "state-b", "--once"),  # url: never a Path
            env=sidecar_env(**{**env, **SUCCESSOR}),
            capture_output=True,
            timeout=BOUND_S,
        )
        assert b.returncode == 0, b.stderr.decode()[-3000:]
        assert b"epoch 2" in b.stderr
        assert _committed(url, options) > committed_by_a
        a.send_signal(signal.SIGCONT)
        assert a.wait(timeout=BOUND_S) == 1
        out = log_a.read_text()
        assert "fenced" in out and "lease" in out
    finally:
        if a.poll() is None:
            a.send_signal(signal.SIGCONT)
            a.kill()
            a.wait(timeout=30)

    async def exact() -> None:
        async with open_backend(url, options=options) as backend:
            await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)

    asyncio.run(exact())
    result = verify(
        spark,
        VerifyOptions(
            hot=store, cold_url=url, cluster=CLUSTER, broker=BROKER,
            now_ms=time.time_ns() // 1_000_000, level=Level.CONTENT, storage_options=storage,
        ),
    )  # fmt: skip
    assert result.verdict is Verdict.CLEAN, [str(a) for a in result.anomalies][:10]
