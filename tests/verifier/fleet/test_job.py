"""The fleet job (verify --fleet) on the suite's local Spark: four brokers of one synthetic
store, fingerprinted by ``tieredstore fingerprint``, three of them damaged."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.stores.coldimage import write_local
from tests.support.stores.compressed import compress_every_other, silent_flip
from tests.support.verification.fleet import (
    CLEAN,
    DELETED,
    FLIPPED,
    NO_FINGERPRINT,
    damage_delete_queue,
    damage_flip,
    fleet_image,
)
from tieredstore.cli.main import main as cli_main
from tieredstore.clock import SystemClock
from tieredstore.cold.digests import DigestAlgorithm, digest
from tieredstore.findings import FindingKind
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.hot.store import QueueKey
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.verifier.fleet.job import FleetOptions, verify_fleet
from tieredstore.verifier.job import verify
from tieredstore.verifier.verdict import Verdict
from tieredstore.verifier.vocabulary import Level, VerifyOptions

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CLUSTER = "FleetCluster"
BROKERS = [CLEAN, FLIPPED, NO_FINGERPRINT, DELETED]
SPEC = SynthSpec(
    topics=2, queues=2, messages=1200, body_min=100, body_max=300,
    commitlog_file_size=256 << 10, cq_file_size=200 * CQ_UNIT_SIZE, seed=35,
)  # fmt: skip
BLOCK = 64
FLIP_Q = QueueKey("SynthTopic0", 1)
GONE_Q = QueueKey("SynthTopic1", 0)


@dataclass(frozen=True)
class Fleet:
    hot: Path
    cold: Path
    flipped_offset: int


def fingerprint(hot: Path, cold: Path, broker: str) -> int:
    return cli_main([
        "fingerprint", "--store", str(hot), "--cold", str(cold), "--cluster", CLUSTER,
        "--broker", broker, "--block-offsets", str(BLOCK), "--max-bytes-per-second", "0",
    ])  # fmt: skip


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    base = tmp_path_factory.mktemp("fleet")
    synthesize(base / "hot", SPEC)
    image = fleet_image(base / "hot", CLUSTER, BROKERS, segment_messages=100)
    offset, _ = damage_flip(image, CLUSTER, FLIPPED, FLIP_Q)
    damage_delete_queue(image, CLUSTER, DELETED, GONE_Q)
    write_local(image, base / "cold")
    for broker in (CLEAN, FLIPPED, DELETED):
        assert fingerprint(base / "hot", base / "cold", broker) == 0
    return Fleet(base / "hot", base / "cold", offset)


def test_each_broker_gets_its_verdict_and_the_fleet_its_worst(
    fleet: Fleet, spark: SparkSession
) -> None:
    result = verify_fleet(spark, FleetOptions(str(fleet.cold), SystemClock().now_ms()))
    verdicts = {r.options.broker: r.verdict for r in result.brokers}
    assert verdicts == {
        CLEAN: Verdict.CLEAN,
        FLIPPED: Verdict.CORRUPT,
        NO_FINGERPRINT: Verdict.INCOMPLETE,
        DELETED: Verdict.CORRUPT,
    }
    assert result.verdict is Verdict.CORRUPT
    assert [r.verdict.rank for r in result.brokers] == sorted(
        (r.verdict.rank for r in result.brokers), reverse=True
    )
    by = {r.options.broker: r for r in result.brokers}
    (bad,) = by[FLIPPED].anomalies
    assert bad.anomaly is FindingKind.CONTENT_MISMATCH
    assert (bad.topic, bad.queue_id) == (FLIP_Q.topic, FLIP_Q.queue_id)
    assert bad.start is not None and bad.end is not None
    assert bad.start <= fleet.flipped_offset < bad.end and bad.end - bad.start <= BLOCK
    assert f"{CLUSTER}/{FLIPPED}" in bad.detail and "block" in bad.detail
    kinds = {(a.anomaly, a.topic, a.queue_id) for a in by[DELETED].anomalies}
    assert kinds == {(FindingKind.HOT_NOT_COVERED, GONE_Q.topic, GONE_Q.queue_id)}
    assert by[NO_FINGERPRINT].anomalies == ()
    assert by[NO_FINGERPRINT].incomplete == "no hot fingerprint"
    assert by[CLEAN].totals.bytes_compared > 0


def test_a_fingerprint_older_than_the_allowed_age_is_incomplete_never_clean(
    fleet: Fleet, spark: SparkSession
) -> None:
    later = SystemClock().now_ms() + 37 * 3600 * 1000
    result = verify_fleet(spark, FleetOptions(str(fleet.cold), later, clusters=(CLUSTER,)))
    by = {r.options.broker: r for r in result.brokers}
    assert by[CLEAN].verdict is Verdict.INCOMPLETE
    assert by[CLEAN].incomplete is not None and "older than" in by[CLEAN].incomplete


def test_the_fleet_verdict_agrees_with_verify_hot_on_every_broker(
    fleet: Fleet, spark: SparkSession
) -> None:
    fleet_result = verify_fleet(spark, FleetOptions(str(fleet.cold), SystemClock().now_ms()))
    for r in fleet_result.brokers:
        single = verify(
            spark,
            VerifyOptions(
                hot=fleet.hot, cold_url=str(fleet.cold), cluster=CLUSTER,
                broker=r.options.broker, now_ms=SystemClock().now_ms(), level=Level.CONTENT,
            ),
        )  # fmt: skip
        if r.options.broker == NO_FINGERPRINT:  # the job alone cannot prove it
            assert (single.verdict, r.verdict) == (Verdict.CLEAN, Verdict.INCOMPLETE)
            continue
        assert single.verdict is r.verdict, r.options.broker
        assert {(a.topic, a.queue_id) for a in single.anomalies} == {
            (a.topic, a.queue_id) for a in r.anomalies
        }


def test_verify_fleet_command_writes_the_fleet_page_and_exits_with_the_worst(
    fleet: Fleet, spark: SparkSession, tmp_path: Path
) -> None:
    out = tmp_path / "fleet"
    prom = tmp_path / "textfile" / "fleet.prom"
    prom.parent.mkdir()
    code = cli_main(
        [
            "verify",
            "--fleet",
            "--cold",
            str(fleet.cold),
            "--out",
            str(out),
            "--metrics-file",
            str(prom),
        ]
    )
    assert code == Verdict.CORRUPT.exit_code
    doc = json.loads((out / "fleet.json").read_text())
    assert [b["verdict"] for b in doc["brokers"]][:2] == ["CORRUPT", "CORRUPT"]
    assert {b["broker"]: b["verdict"] for b in doc["brokers"]}[NO_FINGERPRINT] == "INCOMPLETE"
    nofp = json.loads((out / CLUSTER / NO_FINGERPRINT / "report.json").read_text())
    assert (nofp["verdict"], nofp["exit_code"]) == ("INCOMPLETE", Verdict.INCOMPLETE.exit_code)
    assert nofp["incomplete"] == "no hot fingerprint"
    assert (
        "Not proven: no hot fingerprint"
        in (out / CLUSTER / NO_FINGERPRINT / "report.html").read_text()
    )
    page = (out / "fleet.html").read_text()
    assert f'href="{CLUSTER}/{CLEAN}/report.html"' in page
    metrics = (out / "verify.prom").read_text()
    assert f'broker="{NO_FINGERPRINT}"' in metrics and 'verdict="INCOMPLETE"' in metrics
    assert prom.read_text() == metrics


def test_compressed_segments_verify_clean_and_a_flip_is_a_digest_mismatch(
    tmp_path: Path, spark: SparkSession
) -> None:
    synthesize(tmp_path / "hot", SPEC)
    write_local(
        fleet_image(tmp_path / "hot", CLUSTER, [CLEAN], segment_messages=100), tmp_path / "cold"
    )
    compressed = compress_every_other(tmp_path / "cold")
    assert compressed
    assert fingerprint(tmp_path / "hot", tmp_path / "cold", CLEAN) == 0
    options = FleetOptions(str(tmp_path / "cold"), SystemClock().now_ms())
    (result,) = verify_fleet(spark, options).brokers
    assert (result.verdict, result.anomalies) == (Verdict.CLEAN, ())

    m = compressed[1]
    path = tmp_path / "cold" / m.commit_log_key
    stored = path.read_bytes()
    data = bytearray(stored)
    data[len(data) // 3] ^= 0x10
    path.write_bytes(bytes(data))
    (result,) = verify_fleet(spark, options).brokers
    assert result.verdict is Verdict.CORRUPT
    assert {(a.anomaly, a.object_key) for a in result.anomalies} == {
        (FindingKind.DIGEST_MISMATCH, m.commit_log_key)
    }

    # a flip in bits zstd never reads: only the stored digest tells
    path.write_bytes(silent_flip(stored))
    assert m.commit_log.framed is not None
    (result,) = verify_fleet(spark, options).brokers
    assert result.verdict is Verdict.CORRUPT
    bad = digest(path.read_bytes(), DigestAlgorithm.CRC32C)
    assert [(a.anomaly, a.object_key, a.detail) for a in result.anomalies] == [(
        FindingKind.DIGEST_MISMATCH, m.commit_log_key,
        f"stored digest is {bad}, its manifest says {m.commit_log.framed.stored_digest}",
    )]  # fmt: skip
