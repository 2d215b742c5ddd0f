"""Property: whatever subset of cold objects and records is deleted or damaged, the
verdict is never CLEAN (issue 26); and no forged record excuses deleted data that hot
still holds and a rule tiered (issue 34: loss, retention, init, tiering and stop records
forged as the excuse for what they delete).

The store is the verifier suite's tiered synthetic store with one queue's head expired
the way retention does it (its first segment gone, a retention record in its place).
Each example picks objects — manifests, data objects, init and retention records, the
tiering record — and does one of three things to each: delete it, cut its last bytes,
or (data objects only: a byte inside a manifest's or record's JSON may change a field
that changes nothing) flip one of its bytes. Content level, lag allowance 0: every
change to what cold holds must show. A bounded number of examples keeps it quick; each
is one whole ``verify`` run in the suite's Spark session.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.coldimage import CREATED_AT_MS, init_record
from tieredstore.cold.layout import QueuePath, init_key, tiering_key
from tieredstore.cold.loss import LossRecord
from tieredstore.cold.provenance import RetentionMark, RuleEpoch, StopMark, TieringRecord
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.topic_rules import TopicRules

from .conftest import World

pytestmark = pytest.mark.spark

Q = QueueKey("SynthTopic1", 0)
ACTIONS = ("delete", "truncate", "flip")


@pytest.fixture(scope="module")
def base(pristine: World, tmp_path_factory: pytest.TempPathFactory) -> World:
    """The pristine store with Q's first segment expired by retention (on record)."""
    root = tmp_path_factory.mktemp("damage-base")
    shutil.copytree(pristine.cold, root / "cold")
    first = pristine.manifests(Q)[0]
    for key in (first.key, first.commit_log_key, first.consume_queue_key):
        (root / "cold" / key).unlink()
    mark = RetentionMark(1, CLUSTER, BROKER, Q.topic, Q.queue_id, "test-writer", 1,
                         first.end_offset, first.key, first.max_store_timestamp,
                         1_700_000_100_000)  # fmt: skip
    (root / "cold" / mark.key).parent.mkdir(parents=True)
    (root / "cold" / mark.key).write_bytes(mark.to_json())
    return World(pristine.hot, root / "cold", root / "out", pristine.image)


def _targets(base: World) -> list[tuple[str, bool]]:
    """(key, is a data object) of everything damage may hit."""
    out: list[tuple[str, bool]] = []
    for q, ms in base.image.manifests.items():
        for m in ms[1:] if q == Q else ms:
            out += [(m.key, False), (m.commit_log_key, True), (m.consume_queue_key, True)]
        out.append((init_key(QueuePath(CLUSTER, BROKER, q.topic, q.queue_id)), False))
    marks = base.cold.rglob("RETENTION/*.json")
    out += [(p.relative_to(base.cold).as_posix(), False) for p in marks]
    out.append((tiering_key(CLUSTER, BROKER), False))
    return sorted(out)


def _damage(path: Path, action: str, data_object: bool, where: float) -> None:
    data = path.read_bytes()
    if action == "flip" and data_object:
        pos = int(where * (len(data) - 1))
        path.write_bytes(data[:pos] + bytes([data[pos] ^ 0x41]) + data[pos + 1 :])
    elif action in ("truncate", "flip"):
        path.write_bytes(data[: int(where * (len(data) - 1))])
    else:
        path.unlink()


def test_the_undamaged_base_is_clean(base: World, spark: SparkSession) -> None:
    code, doc = base.verify("--level", "content")
    assert (code, doc["verdict"]) == (0, "CLEAN")


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damage_is_never_clean(base: World, spark: SparkSession, data: st.DataObject) -> None:
    targets = _targets(base)
    chosen = data.draw(
        st.lists(st.sampled_from(targets), min_size=1, max_size=4, unique=True), label="hit"
    )
    with tempfile.TemporaryDirectory() as tmp:
        world = World(base.hot, Path(tmp) / "cold", Path(tmp) / "out", base.image)
        shutil.copytree(base.cold, world.cold)
        for key, data_object in chosen:
            action = data.draw(st.sampled_from(ACTIONS), label=f"action on {key}")
            where = data.draw(st.floats(0.0, 0.99), label="where")
            _damage(world.path(key), action, data_object, where)
        code, doc = world.verify("--level", "content")
    assert code != 0, f"CLEAN after damaging {chosen}"
    assert doc.get("verdict") != "CLEAN"


# -- forged records (issue 34) -----------------------------------------------------------

FORGERIES = ("loss", "retention", "init", "tiering", "stop")


@dataclass
class _Forger:
    """Forges records on a copy of ``base``, each one as an excuse for data it deletes."""

    world: World
    topic_queues: dict[str, list[QueueKey]]
    exclusions: list[tuple[int, str]] = field(default_factory=list)

    def _put(self, key: str, data: bytes) -> None:
        self.world.path(key).parent.mkdir(parents=True, exist_ok=True)
        self.world.path(key).write_bytes(data)

    def _drop(self, q: QueueKey, first: int, last: int | None = None) -> None:
        for m in self.world.manifests(q)[first:last]:
            for key in (m.key, m.commit_log_key, m.consume_queue_key):
                self.world.path(key).unlink(missing_ok=True)

    def _first(self, q: QueueKey) -> int:
        return 1 if q == Q else 0  # Q's first segment is expired (on record)

    def forge(self, kind: str, topic: str, data: st.DataObject) -> None:
        q = data.draw(st.sampled_from(self.topic_queues[topic]), label=f"{kind} queue")
        ms = self.world.manifests(q)
        hot_max = HotStore(self.world.hot).queue_range(q.topic, q.queue_id).max
        qp = QueuePath(CLUSTER, BROKER, q.topic, q.queue_id)
        if kind == "loss":  # "the broker deleted it before it was tiered": hot holds it
            k = data.draw(st.integers(self._first(q), len(ms) - 1), label="lost segment")
            self._drop(q, k, k + 1)
            loss = LossRecord.new(qp, ms[k].start_offset, ms[k].end_offset,
                                  accepted_at_ms=CREATED_AT_MS, writer_id="w",
                                  lease_epoch=1)  # fmt: skip
            self._put(loss.key, loss.to_json())
        elif kind == "retention":  # "retention removed it all": past what was committed
            k = data.draw(st.integers(self._first(q), len(ms) - 1), label="kept segments")
            self._drop(q, k)
            first = hot_max + data.draw(st.sampled_from([0, 1, 50]), label="past hot max")
            mark = RetentionMark(1, CLUSTER, BROKER, q.topic, q.queue_id, "w", 1, first,
                                 ms[-1].key, ms[-1].max_store_timestamp, CREATED_AT_MS)  # fmt: skip
            self._put(mark.key, mark.to_json())
        elif kind == "init":  # "its history starts later": as if hot min had been there
            k = data.draw(st.integers(self._first(q) + 1, len(ms) - 1), label="head cut")
            self._drop(q, self._first(q), k)
            forged = init_record(q, ms[k].start_offset, "earliest")
            self._put(forged.key, forged.to_json())
        else:  # "the topic was excluded from t on" (and, for "stop", tiering stopped at s)
            t = CREATED_AT_MS + data.draw(st.integers(0, 3200), label="excluded at")
            self.exclusions.append((t, topic))
            self._drop(q, 0)
            if kind == "stop":
                low = ms[self._first(q)].start_offset + 1
                s = data.draw(st.integers(low, hot_max), label="stopped at")
                stop = StopMark.new(qp, excluded_since_ms=t, stop_offset=s,
                                    stopped_at_ms=t, writer_id="w", lease_epoch=1)  # fmt: skip
                self._put(stop.key, stop.to_json())

    def write_tiering_record(self) -> None:
        if not self.exclusions:
            return
        epochs = [RuleEpoch(CREATED_AT_MS, TopicRules(), "test-writer", 1)]
        excluded: list[str] = []
        for t, topic in sorted(self.exclusions):
            excluded.append(topic)
            epochs.append(RuleEpoch(t, TopicRules(exclude=tuple(excluded)), "w", 2))
        record = TieringRecord(CLUSTER, BROKER, tuple(epochs))
        self._put(record.key, record.to_json())


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_forged_records_never_hide_what_hot_holds(
    base: World, spark: SparkSession, data: st.DataObject
) -> None:
    """Each forged record (a loss over offsets hot holds, a retention record past what
    was committed, an earliest init above hot min, an exclusion, a stop record) excuses
    data deleted with it: cold then lacks offsets hot holds that a rule tiered, and the
    verdict is never CLEAN (CORRUPT, unless only exclusions without stop records were
    forged: their loss may lie beyond what hot proves, but never silently)."""
    topic_queues: dict[str, list[QueueKey]] = {}
    for q in sorted(base.image.manifests):
        topic_queues.setdefault(q.topic, []).append(q)
    topics = data.draw(
        st.lists(st.sampled_from(sorted(topic_queues)), min_size=1, max_size=2, unique=True),
        label="topics",
    )
    kinds = [data.draw(st.sampled_from(FORGERIES), label=f"forgery for {t}") for t in topics]
    with tempfile.TemporaryDirectory() as tmp:
        world = World(base.hot, Path(tmp) / "cold", Path(tmp) / "out", base.image)
        shutil.copytree(base.cold, world.cold)
        forger = _Forger(world, topic_queues)
        for topic, kind in zip(topics, kinds, strict=True):
            forger.forge(kind, topic, data)
        forger.write_tiering_record()
        code, doc = world.verify()
    assert code != 0 and doc.get("verdict") != "CLEAN", f"CLEAN after forging {kinds}"
    if set(kinds) != {"tiering"}:
        assert doc["verdict"] == "CORRUPT", f"{doc['verdict']} after forging {kinds}"
