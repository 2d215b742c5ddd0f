"""synth store -> run --once -> cold covers hot exactly (memory, POSIX, S3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.moto import S3Bucket
from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.backends import open_backend
from tieredstore.backends.memory import reset_memory_stores
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec

pytestmark = pytest.mark.slow  # every test here takes over a second: not in make quick

SPEC = SynthSpec(
    topics=3,
    queues=2,
    messages=3000,
    body_min=10,
    body_max=3000,
    commitlog_file_size=256 << 10,
    cq_file_size=200 * 20,
    long_topic=True,
    prepared_every=50,
    seed=11,
)


async def _tier_once(store: Path, cold: str, state: Path, **kw: object) -> int:
    settings = settings_for(store, cold, state, **kw)
    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        report = await rt.dispatcher.catch_up()
        assert not report.errors
        return report.messages


async def test_memory(store: Path, tmp_path: Path) -> None:
    reset_memory_stores()
    n = await _tier_once(store, "memory://e2e", tmp_path / "state")
    assert n == SPEC.messages - SPEC.messages // 50  # prepared records have no unit
    async with open_backend("memory://e2e") as backend:
        cold = await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)
    assert all(len(q.manifests) > 1 for q in cold.values())
    # A second pass finds nothing to do and changes nothing.
    assert await _tier_once(store, "memory://e2e", tmp_path / "state") == 0


async def test_posix(store: Path, tmp_path: Path) -> None:
    cold_dir = tmp_path / "cold"
    await _tier_once(store, str(cold_dir), tmp_path / "state")
    async with open_backend(str(cold_dir)) as backend:
        await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)
    assert not [p for p in cold_dir.rglob("*") if ".tmp" in p.name]


@pytest.mark.s3
async def test_s3(store: Path, tmp_path: Path, s3_bucket: S3Bucket) -> None:
    url = f"{s3_bucket.url}/tiered"
    await _tier_once(store, url, tmp_path / "state", cold__endpoint_url=s3_bucket.endpoint_url)
    async with open_backend(url, options=s3_bucket.options()) as backend:
        await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)


async def test_topic_the_cold_store_cannot_name_is_refused_others_go_on(
    store: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import shutil

    shutil.copytree(store / "consumequeue" / "SynthTopic0", store / "consumequeue" / "_private")
    reset_memory_stores()
    n = await _tier_once(store, "memory://refuse", tmp_path / "state")
    assert n == SPEC.messages - SPEC.messages // 50
    assert "topic '_private' is not tiered: topic name '_private' starts with '_'" in caplog.text


async def test_catalogue_behind_cold_adopts_and_never_rewrites(store: Path, tmp_path: Path) -> None:
    cold = tmp_path / "cold"
    settings = settings_for(store, str(cold), tmp_path / "state")
    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.catch_up()
        before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in cold.rglob("*") if p.is_file()}
        row = rt.catalogue.queues.all()[0]
        second = rt.catalogue.segments.of(row.topic, row.queue_id)[1]
        # The catalogue loses its newest rows (e.g. restored from an old backup).
        rt.catalogue.segments.truncate(row.topic, row.queue_id, second.start_offset)
        report = await rt.dispatcher.catch_up()
        assert report.segments == report.slices == 0
        fresh = rt.catalogue.queues.get(row.topic, row.queue_id)
        assert fresh is not None
        assert fresh.cold_commit == row.cold_commit  # adopted back from cold
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in cold.rglob("*") if p.is_file()}
    lease = [p for p in before if p.name == "_lease.json"]
    # Nothing that was there is touched: every object committed before is byte-for-byte
    # and mtime-for-mtime the same.
    assert {p: after.get(p) for p in before if p not in lease} == {
        p: v for p, v in before.items() if p not in lease
    }
    # The one upload that found the manifest already there deleted its own objects
    # (names of its own attempt, which no manifest can name): nothing new is left but
    # the lease's lock file.
    assert {p.name for p in set(after) - set(before)} <= {"._lease.json.lock"}
