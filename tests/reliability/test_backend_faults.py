"""At 10 % injected backend faults the sidecar still ends with cold exactly covering hot.

Faults: errors, timeouts, throttling, writes that land but report failure, short reads.
Retries show in the metrics; the lag gauge keeps moving while the backend misbehaves.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.support.moto import ACCESS_KEY, REGION, SECRET_KEY, S3Bucket
from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.backends import open_backend
from tieredstore.backends.base import Backend
from tieredstore.backends.faults import FaultyBackend
from tieredstore.backends.memory import reset_memory_stores
from tieredstore.backends.retry import RetryingBackend, RetryPolicy
from tieredstore.cli.sidecar.runtime import Runtime, open_runtime
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize
from tieredstore.verifier.job import verify
from tieredstore.verifier.vocabulary import Level, Verdict, VerifyOptions

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


def _lag_of(metrics: Metrics) -> float:
    return sum(
        sample.value
        for metric in metrics.registry.collect()
        if metric.name == "tieredstore_queue_lag_messages"
        for sample in metric.samples
    )


def _lag(rt: Runtime) -> float:
    return _lag_of(rt.metrics)


async def _tier_with_faults(
    store: Path, url: str, inner: Backend, tmp_path: Path, **kw: object
) -> FaultyBackend:
    """Tier a growing ``store`` through ``inner`` with 10 % faults until caught up.

    The store grows between ticks; the lag gauge is sampled after every committed segment
    and must move (rise with new data, fall as it is tiered) while faults are injected.
    """
    faulty = FaultyBackend(inner, rate=0.10, seed=4242)
    settings = settings_for(store, url, tmp_path / "state", **kw)
    metrics = Metrics()
    backend = RetryingBackend(
        faulty, FAST, on_retry=lambda op, _attempt, _exc: metrics.retries.labels(op).inc()
    )
    live = SyntheticStore.open(store)
    lags: list[float] = []
    async with open_runtime(
        settings,
        backend=backend,
        retry=FAST,
        metrics=metrics,
        on_segment=lambda _plan, _sliced: lags.append(_lag_of(metrics)),
    ) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        for tick in range(40):  # a failed queue is retried next tick
            if tick < 5:
                live.append(300)
            await rt.dispatcher.tick(flush=True)
            if tick >= 5 and _lag(rt) == 0:
                break
        report = await rt.dispatcher.tick(flush=True)
        lags.append(_lag(rt))
        assert report.segments == report.slices == 0
        assert not report.errors
        assert _retries(rt) > 0  # faults were met, and retried, not failed
    assert len(set(lags)) > 2  # the lag gauge moved while faults were injected
    assert lags[-1] == 0
    injected = sum(v for k, v in faulty.stats.items() if k.startswith("faults."))
    calls = sum(v for k, v in faulty.stats.items() if k.startswith("calls."))
    print(f"{url}: {injected} faults in {calls} backend calls, {_retries(rt):.0f} retries")
    return faulty


def _verify_clean(spark: SparkSession, store: Path, url: str, **storage: Any) -> None:
    """The Spark verifier, at content level, must find nothing."""
    result = verify(
        spark,
        VerifyOptions(
            hot=store, cold_url=url, cluster=CLUSTER, broker=BROKER,
            now_ms=time.time_ns() // 1_000_000, level=Level.CONTENT, storage_options=storage,
        ),
    )  # fmt: skip
    assert result.verdict is Verdict.CLEAN, [str(a) for a in result.anomalies][:10]
    print(f"{url}: verified {result.totals} -> {result.verdict.value}")


@pytest.fixture
def store(tmp_path: Path) -> Path:
    synthesize(tmp_path / "store", SPEC)
    return tmp_path / "store"


@pytest.mark.slow
async def test_memory_backend_with_faults(store: Path, tmp_path: Path) -> None:
    reset_memory_stores()
    from tieredstore.backends.memory import MemoryBackend

    faulty = await _tier_with_faults(store, "memory://faults", MemoryBackend("faults"), tmp_path)
    assert sum(v for k, v in faulty.stats.items() if k.startswith("faults.")) > 10
    async with open_backend("memory://faults") as backend:
        await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)


@pytest.mark.spark
async def test_posix_backend_with_faults(store: Path, tmp_path: Path, spark: SparkSession) -> None:
    cold = tmp_path / "cold"
    async with open_backend(str(cold)) as inner:
        await _tier_with_faults(store, str(cold), inner, tmp_path)
        await assert_cold_matches_hot(inner, HotStore(store), CLUSTER, BROKER)
    _verify_clean(spark, store, str(cold))


@pytest.mark.s3
@pytest.mark.spark
async def test_s3_backend_with_faults(
    store: Path, tmp_path: Path, s3_bucket: S3Bucket, spark: SparkSession
) -> None:
    url = f"{s3_bucket.url}/faults"
    async with open_backend(url, options=s3_bucket.options()) as inner:
        await _tier_with_faults(
            store, url, inner, tmp_path, cold__endpoint_url=s3_bucket.endpoint_url
        )
        await assert_cold_matches_hot(inner, HotStore(store), CLUSTER, BROKER)
    _verify_clean(
        spark, store, url, endpoint_url=s3_bucket.endpoint_url, key=ACCESS_KEY,
        secret=SECRET_KEY, client_kwargs={"region_name": REGION},
    )  # fmt: skip
