"""Property: whatever subset of cold objects and records is deleted or damaged, the
verdict is never CLEAN (issue 26).

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
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from tieredstore.hot_store import QueueKey
from tieredstore.layout import QueuePath, init_key, tiering_key
from tieredstore.provenance import RetentionMark
from tieredstore.testing.settings import BROKER, CLUSTER

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
