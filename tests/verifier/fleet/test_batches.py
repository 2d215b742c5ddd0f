"""The fleet's per-queue check reads batch slices by the one reading rule: a broker whose
queues' tails are batch slices is CLEAN, and a flipped byte inside a slice is CORRUPT."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.stores.coldimage import ColdImage, write_local
from tests.support.stores.compressed import TEST_FRAMES, silent_batch_flip
from tests.support.verification.fleet import fleet_image
from tieredstore.cli.main import main as cli_main
from tieredstore.clock import SystemClock
from tieredstore.cold.batch import SlicePart, build_batch
from tieredstore.cold.compressed.frames import FrameSettings
from tieredstore.cold.manifest import Manifest
from tieredstore.findings import FindingKind
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.hot.store import QueueKey
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.verifier.fleet.job import FleetOptions, verify_fleet
from tieredstore.verifier.verdict import Verdict

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CLUSTER = "BatchFleet"
GOOD, BAD = "broker-good", "broker-bad"
SPEC = SynthSpec(
    topics=1, queues=2, messages=600, body_min=100, body_max=300,
    commitlog_file_size=256 << 10, cq_file_size=200 * CQ_UNIT_SIZE, seed=37,
)  # fmt: skip
Q0, Q1 = QueueKey("SynthTopic0", 0), QueueKey("SynthTopic0", 1)


def manifests(image: ColdImage, broker: str, q: QueueKey) -> list[Manifest]:
    mark = f"/{broker}/{q.topic}/{q.queue_id}/MANIFEST/"
    found = [Manifest.from_json(v, where=k) for k, v in image.objects.items() if mark in k]
    return sorted(found, key=lambda m: m.start_offset)


def batch_tails(
    image: ColdImage,
    broker: str,
    *,
    keep: tuple[QueueKey, ...] = (),
    frames: FrameSettings | None = None,
) -> str:
    """Move each queue's last two segments into batch 0 of ``broker`` (``keep``: leave the
    queue's segments too, as after compaction; ``frames``: compressed, format 2); return
    the batch key."""
    parts = []
    for q in (Q0, Q1):
        segs = manifests(image, broker, q)[-2:]
        parts.append(
            SlicePart(
                q.topic,
                q.queue_id,
                segs[0].start_offset,
                segs[-1].end_offset,
                segs[0].cl_base,
                b"".join(image.objects[m.commit_log_key] for m in segs),
                b"".join(image.objects[m.consume_queue_key] for m in segs),
                min(m.min_store_timestamp for m in segs),
                max(m.max_store_timestamp for m in segs),
            )
        )
        if q not in keep:
            for m in segs:
                for key in (m.key, m.commit_log_key, m.consume_queue_key):
                    del image.objects[key]
    index, data = build_batch(
        cluster=CLUSTER, broker=broker, sequence=0, writer_id="w", lease_epoch=1,
        created_at_ms=1_700_000_000_000, parts=parts, frames=frames,
    )  # fmt: skip
    image.objects[index.key] = data
    return index.key


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "compressed"])
def test_the_fleet_reads_batch_slices(
    tmp_path: Path, spark: SparkSession, compressed: bool
) -> None:
    """``compressed``: both batches are format 2, and the bad one's flipped bit is one its
    frames decode the same (only its stored data digest tells)."""
    synthesize(tmp_path / "hot", SPEC)
    image = fleet_image(tmp_path / "hot", CLUSTER, [GOOD, BAD], segment_messages=100)
    frames = TEST_FRAMES if compressed else None
    batch_tails(image, GOOD, keep=(Q1,), frames=frames)  # Q0's tail only in the batch
    bad = batch_tails(image, BAD, frames=frames)
    if compressed:
        image.objects[bad] = silent_batch_flip(image.objects[bad], bad)
    else:
        data = bytearray(image.objects[bad])
        data[-5] ^= 0x01  # inside the last slice's consume-queue bytes
        image.objects[bad] = bytes(data)
    write_local(image, tmp_path / "cold")
    for broker in (GOOD, BAD):
        assert cli_main([
            "fingerprint", "--store", str(tmp_path / "hot"), "--cold", str(tmp_path / "cold"),
            "--cluster", CLUSTER, "--broker", broker, "--block-offsets", "64",
            "--max-bytes-per-second", "0",
        ]) == 0  # fmt: skip
    result = verify_fleet(spark, FleetOptions(str(tmp_path / "cold"), SystemClock().now_ms()))
    by = {r.options.broker: r for r in result.brokers}
    assert by[GOOD].verdict is Verdict.CLEAN, by[GOOD].anomalies
    assert by[GOOD].totals.units_compared == SPEC.messages  # nothing compared twice
    for q in by[GOOD].queues:
        assert q.hot_max is not None and q.hot_min is not None
        assert q.cold_messages == q.hot_max - q.hot_min and q.cold_max == q.hot_max
    assert by[BAD].verdict is Verdict.CORRUPT
    kinds = {(a.anomaly, a.topic, a.queue_id, a.object_key) for a in by[BAD].anomalies}
    assert (FindingKind.DIGEST_MISMATCH, Q1.topic, Q1.queue_id, bad) in kinds
