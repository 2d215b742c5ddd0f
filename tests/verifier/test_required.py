"""The required range: cold says itself what it must hold (tiering, init and retention
records), so deleted data, a wrong prefix or a manifest that lies is never CLEAN.

Each case of issue 26's table is here on POSIX (the deleted-queue and missing-head cases
also on S3, in test_s3.py); the stores that must keep their verdict (healthy, expired
heads, an accepted loss of offsets the broker really deleted, a partly excluded topic
set) are here too. Issue 34's cases (records checked against hot) are in
test_records_vs_hot.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.coldimage import init_record, tiering_record
from tests.support.verification.report_doc import found, queue_doc
from tieredstore.cli.main import main as cli_main
from tieredstore.cold.layout import QueuePath, broker_prefix, init_key
from tieredstore.cold.loss import LossRecord
from tieredstore.cold.provenance import QueueInit, RetentionMark
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.topic_rules import TopicRules

from .conftest import World, delete_hot_head

pytestmark = pytest.mark.spark

Q = QueueKey("SynthTopic1", 0)
QP = QueuePath(CLUSTER, BROKER, Q.topic, Q.queue_id)


def hot_range(world: World, q: QueueKey = Q) -> tuple[int, int]:
    rng = HotStore(world.hot).queue_range(q.topic, q.queue_id)
    return rng.min, rng.max


def drop_queue_data(world: World, q: QueueKey = Q) -> None:
    """Delete the queue's whole cold directory (its records beside the topics stay)."""
    shutil.rmtree(world.cold / broker_prefix(CLUSTER, BROKER) / q.topic / str(q.queue_id))


def drop_head(world: World, n: int) -> int:
    """Delete the first ``n`` segments of Q; return the new cold min."""
    ms = world.manifests(Q)
    for m in ms[:n]:
        for key in (m.key, m.commit_log_key, m.consume_queue_key):
            world.path(key).unlink()
    return ms[n].start_offset


def put(world: World, key: str, data: bytes) -> None:
    world.path(key).parent.mkdir(parents=True, exist_ok=True)
    world.path(key).write_bytes(data)


def retention_mark(first: int) -> RetentionMark:
    return RetentionMark(
        1, CLUSTER, BROKER, Q.topic, Q.queue_id, "test-writer", 1, first,
        "expired-manifest-key", 1_700_000_000_000, 1_700_000_100_000,
    )  # fmt: skip


# -- the table: each case ends CORRUPT, or exit 3 -----------------------------------------


def test_a_deleted_queue_directory_is_hot_not_covered(world: World) -> None:
    drop_queue_data(world)
    lo, hi = hot_range(world)
    assert hi - lo > 400  # hot holds all of the queue's messages
    code, doc = world.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {("hot_not_covered", Q.topic, Q.queue_id, lo, hi, None)}
    q = queue_doc(doc, Q)
    assert (q["status"], q["required_start"], q["segments"]) == ("corrupt", 0, 0)
    # In the report it is red with its class, not amber lag.
    page = (world.out / "report.html").read_text()
    assert f"hot_not_covered [{lo}, {hi})" in page and f"lag [{lo}, {hi})" not in page
    assert 'class="status-corrupt" title="hot_not_covered"' in page


def test_a_deleted_queue_without_its_init_record_is_still_corrupt(world: World) -> None:
    drop_queue_data(world)
    world.path(init_key(QP)).unlink()
    lo, hi = hot_range(world)
    code, doc = world.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert ("hot_not_covered", Q.topic, Q.queue_id, lo, hi, None) in found(doc)


@pytest.mark.parametrize("segments", [1, 2])
def test_deleted_head_segments_are_a_missing_head(world: World, segments: int) -> None:
    cold_min = drop_head(world, segments)
    code, doc = world.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {("missing_head", Q.topic, Q.queue_id, 0, cold_min, None)}


def test_a_missing_head_is_found_where_hot_no_longer_has_it(hot_copy: World) -> None:
    oldest = sorted((hot_copy.hot / "commitlog").iterdir())[0]
    oldest.unlink()  # the broker deleted the head on its side too
    cold_min = drop_head(hot_copy, 1)
    code, doc = hot_copy.verify()
    assert code == 2
    assert ("missing_head", Q.topic, Q.queue_id, 0, cold_min, None) in found(doc)


def _cli(world: World, tmp_path: Path, cold: str, broker: str) -> int:
    out = tmp_path / "refused"
    code = cli_main(
        ["verify", "--hot", str(world.hot), "--cold", cold, "--cluster", CLUSTER,
         "--broker", broker, "--out", str(out), "--lag-allowance", "0"]
    )  # fmt: skip
    assert not (out / "verify.prom").exists() and not (out / "report.json").exists()
    return code


def test_a_broker_never_tiered_is_refused_naming_the_brokers_there(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli(world, tmp_path, str(world.cold), "broker-b") == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "broker 'broker-b'" in err and "_tiering.json" in err
    assert f"brokers tiered in that cluster there: {BROKER}" in err


def test_a_cold_root_one_level_too_high_is_refused(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.move(world.cold, tmp_path / "bucket" / "tiered")
    assert _cli(world, tmp_path, str(tmp_path / "bucket"), BROKER) == 3
    err = capsys.readouterr().err
    assert "nothing tiered" in err and "brokers tiered in that cluster there: none" in err


def test_a_manifest_lying_about_its_store_times_is_manifest_mismatch(world: World) -> None:
    m = world.manifests(Q)[2]
    text = m.to_json().decode()
    text = text.replace(f'"min_store_timestamp":{m.min_store_timestamp}', '"min_store_timestamp":1')
    text = text.replace(f'"max_store_timestamp":{m.max_store_timestamp}', '"max_store_timestamp":1')
    world.path(m.key).write_text(text)
    code, doc = world.verify("--level", "content")
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {
        ("manifest_mismatch", Q.topic, Q.queue_id, m.start_offset, m.end_offset, m.key)
    }
    (a,) = doc["anomalies"]
    assert f"[{m.min_store_timestamp}, {m.max_store_timestamp}]" in a["detail"]


# -- verdicts that must not change ---------------------------------------------------------


def test_an_expired_head_with_its_retention_record_is_clean(world: World) -> None:
    cold_min = drop_head(world, 2)
    put(world, retention_mark(cold_min).key, retention_mark(cold_min).to_json())
    code, doc = world.verify()
    assert (code, doc["verdict"], doc["anomalies"]) == (0, "CLEAN", [])
    assert queue_doc(doc, Q)["required_start"] == cold_min


def test_a_retention_record_that_does_not_parse_explains_nothing(world: World) -> None:
    cold_min = drop_head(world, 1)
    mark = retention_mark(cold_min)
    put(world, mark.key, mark.to_json()[:-5])
    code, doc = world.verify()
    assert code == 2
    assert found(doc) == {("missing_head", Q.topic, Q.queue_id, 0, cold_min, None)}
    assert mark.key in doc["unrecognised_objects"]


def test_an_accepted_loss_the_broker_really_deleted_is_dirty(hot_copy: World) -> None:
    cold_min = drop_head(hot_copy, 2)
    delete_hot_head(hot_copy, Q, cold_min)
    loss = LossRecord.new(QP, 0, cold_min, accepted_at_ms=1_700_000_000_000,
                          writer_id="w-1", lease_epoch=2)  # fmt: skip
    put(hot_copy, loss.key, loss.to_json())
    code, doc = hot_copy.verify()
    assert (code, doc["verdict"]) == (1, "DIRTY")
    assert found(doc) == {("lost_before_tiering", Q.topic, Q.queue_id, 0, cold_min, loss.key)}


def test_an_accepted_loss_at_the_head_hot_still_holds_is_corrupt(world: World) -> None:
    cold_min = drop_head(world, 2)
    loss = LossRecord.new(QP, 0, cold_min, accepted_at_ms=1_700_000_000_000,
                          writer_id="w-1", lease_epoch=2)  # fmt: skip
    put(world, loss.key, loss.to_json())
    code, doc = world.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {
        ("impossible_loss_record", Q.topic, Q.queue_id, 0, cold_min, loss.key),
        ("missing_head", Q.topic, Q.queue_id, 0, cold_min, None),
    }


def test_an_excluded_topic_stays_clean_and_the_rule_is_named(world: World) -> None:
    rules = TopicRules(exclude=("SynthTopic2",))
    record = tiering_record(rules)
    put(world, record.key, record.to_json())
    for qid in (0, 1):
        q = QueueKey("SynthTopic2", qid)
        drop_queue_data(world, q)
        world.path(init_key(QueuePath(CLUSTER, BROKER, q.topic, qid))).unlink()
    code, doc = world.verify()
    assert (code, doc["verdict"], doc["anomalies"]) == (0, "CLEAN", [])
    excluded = queue_doc(doc, QueueKey("SynthTopic2", 1))
    assert excluded["status"] == "excluded" and excluded["tiering"]["tiered"] is False
    assert "exclude_topics 'SynthTopic2'" in excluded["tiering"]["rule"]
    assert queue_doc(doc, Q)["tiering"]["tiered"] is True


def test_a_queue_initialised_at_latest_owes_nothing_before_its_init(world: World) -> None:
    drop_queue_data(world)
    _, hi = hot_range(world)
    late = init_record(Q, hi, "latest")
    put(world, late.key, late.to_json())
    code, doc = world.verify()
    assert (code, doc["verdict"]) == (0, "CLEAN")
    assert queue_doc(doc, Q)["status"] == "untiered"


def test_a_store_without_init_records_is_unproven_start(world: World) -> None:
    world.path(init_key(QP)).unlink()
    code, doc = world.verify()
    assert (code, doc["verdict"]) == (1, "DIRTY")
    assert found(doc) == {("unproven_start", Q.topic, Q.queue_id, 0, 0, None)}


def test_an_init_record_of_another_queue_is_not_taken(world: World) -> None:
    other = QueueInit.new(QueuePath(CLUSTER, BROKER, Q.topic, 1), 0, "earliest",
                          created_at_ms=1, writer_id="w", lease_epoch=1)  # fmt: skip
    put(world, init_key(QP), other.to_json())  # copied to the wrong place
    code, doc = world.verify()
    assert (code, doc["verdict"]) == (1, "DIRTY")
    assert init_key(QP) in doc["unrecognised_objects"]
    assert json.loads(world.path(init_key(QP)).read_text())["queue_id"] == 1
