"""Real processes: a writer frozen anywhere on its commit path can neither lose, hide
nor stall committed data — POSIX and S3 (moto server, real conditional requests).

Each round (seeded; 12 on POSIX: every pause point with every takeover, 8 on S3: every
pause point with ``gc`` and ``race``; 20 in all) starts sidecar A through
:mod:`tests.support.sidecar.pausing`, which SIGSTOPs the process at a random point of
a random segment's commit (inside an upload, after the last lease check right before
the manifest create, inside a create the retry wrapper retries without any lease
check, after the create before the catalogue commit). Then the lease is taken over:

* ``gc``: ``tieredstore gc --grace 0`` once A's lease expired (it fences A's segment
  start before deleting A's uploaded objects), then SIGCONT, then sidecar B catches up;
* ``sidecar``: B (``run --once``) takes over and tiers everything, then SIGCONT;
* ``race``: A is thawed the moment B holds the lease, so A's late create races B's.

Judged as left and after B caught up: every manifest committed when A froze is still
there byte for byte; every committed segment's objects are present with their sizes and
digests and cover the hot store exactly (lag zero, nothing missing, no gap or overlap);
a GC scan finds no damage. The last round of each backend also runs the Spark verifier
at content level: CLEAN. On the code before fence markers, ``gc`` rounds paused at
``create``/``retried-create`` left a manifest naming deleted objects, and B then failed
forever with "the committed segment there could not be adopted".
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.support.moto import S3Bucket
from tests.support.sidecar.pausing import NOT_WRAPPED, POINTS
from tests.support.sidecar.process import kill9, sidecar_cmd, sidecar_env, wait_until
from tests.support.sidecar.settings import BROKER, CLUSTER, location_args
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.backends import open_backend
from tieredstore.backends.options import BackendOptions
from tieredstore.cold.layout import SegmentKind, broker_prefix, lease_key, parse_object_key
from tieredstore.cold.manifest import FenceMarker, Manifest, read_stored
from tieredstore.dispatcher.lease.lease import LeaseRecord
from tieredstore.dispatcher.maintenance.gc import scan_garbage
from tieredstore.errors import InvalidNameError, ObjectNotFoundError
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.verifier.job import verify
from tieredstore.verifier.vocabulary import Level, Verdict, VerifyOptions

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPEC = SynthSpec(topics=1, queues=2, messages=400, body_min=200, body_max=1200, seed=27)
FAST = {
    # A's lease lasts 2.1 s, so B takes over soon after A freezes (B runs with
    # SUCCESSOR's longer lease: its first renewal may be late on a busy host).
    "TIEREDSTORE_LEASE_RENEW_INTERVAL": "700ms",
    "TIEREDSTORE_TIERING_TICK_INTERVAL": "50ms",
    "TIEREDSTORE_TIERING_GUARD": "none",
    "TIEREDSTORE_TIERING_CONCURRENCY": "1",
    "TIEREDSTORE_RETENTION_DEFAULT": "87600h",  # the synthetic messages are from 2023
}
#: B's own lease: nobody takes over from B, so a short one only risks a lapse while a
#: busy host starves B's first renewal. How soon B takes over depends on A's lease time.
SUCCESSOR = {"TIEREDSTORE_LEASE_RENEW_INTERVAL": "5s"}
MODES = ("gc", "sidecar", "race")
S3_MODES = ("gc", "race")  # on S3 the two adversarial takeovers (rounds cost more there)
BOUND_S = 120.0  # upper bound for each step (real seconds); steps end on events
REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Cold:
    url: str
    options: BackendOptions = field(default_factory=BackendOptions)
    env: dict[str, str] = field(default_factory=dict)
    storage: dict[str, Any] = field(default_factory=dict)

    def run(self, coro: Callable[[Any], Any]) -> Any:
        async def go() -> Any:
            async with open_backend(self.url, options=self.options) as backend:
                return await coro(backend)

        return asyncio.run(go())


def _cold(kind: str, tmp_path: Path, request: pytest.FixtureRequest, n: int) -> Cold:
    if kind == "posix":
        return Cold(str(tmp_path / f"cold-{n}"))
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    return Cold(
        f"{bucket.url}/stale-{n}",
        bucket.options(),
        {"TIEREDSTORE_COLD_ENDPOINT_URL": bucket.endpoint_url},
        bucket.fsspec_options(),
    )


def _frozen(proc: subprocess.Popen[bytes]) -> bool:
    stat = Path(f"/proc/{proc.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


async def _committed(backend: Any) -> dict[str, bytes]:
    """Every manifest key that holds a manifest (not a fence marker), with its bytes."""
    out = {}
    for info in await backend.list(broker_prefix(CLUSTER, BROKER) + "/"):
        try:
            key = parse_object_key(info.key)
        except InvalidNameError:
            continue
        if key.kind is SegmentKind.MANIFEST:
            with contextlib.suppress(ObjectNotFoundError):
                data = await backend.read(info.key)
                if isinstance(read_stored(data, info.key), Manifest):
                    out[info.key] = data
    return out


async def _undamaged(backend: Any) -> None:
    """No manifest names a missing object or one of another size (GC's own scan)."""
    report = await scan_garbage(
        backend, cluster=CLUSTER, broker=BROKER, now_ms=time.time_ns() // 10**6, grace_s=0
    )
    assert not report.damaged, [f.describe() for f in report.damaged]


async def _lease(backend: Any) -> LeaseRecord:
    key = lease_key(CLUSTER, BROKER)
    return LeaseRecord.from_json(await backend.read(key), where=key)


def _round(
    rng: random.Random, cold: Cold, tmp: Path, point: str, mode: str
) -> tuple[str, str, int]:
    store = synthesize(tmp / "store", SPEC).root
    env = sidecar_env(**FAST, **cold.env)
    nth = rng.randint(1, 4)  # which segment's commit (of 2 queues x ~7 segments)
    log_a = tmp / "a.log"
    with log_a.open("ab") as out:
        a = subprocess.Popen(
            [sys.executable, "-m", "tests.support.sidecar.pausing", point, str(nth), "--",
             *sidecar_cmd(store, cold.url, tmp / "state-a")[3:]],
            env=env, stdout=out, stderr=out, cwd=REPO,
        )  # fmt: skip
    b: subprocess.Popen[bytes] | None = None
    try:
        wait_until(f"A frozen at {point} #{nth}", lambda: _frozen(a), a, log_a, timeout=BOUND_S)
        before = cold.run(_committed)
        epoch_a = cold.run(_lease).epoch
        if mode == "gc":
            wait_until("A's lease to expire", lambda: cold.run(_lease).expires_at_ms
                       < time.time() * 1000, a, log_a, timeout=BOUND_S)  # fmt: skip
            gc = subprocess.run(
                [sys.executable, "-m", "tieredstore.cli", "gc", "--grace", "0",
                 *location_args(store, cold.url, tmp / "state-gc")],
                env=env, capture_output=True, timeout=BOUND_S,
            )  # fmt: skip
            assert gc.returncode == 0, gc.stdout.decode()[-3000:] + gc.stderr.decode()[-3000:]
            a.send_signal(signal.SIGCONT)
            a.wait(timeout=BOUND_S)
            cold.run(_undamaged)  # as A left it: nothing committed names a missing object
        b_log = tmp / "b.log"
        with b_log.open("ab") as out:
            b = subprocess.Popen(
                sidecar_cmd(store, cold.url, tmp / "state-b", "--once"),
                env={**env, **SUCCESSOR}, stdout=out, stderr=out,
            )  # fmt: skip
        if mode == "race":
            wait_until(
                "B to hold the lease", lambda: cold.run(_lease).epoch > epoch_a, b, b_log,
                timeout=BOUND_S,
            )  # fmt: skip
            a.send_signal(signal.SIGCONT)
        assert b.wait(timeout=BOUND_S) == 0, b_log.read_text()[-3000:]
        a.send_signal(signal.SIGCONT)
        a.wait(timeout=BOUND_S)
    finally:  # a failed round leaves no process running into the next test
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                kill9(proc)  # SIGKILL ends a stopped process too
    after = cold.run(_committed)
    for key, data in before.items():
        assert after.get(key) == data, f"{point}/{mode}: committed {key} replaced or deleted"

    async def judge(backend: Any) -> None:
        await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)
        await _undamaged(backend)

    cold.run(judge)
    return point, mode, nth


@pytest.mark.parametrize("kind", ["posix", pytest.param("s3", marks=pytest.mark.s3)])
def test_a_writer_frozen_anywhere_cannot_lose_hide_or_stall_data(
    kind: str, tmp_path: Path, spark: SparkSession, request: pytest.FixtureRequest
) -> None:
    rng = random.Random(f"27a-{kind}")
    combos = [(p, m) for p in POINTS for m in MODES if kind == "posix" or m in S3_MODES]
    rng.shuffle(combos)  # each combination once, in random order, at a random segment
    cold = _cold(kind, tmp_path, request, 0)
    for n, (point, mode) in enumerate(combos):
        cold = _cold(kind, tmp_path, request, n)
        _round(rng, cold, tmp_path / f"round-{n}", point, mode)
    store = tmp_path / f"round-{len(combos) - 1}" / "store"
    result = verify(
        spark,
        VerifyOptions(
            hot=store, cold_url=cold.url, cluster=CLUSTER, broker=BROKER,
            now_ms=time.time_ns() // 1_000_000, level=Level.CONTENT,
            storage_options=cold.storage,
        ),
    )  # fmt: skip
    assert result.verdict is Verdict.CLEAN, [str(a) for a in result.anomalies][:10]


def test_pause_points_are_markers_of_no_segment() -> None:
    """The fence marker the ``gc`` rounds rely on reads as "no segment" (not corrupt)."""
    marker = FenceMarker(
        CLUSTER, BROKER, "T", 0, 200, lease_epoch=3, writer_id="gc", created_at_ms=1
    )
    assert read_stored(marker.to_json(), marker.key) == marker


def test_the_pausing_sidecar_fails_loudly_when_it_wraps_no_cold_store(tmp_path: Path) -> None:
    """A run that never opens the cold store through the replaced ``open_cold`` (here
    ``--version``; as well a runtime that stopped importing it from the core) exits
    NOT_WRAPPED and says why, instead of a sidecar that would never freeze."""
    run = subprocess.run(
        [sys.executable, "-m", "tests.support.sidecar.pausing", "upload", "1", "--",
         "--version"],
        capture_output=True, text=True, cwd=REPO, timeout=BOUND_S,
    )  # fmt: skip
    assert run.returncode == NOT_WRAPPED, run.stdout + run.stderr
    assert "never opened its cold store through open_cold" in run.stderr
