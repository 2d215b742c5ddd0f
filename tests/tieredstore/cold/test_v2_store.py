"""A committed cold store written by the previous version stays readable and verifiable.

``tests/data/cold_v2/`` was tiered by tieredstore 0.2 (format 2 manifests, no fence
markers) from the synthetic store :data:`SPEC` (``synthesize`` is deterministic, so the
hot side is made again here). This version must read it, rebuild a catalogue from it,
find nothing to collect in it, go on tiering into it, and fence in it; and the Spark
verifier must call the result, fence marker included, CLEAN at content level.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.backends import open_backend
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.cold.manifest import FenceMarker, read_stored
from tieredstore.dispatcher.maintenance.gc import delete_garbage, scan_garbage
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize
from tieredstore.metadata.reconcile import rebuild
from tieredstore.verifier.job import verify
from tieredstore.verifier.vocabulary import Level, Verdict, VerifyOptions

pytestmark = pytest.mark.spark

GOLDEN = Path(__file__).parents[2] / "data" / "cold_v2"
SPEC = SynthSpec(
    topics=2, queues=2, messages=120, body_min=50, body_max=300, seed=2,
    start_time=1_790_000_000_000, interval_ms=10,
)  # fmt: skip


async def test_a_v2_cold_store_reads_rebuilds_tiers_on_and_verifies(
    tmp_path: Path, spark: SparkSession
) -> None:
    store, cold = tmp_path / "store", tmp_path / "cold"
    synthesize(store, SPEC)
    shutil.copytree(GOLDEN, cold)
    async with open_backend(str(cold)) as backend:
        await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)
        report = await rebuild(backend, tmp_path / "rebuilt", cluster=CLUSTER, broker=BROKER)
        assert report.clean and len(report.adopted) == 8
        scan = await scan_garbage(
            backend, cluster=CLUSTER, broker=BROKER, now_ms=time.time_ns() // 10**6, grace_s=0
        )
        assert (scan.garbage, scan.findings, scan.fences, scan.manifests) == ((), (), (), 8)
    # This version tiers on into it (its state: the rebuilt catalogue) ...
    SyntheticStore.open(store).append(60)
    settings = settings_for(store, str(cold), tmp_path / "rebuilt", tiering__guard="none",
                            tiering__segment_max_bytes="6K")  # fmt: skip
    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.catch_up()
        # ... and GC fences an abandoned upload's segment start in it.
        seg = rt.catalogue.segments.of("SynthTopic0", 0)[-1].manifest
        for key in (seg.commit_log_key, seg.consume_queue_key):
            orphan = key.rsplit(".", 1)[0] + ".00000000000000aa"
            shutil.copy(cold / key, cold / orphan)
            os.utime(cold / orphan, (time.time() - 60, time.time() - 60))  # older than grace
        (cold / seg.key).rename(tmp_path / "held")  # pretend it was never created
        scan = await scan_garbage(
            rt.backend, cluster=CLUSTER, broker=BROKER, now_ms=time.time_ns() // 10**6,
            grace_s=0, protected={seg.commit_log_key, seg.consume_queue_key},
        )  # fmt: skip
        assert [f.key for f in scan.fences] == [seg.key]
        await delete_garbage(scan, backend=rt.backend, lease=rt.dispatcher.lease)
        assert isinstance(read_stored((cold / seg.key).read_bytes(), seg.key), FenceMarker)
        await rt.backend.delete(seg.key)  # (the test's own hand: put the segment back)
        (tmp_path / "held").rename(cold / seg.key)
        beyond = FenceMarker(CLUSTER, BROKER, seg.topic, 0, seg.end_offset + 1000,
                             lease_epoch=9, writer_id="gc@h", created_at_ms=1)  # fmt: skip
        await rt.backend.create(beyond.key, beyond.to_json())  # stays: the verifier skips it
        await rt.dispatcher.lease.release()
    result = verify(
        spark,
        VerifyOptions(
            hot=store, cold_url=str(cold), cluster=CLUSTER, broker=BROKER,
            now_ms=time.time_ns() // 1_000_000, level=Level.CONTENT,
        ),
    )  # fmt: skip
    assert result.verdict is Verdict.CLEAN, [str(a) for a in result.anomalies][:10]
