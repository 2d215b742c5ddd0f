"""At 10 % injected backend faults the sidecar still ends with cold exactly covering hot.

Faults: errors, timeouts, throttling, writes that land but report failure, short reads.
Retries show in the metrics; the lag gauge keeps moving while the backend misbehaves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatcher.metrics import Metrics
from dispatcher.runtime import Runtime, open_runtime
from tests.coldcheck import assert_cold_matches_hot
from tests.dispatcher.helpers import BROKER, CLUSTER, settings_for
from tests.fixtures_s3 import S3Bucket
from tieredstore.backends import open_backend
from tieredstore.backends.base import Backend
from tieredstore.backends.faults import FaultyBackend
from tieredstore.backends.memory import reset_memory_stores
from tieredstore.backends.retry import RetryingBackend, RetryPolicy
from tieredstore.hotstore import HotStore
from tieredstore.synth import SynthSpec, synthesize

SPEC = SynthSpec(topics=2, queues=2, messages=1500, body_min=20, body_max=2000, seed=77)
# Real (tiny) backoff on the real clock: these tests inject faults, not time.
FAST = RetryPolicy(max_attempts=12, base_delay=0.001, max_delay=0.005)


def _retries(rt: Runtime) -> float:
    return sum(
        sample.value
        for metric in rt.metrics.registry.collect()
        if metric.name == "tieredstore_backend_retries"
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


async def _tier_with_faults(
    store: Path, url: str, inner: Backend, tmp_path: Path, **kw: object
) -> FaultyBackend:
    """Tier ``store`` through ``inner`` with 10 % faults until a tick finds nothing to do."""
    faulty = FaultyBackend(inner, rate=0.10, seed=4242)
    settings = settings_for(store, url, tmp_path / "state", **kw)
    metrics = Metrics()
    backend = RetryingBackend(
        faulty, FAST, on_retry=lambda op, _attempt, _exc: metrics.retries.labels(op).inc()
    )
    async with open_runtime(settings, backend=backend, retry=FAST, metrics=metrics) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        for _ in range(30):  # each tick may hit faults; a failed queue is retried next tick
            report = await rt.dispatcher.tick(flush=True)
            if report.segments == 0 and not report.errors:
                break
        assert report.segments == 0
        assert not report.errors
        assert _retries(rt) > 0  # faults were met, and retried, not failed
    injected = sum(v for k, v in faulty.stats.items() if k.startswith("faults."))
    calls = sum(v for k, v in faulty.stats.items() if k.startswith("calls."))
    print(f"{url}: {injected} faults in {calls} backend calls, {_retries(rt):.0f} retries")
    return faulty


@pytest.fixture
def store(tmp_path: Path) -> Path:
    synthesize(tmp_path / "store", SPEC)
    return tmp_path / "store"


async def test_memory_backend_with_faults(store: Path, tmp_path: Path) -> None:
    reset_memory_stores()
    from tieredstore.backends.memory import MemoryBackend

    faulty = await _tier_with_faults(store, "memory://faults", MemoryBackend("faults"), tmp_path)
    assert sum(v for k, v in faulty.stats.items() if k.startswith("faults.")) > 10
    async with open_backend("memory://faults") as backend:
        await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)


async def test_posix_backend_with_faults(store: Path, tmp_path: Path) -> None:
    cold = tmp_path / "cold"
    async with open_backend(str(cold)) as inner:
        await _tier_with_faults(store, str(cold), inner, tmp_path)
        await assert_cold_matches_hot(inner, HotStore(store), CLUSTER, BROKER)


@pytest.mark.s3
async def test_s3_backend_with_faults(store: Path, tmp_path: Path, s3_bucket: S3Bucket) -> None:
    url = f"{s3_bucket.url}/faults"
    async with open_backend(url, options=s3_bucket.options()) as inner:
        await _tier_with_faults(
            store, url, inner, tmp_path, cold__endpoint_url=s3_bucket.endpoint_url
        )
        await assert_cold_matches_hot(inner, HotStore(store), CLUSTER, BROKER)
