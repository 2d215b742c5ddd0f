"""Offsets lost before tiering, end to end through ``tieredstore verify``: unaccepted they
are CORRUPT (``hot_not_covered``); accepted by ``resume --accept-loss`` they are one
``lost_before_tiering`` anomaly each (range, when, by whom) and the verdict is DIRTY."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.support.sidecar.settings import BROKER, CLUSTER, location_args
from tests.support.stores.lost_head import SPEC as LOSSY_SPEC
from tests.support.stores.lost_head import TOPIC, lose_untiered_head
from tieredstore.cli.main import main as cli_main
from tieredstore.cold.layout import QueuePath
from tieredstore.cold.loss import LossRecord
from tieredstore.cold.manifest import Manifest
from tieredstore.hot.store import QueueKey
from tieredstore.hot.synth import synthesize

from .conftest import World, delete_hot_head

pytestmark = pytest.mark.spark

Q = QueueKey("SynthTopic1", 0)
ACCEPTED_MS = 1_700_000_123_456


def _found(doc: dict[str, Any]) -> set[tuple[Any, ...]]:
    return {
        (a["anomaly"], a["severity"], a["queue_id"], a["start"], a["end"], a["object_key"])
        for a in doc["anomalies"]
    }


def _lose_with_record(world: World, m: Manifest, cut: int = 0) -> LossRecord:
    """Delete segment ``m`` from cold and write a loss record for its range in its place
    (its last ``cut`` bytes missing)."""
    for key in (m.key, m.commit_log_key, m.consume_queue_key):
        world.path(key).unlink()
    record = LossRecord.new(
        QueuePath(CLUSTER, BROKER, Q.topic, Q.queue_id), m.start_offset, m.end_offset,
        accepted_at_ms=ACCEPTED_MS, writer_id="w-1", lease_epoch=4,
    )  # fmt: skip
    world.path(record.key).parent.mkdir(parents=True)
    data = record.to_json()
    world.path(record.key).write_bytes(data[: len(data) - cut])
    return record


def test_an_accepted_loss_in_the_middle_is_dirty_not_a_gap(hot_copy: World) -> None:
    m = hot_copy.manifests(Q)[3]
    record = _lose_with_record(hot_copy, m)
    delete_hot_head(hot_copy, Q, m.end_offset)  # the broker deleted them (loss over
    # offsets hot still holds: test_records_vs_hot.py)
    code, doc = hot_copy.verify()
    assert (code, doc["verdict"]) == (1, "DIRTY")
    assert _found(doc) == {
        ("lost_before_tiering", "DIRTY", Q.queue_id, m.start_offset, m.end_offset, record.key)
    }
    (anomaly,) = doc["anomalies"]
    assert "2023-11-14T22:15:23.456+00:00 by writer w-1 (lease epoch 4)" in anomaly["detail"]
    assert doc["unrecognised_objects"] == []


def test_a_loss_record_that_does_not_parse_acknowledges_nothing(world: World) -> None:
    m = world.manifests(Q)[3]
    record = _lose_with_record(world, m, cut=1)
    code, doc = world.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert _found(doc) == {("gap", "CORRUPT", Q.queue_id, m.start_offset, m.end_offset, None)}
    assert doc["unrecognised_objects"] == [record.key]


def _verify(store: Path, cold: Path, out: Path) -> tuple[int, dict[str, Any]]:
    code = cli_main(
        ["verify", "--hot", str(store), "--cold", str(cold), "--cluster", CLUSTER,
         "--broker", BROKER, "--out", str(out), "--lag-allowance", "0"]
    )  # fmt: skip
    return code, json.loads((out / "report.json").read_text())


def test_paused_is_corrupt_resumed_is_dirty(tmp_path: Path, spark: SparkSession) -> None:
    store, cold, state = tmp_path / "store", tmp_path / "cold", tmp_path / "state"
    synthesize(store, LOSSY_SPEC)
    assert cli_main(["run", "--once", *location_args(store, str(cold), state)]) == 0
    start, end = lose_untiered_head(store)
    where = ["--store", str(store), "--cold", str(cold), "--state-dir", str(state),
             "--cluster", CLUSTER, "--broker", BROKER]  # fmt: skip
    assert cli_main(["run", "--once", *where]) == 1  # PAUSED

    code, doc = _verify(store, cold, tmp_path / "paused")
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    (a,) = doc["anomalies"]
    assert (a["anomaly"], a["start"]) == ("hot_not_covered", start)
    assert f"{end - start} of them already deleted from hot" in a["detail"]

    assert cli_main(["resume", "--topic", TOPIC, "--queue", "0", "--accept-loss", *where]) == 0
    assert cli_main(["run", "--once", *where]) == 0
    code, doc = _verify(store, cold, tmp_path / "resumed")
    assert (code, doc["verdict"]) == (1, "DIRTY")
    (a,) = doc["anomalies"]
    assert (a["anomaly"], a["severity"], a["start"], a["end"], a["count"]) == (
        "lost_before_tiering", "DIRTY", start, end, end - start,
    )  # fmt: skip
    assert a["object_key"].endswith(".json") and "/LOSS/" in a["object_key"]
    assert "accepted at" in a["detail"]
