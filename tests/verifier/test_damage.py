"""Damage injection, end to end through ``tieredstore verify``: each kind of damage yields
exactly its anomaly class and offset range, the right verdict and exit code."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.coldimage import age, build
from tests.support.verification.report_doc import found, queue_doc
from tieredstore.clock import VirtualClock
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE, decode_units
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.hot.synth import generate_messages
from tieredstore.verifier import schemas

from .conftest import SPEC, World

pytestmark = pytest.mark.spark

Q = QueueKey("SynthTopic1", 0)
TWO_HOURS = 7200.0


def hot_range(world: World, q: QueueKey = Q) -> tuple[int, int]:
    rng = HotStore(world.hot).queue_range(q.topic, q.queue_id)
    return rng.min, rng.max


def test_an_undamaged_store_is_clean(world: World) -> None:
    # What else lives under a broker prefix: ours (ignored) and a crashed write's temp file
    # (listed as unrecognised, never an anomaly).
    broker = world.cold / world.manifests(Q)[0].key.split("/")[0] / BROKER
    extras = {
        "_lease.json": b"{}",
        "_quarantine/SynthTopic1/0/1700000000000/MANIFEST/x.json": b"{}",
        f"_config/consumerOffset.json/1700000000000-{'ab' * 8}": b"{0:1}",
        f"{Q.topic}/{Q.queue_id}/COMMIT_LOG/.x.tmp-{'0' * 32}": b"partial",
    }
    for name, data in extras.items():
        (broker / name).parent.mkdir(parents=True, exist_ok=True)
        (broker / name).write_bytes(data)
    code, doc = world.verify()
    assert (code, doc["verdict"], doc["anomalies"]) == (0, "CLEAN", [])
    temp = f"{broker.relative_to(world.cold)}/{Q.topic}/{Q.queue_id}/COMMIT_LOG/.x.tmp-{'0' * 32}"
    assert doc["unrecognised_objects"] == [temp]
    assert doc["totals"]["queues"] == SPEC.topics * SPEC.queues
    assert doc["totals"]["units_compared"] == SPEC.messages
    assert doc["totals"]["segments"] == sum(len(v) for v in world.image.manifests.values())
    q = queue_doc(doc, Q)
    lo, hi = hot_range(world)
    assert q["hot"] == {"min": lo, "max": hi} == q["cold"]
    assert (q["status"], q["init_offset"], q["lag"]["messages"], q["cold_only"]) == ("ok", 0, 0, 0)


def test_an_undamaged_store_is_clean_at_content_level(world: World) -> None:
    code, doc = world.verify("--level", "content")
    assert (code, doc["verdict"]) == (0, "CLEAN")
    cold_bytes = sum(m.cl_end - m.cl_base for ms in world.image.manifests.values() for m in ms)
    assert doc["totals"]["bytes_compared"] == cold_bytes


def test_deleted_cq_object_is_missing_object(world: World) -> None:
    m = world.manifests(Q)[2]
    world.path(m.consume_queue_key).unlink()
    code, doc = world.verify()
    assert code == 2 and doc["verdict"] == "CORRUPT"
    assert found(doc) == {
        ("missing_object", Q.topic, Q.queue_id, m.start_offset, m.end_offset, m.consume_queue_key)
    }


def test_deleted_manifest_is_a_gap_and_its_young_objects_are_pending(world: World) -> None:
    m = world.manifests(Q)[2]
    world.path(m.key).unlink()
    code, doc = world.verify()
    assert code == 2
    assert found(doc) == {("gap", Q.topic, Q.queue_id, m.start_offset, m.end_offset, None)}
    assert queue_doc(doc, Q)["pending_objects"] == 2


def test_dropped_middle_segment_is_a_gap(world: World) -> None:
    m = world.manifests(Q)[3]
    for key in (m.key, m.commit_log_key, m.consume_queue_key):
        world.path(key).unlink()
    code, doc = world.verify()
    assert code == 2
    assert found(doc) == {("gap", Q.topic, Q.queue_id, m.start_offset, m.end_offset, None)}


def test_segment_duplicated_under_a_second_manifest_is_an_overlap(world: World) -> None:
    ms = world.manifests(Q)
    m = ms[1]
    # The same offsets again, written as if by a second writer at the end of the queue's
    # cold commitlog address space: valid on its own, committed twice in the queue.
    dup = build(HotStore(world.hot), Q, m.start_offset + 10, m.end_offset, ms[-1].cl_end)
    for key, data in (
        (dup.manifest.commit_log_key, dup.commit_log),
        (dup.manifest.consume_queue_key, dup.consume_queue),
        (dup.manifest.key, dup.manifest.to_json()),
    ):
        world.path(key).write_bytes(data)
    code, doc = world.verify()
    assert code == 2
    assert found(doc) == {
        ("overlap", Q.topic, Q.queue_id, m.start_offset + 10, m.end_offset, dup.manifest.key)
    }


def _record_position(world: World, index: int, offset_in_segment: int) -> tuple[int, int]:
    """(queue offset, byte position in the CL object) of one record of segment ``index``."""
    m = world.manifests(Q)[index]
    units = decode_units(world.path(m.consume_queue_key).read_bytes())
    pos = int(units["commitlog_offset"][offset_in_segment]) - m.cl_base
    return m.start_offset + offset_in_segment, pos


def _flip(path: Path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= 0x5A
    path.write_bytes(bytes(data))


def test_flipped_record_byte_is_digest_and_content_mismatch(world: World) -> None:
    m = world.manifests(Q)[1]
    q, pos = _record_position(world, 1, 17)
    _flip(world.path(m.commit_log_key), pos + 95)  # in the body
    code, doc = world.verify("--level", "content")
    assert code == 2
    assert found(doc) == {
        ("digest_mismatch", Q.topic, Q.queue_id, m.start_offset, m.end_offset, m.commit_log_key),
        ("content_mismatch", Q.topic, Q.queue_id, q, q + 1, m.commit_log_key),
    }


def test_offsets_level_does_not_read_commitlog_objects(world: World) -> None:
    m = world.manifests(Q)[1]
    _, pos = _record_position(world, 1, 17)
    _flip(world.path(m.commit_log_key), pos + 95)
    code, doc = world.verify()  # the documented limit of the cheap level
    assert (code, doc["verdict"]) == (0, "CLEAN")


def test_flipped_tags_byte_in_a_cq_object_is_digest_and_content_mismatch(world: World) -> None:
    m = world.manifests(Q)[4]
    path = world.path(m.consume_queue_key)
    _flip(path, 7 * CQ_UNIT_SIZE + 19)  # low byte of unit 7's tagsCode
    code, doc = world.verify()
    assert code == 2
    q = m.start_offset + 7
    assert found(doc) == {
        ("digest_mismatch", Q.topic, Q.queue_id, m.start_offset, m.end_offset, m.consume_queue_key),
        ("content_mismatch", Q.topic, Q.queue_id, q, q + 1, m.consume_queue_key),
    }


def test_truncated_commitlog_object_is_size_mismatch(world: World) -> None:
    m = world.manifests(Q)[2]
    path = world.path(m.commit_log_key)
    os.truncate(path, path.stat().st_size - 50)
    code, doc = world.verify("--level", "content")
    assert code == 2
    assert found(doc) == {
        ("size_mismatch", Q.topic, Q.queue_id, m.start_offset, m.end_offset, m.commit_log_key)
    }


def test_old_objects_without_manifest_are_orphans_and_dirty(world: World) -> None:
    ms = world.manifests(Q)
    last = ms[-1]
    # An abandoned commit: data objects written, manifest never (named off the grid).
    stale = build(HotStore(world.hot), Q, last.start_offset + 1, last.end_offset, last.cl_end)
    young = build(HotStore(world.hot), Q, last.start_offset + 2, last.end_offset, last.cl_end + 1)
    for seg, seconds in ((stale, TWO_HOURS), (young, 60.0)):
        for key, data in (
            (seg.manifest.commit_log_key, seg.commit_log),
            (seg.manifest.consume_queue_key, seg.consume_queue),
        ):
            world.path(key).write_bytes(data)
            age(world.path(key), seconds)
    code, doc = world.verify()
    assert code == 1 and doc["verdict"] == "DIRTY"
    sm = stale.manifest
    assert found(doc) == {
        ("orphan_object", Q.topic, Q.queue_id, None, None, sm.commit_log_key),
        (
            "orphan_object",
            Q.topic,
            Q.queue_id,
            sm.start_offset,
            sm.end_offset,
            sm.consume_queue_key,
        ),
    }
    assert queue_doc(doc, Q)["pending_objects"] == 2  # the young pair: a commit in flight
    code, doc = world.verify("--orphan-grace", "3h")
    assert (code, doc["verdict"]) == (0, "CLEAN")


def _truncate_hot(world: World, q: QueueKey, new_max: int) -> None:
    """Make the hot consume queue end at ``new_max``: zero its units from there on and
    drop the CQ files after it (as a broker that lost unflushed data would)."""
    cq_dir = world.hot / "consumequeue" / q.topic / str(q.queue_id)
    pos = new_max * CQ_UNIT_SIZE
    for f in sorted(cq_dir.iterdir()):
        base = int(f.name)
        if base > pos:
            f.unlink()
        elif base + f.stat().st_size > pos:
            with f.open("r+b") as fh:
                fh.seek(pos - base)
                fh.write(bytes(base + f.stat().st_size - pos))


def test_hot_truncated_below_cold_is_cold_ahead_of_hot(hot_copy: World) -> None:
    _, hot_max = hot_range(hot_copy)
    new_max = hot_max - 130
    _truncate_hot(hot_copy, Q, new_max)
    assert hot_range(hot_copy)[1] == new_max
    code, doc = hot_copy.verify("--level", "content")
    assert code == 2
    assert found(doc) == {("cold_ahead_of_hot", Q.topic, Q.queue_id, new_max, hot_max, None)}


def _drop_last_segments(world: World, n: int) -> int:
    ms = world.manifests(Q)
    for m in ms[-n:]:
        for key in (m.key, m.commit_log_key, m.consume_queue_key):
            world.path(key).unlink()
    return ms[-n - 1].end_offset


def test_skipped_batch_beyond_the_allowance_is_hot_not_covered(world: World) -> None:
    cold_max = _drop_last_segments(world, 2)
    _, hot_max = hot_range(world)
    code, doc = world.verify("--lag-allowance", "50")
    assert code == 2
    assert found(doc) == {("hot_not_covered", Q.topic, Q.queue_id, cold_max, hot_max - 50, None)}
    assert queue_doc(doc, Q)["lag"]["messages"] == hot_max - cold_max


def test_untiered_tail_within_the_allowance_is_lag(world: World) -> None:
    cold_max = _drop_last_segments(world, 2)
    _, hot_max = hot_range(world)
    code, doc = world.verify("--lag-allowance", str(hot_max - cold_max))
    assert (code, doc["verdict"]) == (0, "CLEAN")
    lag = queue_doc(doc, Q)["lag"]
    assert lag["messages"] == hot_max - cold_max
    assert lag["seconds"] > 0  # the tail is older than the checkpoint time


def _store_times(q: QueueKey = Q) -> list[int]:
    """Store times of the queue's records, from the generator that wrote them."""
    return [
        p.store_timestamp
        for p in generate_messages(SPEC)
        if (p.topic, p.queue_id) == (q.topic, q.queue_id)
    ]


def test_a_seconds_allowance_counts_back_from_the_verifiers_clock(world: World) -> None:
    cold_max = _drop_last_segments(world, 2)
    _, hot_max = hot_range(world)
    times = _store_times()
    now = times[-1] + 300  # the verifier's clock, a little after the newest record
    allowance_ms = 500
    cutoff = int(np.searchsorted(np.array(times), now - allowance_ms, side="left"))
    assert cold_max < cutoff < hot_max  # the test means something
    code, doc = world.verify("--lag-allowance", f"{allowance_ms}ms", clock=VirtualClock(now))
    assert code == 2
    assert found(doc) == {("hot_not_covered", Q.topic, Q.queue_id, cold_max, cutoff, None)}
    assert doc["reference_ts"] == now


def test_an_idle_brokers_old_untiered_tail_is_not_lag(world: World) -> None:
    # The broker took its last message a day ago and nothing since: its checkpoint
    # stopped there. The untiered tail is a day old, far beyond a 5-minute allowance,
    # however close its records are to the (frozen) checkpoint time.
    cold_max = _drop_last_segments(world, 2)
    _, hot_max = hot_range(world)
    a_day_later = _store_times()[-1] + 86_400_000
    code, doc = world.verify("--lag-allowance", "5m", clock=VirtualClock(a_day_later))
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {("hot_not_covered", Q.topic, Q.queue_id, cold_max, hot_max, None)}
    # Within the allowance of the verifier's clock, the same tail is lag.
    code, doc = world.verify("--lag-allowance", "5m", clock=VirtualClock(_store_times()[-1]))
    assert (code, doc["verdict"]) == (0, "CLEAN")


def test_corrupt_manifest_is_reported_with_the_hole_it_leaves(world: World) -> None:
    m = world.manifests(Q)[2]
    world.path(m.key).write_bytes(m.to_json().replace(b'"lease_epoch":1', b'"lease_epoch":0'))
    code, doc = world.verify()
    assert code == 2
    assert found(doc) == {
        ("corrupt_manifest", Q.topic, Q.queue_id, m.start_offset, m.start_offset + 1, m.key),
        ("gap", Q.topic, Q.queue_id, m.start_offset, m.end_offset, None),
    }
    (corrupt,) = [a for a in doc["anomalies"] if a["anomaly"] == "corrupt_manifest"]
    assert "lease_epoch 0" in corrupt["detail"]


def _catalogue(world: World, state: Path, *, skip: str) -> None:
    from tieredstore.metadata.catalogue import Catalogue

    with Catalogue.open(state, cluster=CLUSTER, broker=BROKER) as cat:
        for q, ms in world.image.manifests.items():
            cat.queues.ensure(q.topic, q.queue_id, ms[0].start_offset)
            for m in ms:
                if m.key != skip:
                    cat.segments.commit(m)


def test_catalogue_agreeing_with_manifests_is_clean(world: World, tmp_path: Path) -> None:
    _catalogue(world, tmp_path / "state", skip="")
    code, doc = world.verify("--metadata", str(tmp_path / "state"))
    assert (code, doc["verdict"]) == (0, "CLEAN")


def test_manifest_missing_from_the_catalogue_is_drift(world: World, tmp_path: Path) -> None:
    m = world.manifests(Q)[-1]
    _catalogue(world, tmp_path / "state", skip=m.key)
    age(world.path(m.key), TWO_HOURS)  # older than the grace: not a commit in flight
    code, doc = world.verify("--metadata", str(tmp_path / "state"))
    assert code == 1 and doc["verdict"] == "DIRTY"
    assert found(doc) == {
        ("catalogue_drift", Q.topic, Q.queue_id, m.start_offset, m.end_offset, m.key)
    }


def test_exit_code_3_when_the_run_cannot_start(world: World, tmp_path: Path) -> None:
    from tieredstore.cli.main import main as cli_main

    def run(*flags: str) -> int:
        base = ["verify", "--cluster", CLUSTER, "--broker", BROKER, "--out", str(tmp_path)]
        return cli_main([*base, *flags])

    assert run("--hot", str(tmp_path / "nope"), "--cold", str(world.cold)) == 3
    assert run("--hot", str(world.hot), "--cold", "nosuch://bucket") == 3
    assert run("--hot", str(world.hot), "--cold", "memory://x") == 3
    assert run("--hot", str(world.hot), "--cold", str(world.cold), "--lag-allowance", "x") == 3
    assert run("--hot", str(world.hot), "--cold", str(tmp_path / "no-such-root")) == 3
    assert not (tmp_path / "report.json").exists()


def test_a_hot_queue_that_does_not_read_stops_the_run(hot_copy: World) -> None:
    cq_dir = hot_copy.hot / "consumequeue" / Q.topic / str(Q.queue_id)
    newest = sorted(cq_dir.iterdir())[-1]
    os.truncate(newest, newest.stat().st_size - 7)  # not a whole number of units
    code, doc = hot_copy.verify()
    assert (code, doc) == (3, {})


def test_a_failed_task_is_reported_in_one_line(world: World, spark: SparkSession) -> None:
    from tieredstore.verifier import readers
    from tieredstore.verifier.spark.session import failure_line
    from tieredstore.verifier.vocabulary import Level

    work = spark.createDataFrame([], schema=schemas.SEGMENT_WORK).unionByName(
        spark.createDataFrame([_work_row(world)], schema=schemas.SEGMENT_WORK)
    )
    cold = readers.ColdLocation(str(world.cold))
    facts = readers.segment_facts_frame(work, cold, world.hot / "absent", Level.OFFSETS, 1)
    with pytest.raises(PySparkException) as info:
        facts.collect()
    assert failure_line(info.value) == (
        f"Spark job failed: NotAStoreError: store directory does not exist ({world.hot / 'absent'})"
    )


def _work_row(world: World) -> dict[str, Any]:
    m = world.manifests(Q)[0]
    return {
        "manifest_key": m.key, "topic": Q.topic, "queue_id": Q.queue_id,
        "start_offset": m.start_offset, "end_offset": m.end_offset, "cl_base": m.cl_base,
        "cl_end": m.cl_end, "cl_key": m.commit_log_key, "cl_size": m.commit_log.size,
        "cl_digest": m.commit_log.digest, "cq_key": m.consume_queue_key,
        "cq_size": m.consume_queue.size, "cq_digest": m.consume_queue.digest,
        "cl_listed_size": m.commit_log.size, "cq_listed_size": m.consume_queue.size,
        "hot_present": True, "hot_min": 0, "hot_max": m.end_offset,
        "min_store_timestamp": m.min_store_timestamp,
        "max_store_timestamp": m.max_store_timestamp, "message_count": m.message_count,
        "cl_at": 0, "cq_at": 0, "cl_object_size": m.commit_log.size,
        "cq_object_size": m.consume_queue.size, "link": "segment", "covers": True,
    }  # fmt: skip


def test_offsets_the_broker_deleted_are_cold_only_not_damage(hot_copy: World) -> None:
    oldest = sorted((hot_copy.hot / "commitlog").iterdir())[0]
    oldest.unlink()  # the broker's retention removed the oldest commitlog file
    code, doc = hot_copy.verify("--level", "content")
    assert (code, doc["verdict"]) == (0, "CLEAN")
    totals = doc["totals"]
    assert totals["cold_only"] > 0
    assert totals["cold_only"] + totals["units_compared"] == SPEC.messages
    q = queue_doc(doc, Q)
    assert q["cold"]["min"] == 0 < q["hot"]["min"] and q["cold_only"] == q["hot"]["min"]


def test_a_queue_the_broker_no_longer_has_is_cold_only(hot_copy: World) -> None:
    shutil.rmtree(hot_copy.hot / "consumequeue" / Q.topic / str(Q.queue_id))
    code, doc = hot_copy.verify()
    assert (code, doc["verdict"]) == (0, "CLEAN")
    q = queue_doc(doc, Q)
    assert (q["status"], q["hot"], q["cold_only"]) == (
        "cold_only",
        None,
        q["cold"]["max"] - q["cold"]["min"],
    )
