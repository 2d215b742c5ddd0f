"""verify --fleet over compressed segments (manifest format 3): a broker holding both
kinds is CLEAN, and a flipped byte in a compressed object is the digest mismatch a
flipped byte in a plain one gives."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.stores.coldimage import write_local
from tests.support.stores.compressed import compress_every_other
from tests.support.verification.fleet import CLEAN, fleet_image
from tests.verifier.fleet.test_job import CLUSTER, SPEC, fingerprint
from tieredstore.clock import SystemClock
from tieredstore.findings import FindingKind
from tieredstore.hot.synth import synthesize
from tieredstore.verifier.fleet.job import FleetOptions, verify_fleet
from tieredstore.verifier.verdict import Verdict

pytestmark = [pytest.mark.spark, pytest.mark.slow]


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
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x10
    path.write_bytes(bytes(data))
    (result,) = verify_fleet(spark, options).brokers
    assert result.verdict is Verdict.CORRUPT
    assert {(a.anomaly, a.object_key) for a in result.anomalies} == {
        (FindingKind.DIGEST_MISMATCH, m.commit_log_key)
    }
