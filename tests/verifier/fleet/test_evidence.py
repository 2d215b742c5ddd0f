"""Issue 46, the fleet job's rows: a fingerprint from the future cannot pin the view, a
record that differs past a retention cut is CORRUPT as the single-broker job says, and
a queue that never fills a 4,096-offset block is compared (leaf digests, format 3).

The first two rows run on POSIX and on the suite's S3 server (moto on loopback): the
cold directory the module builds is copied whole into a fresh bucket (:func:`site`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
import pytest
from pyspark.sql import SparkSession

from tests.support.moto import S3Bucket
from tests.support.stores.coldimage import ColdImage, write_local
from tests.support.verification.fleet import damage_flip, fleet_image
from tieredstore.cli.main import main as cli_main
from tieredstore.clock import SystemClock, VirtualClock
from tieredstore.cold.fingerprint import QueuePrint
from tieredstore.cold.layout import fingerprint_key
from tieredstore.cold.manifest import Manifest
from tieredstore.cold.provenance import RetentionMark
from tieredstore.findings import FindingKind
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.verifier.fleet.job import FleetOptions, verify_fleet
from tieredstore.verifier.fleet.take import take_fingerprint
from tieredstore.verifier.job import verify
from tieredstore.verifier.outcome import VerificationResult
from tieredstore.verifier.verdict import Verdict
from tieredstore.verifier.vocabulary import LagAllowance, LagUnit, Level, VerifyOptions

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CLUSTER = "EvidenceFleet"
AHEAD, CUT, TRICKLE = "broker-ahead", "broker-cut", "broker-trickle"
SPEC = SynthSpec(
    topics=1, queues=2, messages=1200, body_min=100, body_max=300,
    commitlog_file_size=256 << 10, cq_file_size=200 * CQ_UNIT_SIZE, seed=46,
)  # fmt: skip
Q = QueueKey("SynthTopic0", 1)
DAY_MS = 24 * 3600 * 1000
#: What hot held when the clock ran ahead: each queue's first 200 offsets.
EARLY_MAX = 200
NO_LAG = LagAllowance(LagUnit.MESSAGES, 0)


@dataclass(frozen=True)
class Stores:
    hot: Path
    cold: Path
    flipped_offset: int
    future_key: str


def _manifests(image: ColdImage, broker: str, q: QueueKey) -> list[Manifest]:
    mark = f"/{broker}/{q.topic}/{q.queue_id}/MANIFEST/"
    found = [Manifest.from_json(v, where=k) for k, v in image.objects.items() if mark in k]
    return sorted(found, key=lambda m: m.start_offset)


def _drop(image: ColdImage, m: Manifest) -> None:
    for key in (m.key, m.commit_log_key, m.consume_queue_key):
        del image.objects[key]


def _early(q: QueuePrint) -> QueuePrint:
    """What a fingerprint of ``q`` taken when hot held ``[hot_min, EARLY_MAX)`` held (the
    blocks are fixed runs of offsets, so the same ones, cut there)."""
    blocks = tuple(b for b in q.blocks if b.end <= EARLY_MAX)
    assert blocks[-1].end == EARLY_MAX
    stored = tuple((t, min(o, EARLY_MAX)) for t, o in q.stored_from)
    return dataclasses.replace(q, hot_max=EARLY_MAX, blocks=blocks, stored_from=stored)


def fingerprint(hot: Path, cold: Path, broker: str) -> None:
    assert cli_main([
        "fingerprint", "--store", str(hot), "--cold", str(cold), "--cluster", CLUSTER,
        "--broker", broker, "--max-bytes-per-second", "0",
    ]) == 0  # fmt: skip


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    base = tmp_path_factory.mktemp("evidence")
    hot, cold = base / "hot", base / "cold"
    synthesize(hot, SPEC)
    image = fleet_image(hot, CLUSTER, [AHEAD, CUT, TRICKLE], segment_messages=100)
    # AHEAD: cold lost what was tiered after its first fingerprint (taken a day ahead).
    for m in _manifests(image, AHEAD, Q):
        if m.start_offset >= EARLY_MAX:
            _drop(image, m)
    # CUT: retention removed Q's first segment (on record); a later record then differs,
    # the digest in its manifest updated to match.
    first = _manifests(image, CUT, Q)[0]
    _drop(image, first)
    mark = RetentionMark(1, CLUSTER, CUT, Q.topic, Q.queue_id, "test-writer", 1,
                         first.end_offset, first.key, first.max_store_timestamp,
                         1_700_000_100_000)  # fmt: skip
    image.objects[mark.key] = mark.to_json()
    flipped, _ = damage_flip(image, CLUSTER, CUT, Q, record=70)
    # TRICKLE: the newest 100 offsets of each queue are not tiered yet (the lag).
    for q in (QueueKey("SynthTopic0", 0), Q):
        _drop(image, _manifests(image, TRICKLE, q)[-1])
    write_local(image, cold)
    ahead = VirtualClock(SystemClock().now_ms() + DAY_MS)
    fp = asyncio.run(take_fingerprint(HotStore(hot), cluster=CLUSTER, broker=AHEAD, clock=ahead,
                                      block_offsets=100))  # fmt: skip
    early = dataclasses.replace(fp, queues=tuple(_early(q) for q in fp.queues), sequence=0)
    future_key = fingerprint_key(CLUSTER, AHEAD, stamp_ms=early.taken_ms, sequence=0)
    (cold / future_key).parent.mkdir(parents=True)
    (cold / future_key).write_bytes(early.to_bytes())
    for broker in (AHEAD, CUT, TRICKLE):
        fingerprint(hot, cold, broker)
    return Stores(hot, cold, flipped, future_key)


@dataclass(frozen=True)
class Site:
    """Where the verifiers read the module's cold store: its directory, or a bucket."""

    url: str
    storage: Mapping[str, Any] = field(default_factory=dict)


@pytest.fixture(params=["posix", pytest.param("s3", marks=pytest.mark.s3)])
def site(request: pytest.FixtureRequest, stores: Stores) -> Site:
    if request.param == "posix":
        return Site(str(stores.cold))
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    storage = bucket.fsspec_options()
    fs, root = fsspec.core.url_to_fs(bucket.url, **storage)
    files = [p for p in stores.cold.rglob("*") if p.is_file()]
    fs.pipe({f"{root.rstrip('/')}/{p.relative_to(stores.cold)}": p.read_bytes() for p in files})
    return Site(bucket.url, storage)


def _fleet(site: Site, spark: SparkSession) -> dict[str, VerificationResult]:
    opts = FleetOptions(site.url, SystemClock().now_ms(), lag_allowance=NO_LAG,
                        storage_options=dict(site.storage))  # fmt: skip
    return {r.options.broker: r for r in verify_fleet(spark, opts).brokers}


def _single(stores: Stores, site: Site, spark: SparkSession, broker: str) -> VerificationResult:
    opts = VerifyOptions(
        hot=stores.hot, cold_url=site.url, cluster=CLUSTER, broker=broker,
        now_ms=SystemClock().now_ms(), level=Level.CONTENT, lag_allowance=NO_LAG,
        storage_options=site.storage,
    )  # fmt: skip
    return verify(spark, opts)


def test_a_fingerprint_from_a_clock_a_day_ahead_neither_pins_the_view_nor_hides_loss(
    stores: Stores, site: Site, spark: SparkSession
) -> None:
    ahead = _fleet(site, spark)[AHEAD]
    assert ahead.verdict is Verdict.CORRUPT
    assert {(a.anomaly, a.topic, a.queue_id) for a in ahead.anomalies} == {
        (FindingKind.HOT_NOT_COVERED, Q.topic, Q.queue_id)
    }
    assert any(stores.future_key in n and "after the verifier's clock" in n for n in ahead.notes)
    assert "s0000000001-" in str(ahead.options.hot)  # checked against the newest by sequence


def test_a_record_that_differs_past_a_retention_cut_is_corrupt_as_the_single_job_says(
    stores: Stores, site: Site, spark: SparkSession
) -> None:
    cut = _fleet(site, spark)[CUT]
    single = _single(stores, site, spark, CUT)
    assert (cut.verdict, single.verdict) == (Verdict.CORRUPT, Verdict.CORRUPT)
    classes = {(a.anomaly, a.topic, a.queue_id) for a in cut.anomalies}
    assert classes == {(a.anomaly, a.topic, a.queue_id) for a in single.anomalies}
    (bad,) = cut.anomalies
    assert bad.anomaly is FindingKind.CONTENT_MISMATCH
    assert bad.start is not None and bad.end is not None
    assert bad.start <= stores.flipped_offset < bad.end <= bad.start + 64
    q = next(x for x in cut.queues if (x.topic, x.queue_id) == (Q.topic, Q.queue_id))
    # the leaves whole in cold [100, hot max): from 128 on (the last clipped to hot max)
    assert q.cold_max == q.hot_max and q.hot_max is not None
    assert q.units_compared == q.hot_max - 128


def test_a_queue_under_one_block_is_compared_as_far_as_cold_holds_it(
    stores: Stores, spark: SparkSession
) -> None:
    trickle = _fleet(Site(str(stores.cold)), spark)[TRICKLE]
    for q in trickle.queues:  # cold lacks hot's last ~100: the leaves of 64 below cold max
        assert q.cold_max is not None and q.hot_max is not None and q.cold_max < q.hot_max
        assert q.units_compared == q.cold_max // 64 * 64 > 0
        assert 0 < q.bytes_compared < q.cold_bytes
