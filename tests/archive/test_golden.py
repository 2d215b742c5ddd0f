"""The data source on the store a real RocketMQ 5.3 broker wrote (tiered by the sidecar):
every row equals what ``tieredstore read`` returns and what the producers sent."""

from __future__ import annotations

import hashlib

import pytest
from pyspark.sql import SparkSession

from tests.support.broker.make_golden import GOLDEN_MANIFEST
from tests.support.broker.manifest import Manifest as GoldenManifest
from tests.support.broker.traffic import Kind
from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.verifier.archive import read_archive

from .conftest import Archive, normalise

pytestmark = pytest.mark.spark


def test_golden_rows_equal_read_and_what_was_sent(spark: SparkSession, golden: Archive) -> None:
    got = normalise(read_archive(spark, str(golden.cold), CLUSTER, BROKER).toArrow().to_pylist())
    assert got == normalise(golden.rows())
    # Retry topics (%RETRY%<group>) and the long (v2 magic) topic are read too.
    topics = {r["topic"] for r in got}
    assert any(t.startswith("%RETRY%") for t in topics)
    assert any(len(t) > 127 for t in topics)
    by_id = {r["msg_id"]: r for r in got}
    sent = [m for m in GoldenManifest.load(GOLDEN_MANIFEST).messages if m.kind is Kind.NORMAL]
    assert len(sent) > 600
    for m in sent:
        row = by_id[m.msg_id]
        assert (row["topic"], row["queue_id"], row["queue_offset"]) == (
            m.topic, m.queue_id, m.queue_offset,
        )  # fmt: skip
        assert hashlib.sha256(row["body"]).hexdigest() == m.body_sha256
        assert row["body_size"] == m.body_length
        assert (row["tags"], tuple(row["keys"])) == (m.tags, m.keys)
        assert dict(m.properties).items() <= row["properties"].items()
