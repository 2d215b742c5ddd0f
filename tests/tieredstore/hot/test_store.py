"""The hot-store scanner over synthetic stores: exact contents and every hazard."""

from __future__ import annotations

import os
import shutil
import struct
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from tieredstore.errors import (
    ConfigError,
    CorruptUnitError,
    NotAStoreError,
    OffsetOutOfRangeError,
    StoreNotFoundError,
    TruncatedDataError,
    UnsupportedStoreError,
)
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.formats.record import BLANK_MAGIC_CODE, decode_record
from tieredstore.formats.tags import tags_code
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.hot.synth import (
    MessagePlan,
    SyntheticStore,
    SynthSpec,
    generate_messages,
    synthesize,
)

SPEC = SynthSpec(
    topics=3,
    queues=3,
    messages=3000,
    body_min=0,
    body_max=6000,
    commitlog_file_size=256 << 10,
    cq_file_size=100 * CQ_UNIT_SIZE,
    long_topic=True,
    prepared_every=97,
    seed=7,
)


def _expected(spec: SynthSpec) -> dict[QueueKey, list[MessagePlan]]:
    out: dict[QueueKey, list[MessagePlan]] = defaultdict(list)
    for plan in generate_messages(spec):
        if plan.has_cq_unit:
            out[QueueKey(plan.topic, plan.queue_id)].append(plan)
    return out


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hot") / "store"
    synthesize(root, SPEC)
    return root


def test_scanner_returns_exactly_the_messages_written(store_dir: Path) -> None:
    hot = HotStore(store_dir)
    expected = _expected(SPEC)
    assert hot.queues() == sorted(expected)
    for key, plans in expected.items():
        rng = hot.queue_range(key.topic, key.queue_id)
        assert (rng.min, rng.max) == (0, len(plans))
        units = hot.read_units(key.topic, key.queue_id, rng.min, rng.max)
        datas = hot.read_records_bytes(units["commitlog_offset"], units["size"])
        for offset, (plan, unit, data) in enumerate(zip(plans, units, datas, strict=True)):
            rec = decode_record(data)
            assert rec.queue_offset == offset
            assert rec.physical_offset == int(unit["commitlog_offset"])
            assert rec.total_size == int(unit["size"])
            assert int(unit["tags_code"]) == tags_code(plan.properties.get("TAGS"))
            assert (rec.topic, rec.queue_id) == (key.topic, key.queue_id)
            assert rec.body == plan.body and rec.properties == plan.properties
            assert rec.store_timestamp == plan.store_timestamp
            assert rec.born_timestamp == plan.born_timestamp
            assert rec.tags == plan.properties.get("TAGS")
            assert rec.keys == plan.properties["KEYS"].split()
        assert hot.read_message(key.topic, key.queue_id, len(plans) - 1).body == plans[-1].body


@pytest.mark.slow
def test_store_has_rolling_fillers_v2_compression_and_prepared(store_dir: Path) -> None:
    hot = HotStore(store_dir)
    files = hot.commitlog_files().files
    assert len(files) > 3
    scanned = list(hot.scan_commitlog())
    assert len(scanned) == SPEC.messages  # prepared records are in the commitlog
    assert sum(not s.record.has_cq_unit for s in scanned) == SPEC.messages // 97
    assert any(s.record.magic.name == "V2" for s in scanned)
    assert any(s.record.compressed for s in scanned)
    # Every file but the last written ends with a BLANK filler right after its last record.
    ends: dict[int, int] = {}
    for s in scanned:
        f = hot.commitlog_files().find(s.offset)
        assert f is not None
        ends[f.base] = s.offset + s.record.total_size - f.base
    for f in files[:-2]:
        magic = struct.unpack(">i", f.path.read_bytes()[ends[f.base] + 4 : ends[f.base] + 8])[0]
        assert magic == BLANK_MAGIC_CODE
    assert not files[-1].path.read_bytes().strip(b"\0")  # pre-created next file: zeros


def test_checkpoint_and_topics(store_dir: Path) -> None:
    hot = HotStore(store_dir)
    cp = hot.checkpoint()
    assert cp.physic_msg_timestamp == SPEC.start_time + SPEC.messages - 1
    assert set(hot.topics()) == set(SPEC.topic_names())


def test_torn_last_record_is_ignored(tmp_path: Path) -> None:
    store = synthesize(tmp_path / "s", SynthSpec(messages=50, seed=1))
    before = list(HotStore(store.root).scan_commitlog())
    store.write_torn_tail(60)
    hot = HotStore(store.root)
    assert [s.offset for s in hot.scan_commitlog()] == [s.offset for s in before]


def test_append_is_seen_and_equals_one_shot(tmp_path: Path) -> None:
    spec = SynthSpec(messages=400, seed=3, commitlog_file_size=64 << 10, body_max=2000)
    live = SyntheticStore.create(tmp_path / "live", spec)
    for _ in range(4):
        SyntheticStore.open(tmp_path / "live").append(100)
    synthesize(tmp_path / "oneshot", spec)
    for name in ("commitlog",):
        a = sorted((tmp_path / "live" / name).iterdir())
        b = sorted((tmp_path / "oneshot" / name).iterdir())
        assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert live.root.exists()


def test_append_to_named_queues_places_one_message_on_each(tmp_path: Path) -> None:
    spec = SynthSpec(topics=2, queues=2, messages=0, seed=5)
    store = SyntheticStore.create(tmp_path / "s", spec)
    named = [("SynthTopic1", 1), ("SynthTopic0", 0), ("SynthTopic1", 1)]
    assert store.append(store_time=spec.start_time + 5_000, interval_ms=0, queues=named) == 3
    hot = HotStore(store.root)
    ends = {(k.topic, k.queue_id): hot.queue_range(k.topic, k.queue_id).max for k in hot.queues()}
    assert ends.get(("SynthTopic1", 1)) == 2 and ends.get(("SynthTopic0", 0)) == 1
    assert not ends.get(("SynthTopic0", 1)) and not ends.get(("SynthTopic1", 0))
    times = [hot.read_message("SynthTopic1", 1, o).store_timestamp for o in (0, 1)]
    assert times == [spec.start_time + 5_000] * 2
    with pytest.raises(ConfigError, match="2 messages for 3 queues"):
        store.append(2, queues=named)


def test_queue_start_writes_filler_units(tmp_path: Path) -> None:
    spec = SynthSpec(topics=1, queues=1, messages=30, queue_start=250, cq_file_size=100 * 20)
    synthesize(tmp_path / "s", spec)
    hot = HotStore(tmp_path / "s")
    rng = hot.queue_range("SynthTopic0", 0)
    assert (rng.min, rng.max) == (250, 280)
    assert hot.read_message("SynthTopic0", 0, 250).queue_offset == 250


def test_deleted_head_files_move_hot_min(tmp_path: Path) -> None:
    spec = SynthSpec(
        topics=1,
        queues=2,
        messages=2000,
        commitlog_file_size=64 << 10,
        cq_file_size=50 * 20,
        body_max=500,
    )
    synthesize(tmp_path / "s", spec)
    hot = HotStore(tmp_path / "s")
    before = hot.queue_range("SynthTopic0", 0)
    oldest = hot.commitlog_files().files[0]
    os.remove(oldest.path)
    after = hot.queue_range("SynthTopic0", 0)
    assert after.max == before.max and after.min > before.min
    first = hot.read_units("SynthTopic0", 0, after.min, after.min + 1)[0]
    assert int(first["commitlog_offset"]) >= oldest.end
    prev = hot.read_units("SynthTopic0", 0, after.min - 1, after.min)[0]
    assert int(prev["commitlog_offset"]) < oldest.end
    with pytest.raises(OffsetOutOfRangeError, match="the broker deleted it"):
        hot.read_message("SynthTopic0", 0, before.min)
    # Deleting the head CQ file makes its offsets unreadable with a clear error.
    cq_head = hot.cq_files("SynthTopic0", 0).files[0]
    os.remove(cq_head.path)
    with pytest.raises(OffsetOutOfRangeError, match="is in no consume-queue file"):
        hot.read_units("SynthTopic0", 0, 0, 1)


def test_reading_past_hot_max_is_refused(store_dir: Path) -> None:
    hot = HotStore(store_dir)
    key = hot.queues()[0]
    rng = hot.queue_range(key.topic, key.queue_id)
    with pytest.raises(CorruptUnitError, match=f"queue offset {rng.max} .* has no unit yet"):
        hot.read_units(key.topic, key.queue_id, rng.min, rng.max + 1)


def test_truncated_cq_file(tmp_path: Path) -> None:
    synthesize(tmp_path / "s", SynthSpec(topics=1, queues=1, messages=20))
    hot = HotStore(tmp_path / "s")
    f = hot.cq_files("SynthTopic0", 0).files[0]
    os.truncate(f.path, 205)  # mid-unit: 10 units and 5 stray bytes
    with pytest.raises(TruncatedDataError, match=r"not a multiple of 20 .*@200"):
        hot.queue_range("SynthTopic0", 0)


def test_record_crossing_file_end_is_reported(tmp_path: Path) -> None:
    synthesize(tmp_path / "s", SynthSpec(topics=1, queues=1, messages=5))
    hot = HotStore(tmp_path / "s")
    size = hot.commitlog_files().files[0].size
    with pytest.raises(TruncatedDataError, match="crosses the end of its file"):
        hot.read_records_bytes(np.array([size - 10]), np.array([100]))


def test_missing_store_and_rocksdb_store(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError, match="store directory does not exist"):
        HotStore(tmp_path / "nope")
    (tmp_path / "r" / "consumequeue").mkdir(parents=True)
    (tmp_path / "r" / "commitlog").mkdir(parents=True)
    (tmp_path / "r" / "consumequeue" / "CURRENT").write_text("MANIFEST-000001\n")
    with pytest.raises(UnsupportedStoreError, match="storeType=defaultRocksDB"):
        HotStore(tmp_path / "r")


def test_parent_of_a_store_is_not_a_store(tmp_path: Path) -> None:
    """The parent of the real store (a common slip) is refused, not read as empty."""
    synthesize(tmp_path / "s", SynthSpec(messages=5))
    with pytest.raises(NotAStoreError, match=r"no commitlog/ and consumequeue/"):
        HotStore(tmp_path)
    shutil.rmtree(tmp_path / "s" / "consumequeue")
    with pytest.raises(NotAStoreError, match=r"no consumequeue/ "):
        HotStore(tmp_path / "s")


def test_empty_store(tmp_path: Path) -> None:
    SyntheticStore.create(tmp_path / "s", SynthSpec(messages=0))
    hot = HotStore(tmp_path / "s")
    assert hot.queues() == []
    assert list(hot.scan_commitlog()) == []
    assert hot.queue_range("SynthTopic0", 0).count == 0


def test_ipv6_store(tmp_path: Path) -> None:
    synthesize(tmp_path / "s", SynthSpec(messages=50, ipv6=True))
    recs = [s.record for s in HotStore(tmp_path / "s").scan_commitlog()]
    assert len(recs) == 50 and all(r.store_host.is_v6 and r.born_host.is_v6 for r in recs)
