"""The catalogue's contract: eager initialisation, contiguous commits, prefix expiry."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.segments import chain
from tieredstore.clock import VirtualClock
from tieredstore.cold.layout import QueuePath, object_name
from tieredstore.cold.manifest import Manifest
from tieredstore.errors import CatalogueError, InvalidNameError, OffsetOutOfRangeError
from tieredstore.metadata.catalogue import DB_NAME, Catalogue, CatalogueState
from tieredstore.metadata.rows import QueueRow, QueueState, SegmentStatus

TOPIC = "TopicTest"
QUEUE = QueuePath(CLUSTER, BROKER, TOPIC, 0)


@pytest.fixture(scope="module")
def manifests() -> list[Manifest]:
    """Three consecutive segments of TopicTest/0: [0,3), [3,7), [7,9)."""
    return [s.manifest for s in chain(QUEUE, [3, 4, 2])]


def _committed(catalogue: Catalogue, manifests: list[Manifest], n: int) -> QueueRow:
    catalogue.queues.ensure(TOPIC, 0, 0)
    for m in manifests[:n]:
        catalogue.segments.commit(m)
    row = catalogue.queues.get(TOPIC, 0)
    assert row is not None
    return row


# -- opening ---------------------------------------------------------------------------


def test_open_creates_the_state_dir_and_database(tmp_path: Path, clock: VirtualClock) -> None:
    state = tmp_path / "a" / "b"
    with Catalogue.open(state, cluster=CLUSTER, broker=BROKER, clock=clock) as cat:
        assert cat.state is CatalogueState.OPEN
        assert (state / DB_NAME).is_file()
        assert cat.queues.all() == []
    assert cat.state.value == CatalogueState.CLOSED.value


def test_database_is_wal_with_foreign_keys(catalogue: Catalogue, state_dir: Path) -> None:
    raw = sqlite3.connect(state_dir / DB_NAME)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        raw.close()
    with catalogue.db.guard() as conn:  # the catalogue's own connection settings
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


@pytest.mark.parametrize(("cluster", "broker"), [("OtherCluster", BROKER), (CLUSTER, "broker-b")])
def test_catalogue_of_another_cluster_or_broker_is_refused(
    catalogue: Catalogue, state_dir: Path, cluster: str, broker: str
) -> None:
    catalogue.close()
    with pytest.raises(CatalogueError, match="belongs to cluster 'DefaultCluster'") as info:
        Catalogue.open(state_dir, cluster=cluster, broker=broker)
    assert info.value.where == str(state_dir / DB_NAME)
    # and the refusal released the writer lock
    Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER).close()


def test_unsafe_names_are_refused_before_touching_disk(tmp_path: Path) -> None:
    with pytest.raises(InvalidNameError):
        Catalogue.open(tmp_path / "s", cluster="a/b", broker=BROKER)
    assert not (tmp_path / "s").exists()


def test_close_twice_is_safe_and_closed_refuses_work(catalogue: Catalogue) -> None:
    catalogue.close()
    catalogue.close()
    with pytest.raises(CatalogueError, match="closed"):
        catalogue.queues.all()
    with pytest.raises(CatalogueError, match="closed"):
        catalogue.queues.ensure(TOPIC, 0, 0)


def test_read_only(catalogue: Catalogue, state_dir: Path, manifests: list[Manifest]) -> None:
    _committed(catalogue, manifests, 2)
    with Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER, read_only=True) as reader:
        assert reader.read_only
        assert reader.queues.all() == catalogue.queues.all()
        assert reader.segments.of(TOPIC, 0) == catalogue.segments.of(TOPIC, 0)
        with pytest.raises(CatalogueError, match="read-only"):
            reader.queues.ensure(TOPIC, 1, 0)
        with pytest.raises(CatalogueError, match="read-only"):
            reader.segments.commit(manifests[2])
        catalogue.segments.commit(manifests[2])  # the writer goes on beside the reader
        assert reader.segments.of(TOPIC, 0)[-1].manifest == manifests[2]


def test_read_only_needs_an_existing_catalogue(tmp_path: Path) -> None:
    with pytest.raises(CatalogueError, match="no catalogue"):
        Catalogue.open(tmp_path, cluster=CLUSTER, broker=BROKER, read_only=True)


def test_everything_survives_reopening(
    catalogue: Catalogue, state_dir: Path, manifests: list[Manifest], clock: VirtualClock
) -> None:
    _committed(catalogue, manifests, 3)
    catalogue.record_lease("owner-1", 4, 123)
    before = (catalogue.queues.all(), catalogue.segments.of(TOPIC, 0), catalogue.lease())
    catalogue.close()
    with Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER, clock=clock) as again:
        assert (again.queues.all(), again.segments.of(TOPIC, 0), again.lease()) == before


def test_orphan_wal_without_database_is_removed(state_dir: Path, clock: VirtualClock) -> None:
    state_dir.mkdir(parents=True)
    (state_dir / f"{DB_NAME}-wal").write_bytes(b"stale pages of a deleted database")
    with Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER, clock=clock) as cat:
        assert cat.queues.all() == []


# -- queues: eager initialisation --------------------------------------------------------


def test_ensure_queue_initialises_everything_at_once(
    catalogue: Catalogue, clock: VirtualClock
) -> None:
    row = catalogue.queues.ensure("%RETRY%group", 3, 1234)
    assert row == QueueRow(
        topic="%RETRY%group",
        queue_id=3,
        init_offset=1234,
        cold_min=1234,
        cold_commit=1234,
        cold_cl_end=0,
        cq_base=1234 * 20,
        state=QueueState.ACTIVE,
        updated_at_ms=clock.now_ms(),
    )
    assert catalogue.queues.get("%RETRY%group", 3) == row


def test_ensure_queue_is_idempotent_and_first_init_wins(
    catalogue: Catalogue, clock: VirtualClock
) -> None:
    first = catalogue.queues.ensure(TOPIC, 0, 10)
    clock.set_ms(clock.now_ms() + 5000)
    assert catalogue.queues.ensure(TOPIC, 0, 999) == first
    assert catalogue.queues.all() == [first]


def test_ensure_queue_refuses_bad_input(catalogue: Catalogue) -> None:
    with pytest.raises(InvalidNameError):
        catalogue.queues.ensure("../etc", 0, 0)
    with pytest.raises(InvalidNameError, match="reserved"):
        catalogue.queues.ensure("_quarantine", 0, 0)
    with pytest.raises(CatalogueError, match="must be >= 0"):
        catalogue.queues.ensure(TOPIC, 0, -1)
    assert catalogue.queues.all() == []


def test_ensure_queues_creates_many_in_order_in_one_transaction(catalogue: Catalogue) -> None:
    existing = catalogue.queues.ensure(TOPIC, 1, 10)
    rows = catalogue.queues.ensure_many([(TOPIC, 2, 5), (TOPIC, 1, 999), ("%RETRY%g", 0, 0)])
    assert [(r.topic, r.queue_id, r.init_offset) for r in rows] == [
        (TOPIC, 2, 5), (TOPIC, 1, 10), ("%RETRY%g", 0, 0),
    ]  # fmt: skip
    assert rows[1] == existing  # first initialisation wins
    assert rows[0].cq_base == 5 * 20 and rows[0].cold_commit == 5
    assert sorted(catalogue.queues.all(), key=lambda r: (r.topic, r.queue_id)) == sorted(
        rows, key=lambda r: (r.topic, r.queue_id)
    )


def test_ensure_queues_with_one_bad_entry_creates_none(catalogue: Catalogue) -> None:
    with pytest.raises(InvalidNameError):
        catalogue.queues.ensure_many([(TOPIC, 0, 0), ("../etc", 0, 0)])
    with pytest.raises(CatalogueError, match="must be >= 0"):
        catalogue.queues.ensure_many([(TOPIC, 0, 0), (TOPIC, 1, -1)])
    assert catalogue.queues.all() == []


def test_queue_unknown_is_none_and_queues_are_ordered(catalogue: Catalogue) -> None:
    assert catalogue.queues.get(TOPIC, 0) is None
    for topic, qid in [("b", 1), ("a", 2), ("b", 0), ("a", 10)]:
        catalogue.queues.ensure(topic, qid, 0)
    assert [(q.topic, q.queue_id) for q in catalogue.queues.all()] == [
        ("a", 2), ("a", 10), ("b", 0), ("b", 1),
    ]  # fmt: skip


_SEG = "INSERT INTO segments VALUES ('{t}', 0, {s}, {e}, 0, 100, {cl}, 'd', {cq}, 'd', 'sha256', "
_SEG += "1, 1, 'COMMITTED', 1, 'w', 1, 0, 'k', '', NULL, NULL)"

RAW_BREAKS = [
    # a queue row without its CQ base or init offset, or with a wrong CQ base
    ("INSERT INTO queues (topic, queue_id, init_offset, cold_min, cold_commit, cold_cl_end, "
     "state, updated_at_ms) VALUES ('u', 0, 5, 5, 5, 0, 'ACTIVE', 0)", "NOT NULL.*cq_base"),
    ("INSERT INTO queues VALUES ('u', 0, 5, NULL, 5, 5, 0, 'ACTIVE', 0)", "NOT NULL.*cq_base"),
    ("INSERT INTO queues VALUES ('u', 0, NULL, 0, 5, 5, 0, 'ACTIVE', 0)", "NOT NULL.*init_offset"),
    ("INSERT INTO queues VALUES ('u', 0, 5, 99, 5, 5, 0, 'ACTIVE', 0)", "cq_base = init_offset"),
    ("UPDATE queues SET cq_base = 0", "cq_base = init_offset"),
    ("UPDATE queues SET init_offset = 11", "cq_base = init_offset"),
    # offsets out of order, a state that does not exist
    ("UPDATE queues SET cold_min = 9", "cold_min >= init_offset"),
    ("UPDATE queues SET cold_commit = 9", "cold_commit >= cold_min"),
    ("UPDATE queues SET state = 'CREATED'", "state IN"),
    # a segment of an unknown queue, an empty one, one whose sizes lie
    (_SEG.format(t="nope", s=0, e=1, cl=100, cq=20), "FOREIGN KEY"),
    (_SEG.format(t="t", s=10, e=10, cl=100, cq=0), "end_offset > start_offset"),
    (_SEG.format(t="t", s=10, e=11, cl=99, cq=20), "cl_size = cl_end - cl_base"),
    (_SEG.format(t="t", s=10, e=11, cl=100, cq=20).replace("NULL, NULL)", "-1, NULL)"),
     "cl_stored_size >= 0"),
    # a stored digest without a stored size, or not 8 hex digits long
    (_SEG.format(t="t", s=10, e=11, cl=100, cq=20).replace("NULL, NULL)", "NULL, 'abcd0123')"),
     "cl_stored_digest IS NULL OR"),
    (_SEG.format(t="t", s=10, e=11, cl=100, cq=20).replace("NULL, NULL)", "7, 'abc')"),
     "cl_stored_digest IS NULL OR"),
    (_SEG.format(t="t", s=10, e=11, cl=100, cq=40), "cq_size = 20"),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "reason"), RAW_BREAKS)
def test_schema_refuses_rows_that_break_invariants(
    catalogue: Catalogue, state_dir: Path, sql: str, reason: str
) -> None:
    catalogue.queues.ensure("t", 0, 10)
    catalogue.close()
    raw = sqlite3.connect(state_dir / DB_NAME)
    try:
        raw.execute("PRAGMA foreign_keys = ON")
        with pytest.raises(sqlite3.IntegrityError, match=reason):
            raw.execute(sql)
    finally:
        raw.close()


# -- committing segments -------------------------------------------------------------------


def test_commit_advances_the_queue(catalogue: Catalogue, manifests: list[Manifest]) -> None:
    catalogue.queues.ensure(TOPIC, 0, 0)
    seg = catalogue.segments.commit(manifests[0])
    assert seg.manifest == manifests[0]
    assert seg.status is SegmentStatus.COMMITTED
    catalogue.segments.commit(manifests[1])
    row = catalogue.queues.get(TOPIC, 0)
    assert row is not None
    assert (row.cold_min, row.cold_commit, row.cold_cl_end) == (0, 7, manifests[1].cl_end)
    assert [s.manifest for s in catalogue.segments.of(TOPIC, 0)] == manifests[:2]


def test_same_manifest_twice_is_a_no_op(catalogue: Catalogue, manifests: list[Manifest]) -> None:
    row = _committed(catalogue, manifests, 2)
    again = catalogue.segments.commit(manifests[0])
    assert again.manifest == manifests[0]
    assert catalogue.queues.get(TOPIC, 0) == row
    assert len(catalogue.segments.of(TOPIC, 0)) == 2


def test_a_different_segment_at_a_committed_start_is_refused(
    catalogue: Catalogue, manifests: list[Manifest]
) -> None:
    _committed(catalogue, manifests, 2)
    other = dataclasses.replace(manifests[1], lease_epoch=2)
    with pytest.raises(CatalogueError, match=r"different segment .* already committed at offset 3"):
        catalogue.segments.commit(other)


def test_gaps_and_overlaps_are_refused(catalogue: Catalogue, manifests: list[Manifest]) -> None:
    _committed(catalogue, manifests, 1)
    with pytest.raises(
        CatalogueError, match=r"\[7, 9\) leaves a gap after the cold commit offset 3"
    ):
        catalogue.segments.commit(manifests[2])
    shifted = chain(QUEUE, [2, 4])[1].manifest  # [2, 6): overlaps [0, 3)
    with pytest.raises(CatalogueError, match=r"\[2, 6\) overlaps the cold commit offset 3"):
        catalogue.segments.commit(shifted)
    wrong_cl = chain(QUEUE, [3, 4])[1].manifest
    wrong_cl = dataclasses.replace(
        wrong_cl, cl_base=wrong_cl.cl_base + 1, cl_end=wrong_cl.cl_end + 1,
        commit_log=dataclasses.replace(
            wrong_cl.commit_log, name=object_name(wrong_cl.cl_base + 1, wrong_cl.attempt)
        ),
    )  # fmt: skip
    with pytest.raises(CatalogueError, match="cold commitlog offset"):
        catalogue.segments.commit(wrong_cl)
    row = catalogue.queues.get(TOPIC, 0)
    assert row is not None and row.cold_commit == 3


def test_commit_needs_a_known_active_queue_of_this_catalogue(
    catalogue: Catalogue, manifests: list[Manifest]
) -> None:
    with pytest.raises(CatalogueError, match="unknown queue"):
        catalogue.segments.commit(manifests[0])
    catalogue.queues.ensure(TOPIC, 0, 0)
    for state in (QueueState.PAUSED, QueueState.DIVERGED):
        catalogue.queues.set_state(TOPIC, 0, state)
        with pytest.raises(CatalogueError, match=f"queue is {state.value}"):
            catalogue.segments.commit(manifests[0])
        catalogue.queues.set_state(TOPIC, 0, QueueState.ACTIVE)
    foreign = chain(QueuePath("OtherCluster", BROKER, TOPIC, 0), [3])[0].manifest
    with pytest.raises(CatalogueError, match="does not belong"):
        catalogue.segments.commit(foreign)
    catalogue.segments.commit(manifests[0])
    catalogue.queues.set_state(TOPIC, 0, QueueState.DELETED)
    with pytest.raises(CatalogueError, match="queue is DELETED"):
        catalogue.segments.commit(manifests[1])


def test_commit_segments_commits_a_group_and_refuses_only_the_bad_ones(
    catalogue: Catalogue, manifests: list[Manifest]
) -> None:
    catalogue.queues.ensure(TOPIC, 0, 0)
    foreign = chain(QueuePath("OtherCluster", BROKER, TOPIC, 0), [3])[0].manifest
    # In order: [0,3); a gap ([7,9) before [3,7)); a foreign one; [3,7); [0,3) again.
    out = catalogue.segments.commit_many(
        [manifests[0], manifests[2], foreign, manifests[1], manifests[0]]
    )
    assert isinstance(out[1], CatalogueError) and "leaves a gap" in str(out[1])
    assert isinstance(out[2], CatalogueError) and "does not belong" in str(out[2])
    done = [o for i, o in enumerate(out) if i not in (1, 2)]
    assert all(not isinstance(o, CatalogueError) for o in done)
    (seg0, row0), (seg1, row1), (again, _) = done  # type: ignore[misc]
    assert (seg0.manifest, seg1.manifest, again.manifest) == (
        manifests[0], manifests[1], manifests[0],
    )  # fmt: skip
    assert (row0.cold_commit, row1.cold_commit) == (3, 7)  # each queue row as of its commit
    assert [s.manifest for s in catalogue.segments.of(TOPIC, 0)] == manifests[:2]
    assert catalogue.segments.commit_many([]) == []


def test_segment_at(catalogue: Catalogue, manifests: list[Manifest]) -> None:
    _committed(catalogue, manifests, 3)
    assert catalogue.segments.at(TOPIC, 0, 0).manifest == manifests[0]
    assert catalogue.segments.at(TOPIC, 0, 6).manifest == manifests[1]
    assert catalogue.segments.at(TOPIC, 0, 8).manifest == manifests[2]
    with pytest.raises(OffsetOutOfRangeError, match=r"cold holds \[0, 9\)"):
        catalogue.segments.at(TOPIC, 0, 9)
    with pytest.raises(OffsetOutOfRangeError, match="unknown queue"):
        catalogue.segments.at(TOPIC, 1, 0)
    catalogue.segments.mark_deleting(TOPIC, 0, 0)
    with pytest.raises(OffsetOutOfRangeError):  # readers never see a deleting segment
        catalogue.segments.at(TOPIC, 0, 1)


# -- expiry ----------------------------------------------------------------------------


def test_only_a_prefix_expires(catalogue: Catalogue, manifests: list[Manifest]) -> None:
    _committed(catalogue, manifests, 3)
    with pytest.raises(CatalogueError, match="only a prefix"):
        catalogue.segments.mark_deleting(TOPIC, 0, 3)
    seg = catalogue.segments.mark_deleting(TOPIC, 0, 0)
    assert seg.status is SegmentStatus.DELETING
    assert catalogue.segments.mark_deleting(TOPIC, 0, 0) == seg  # idempotent
    assert catalogue.segments.mark_deleting(TOPIC, 0, 3).status is SegmentStatus.DELETING
    with pytest.raises(CatalogueError, match="no segment starts at offset 4"):
        catalogue.segments.mark_deleting(TOPIC, 0, 4)


def test_drop_moves_cold_min(catalogue: Catalogue, manifests: list[Manifest]) -> None:
    _committed(catalogue, manifests, 3)
    with pytest.raises(CatalogueError, match="not DELETING"):
        catalogue.segments.drop(TOPIC, 0, 0)
    catalogue.segments.mark_deleting(TOPIC, 0, 0)
    catalogue.segments.mark_deleting(TOPIC, 0, 3)
    with pytest.raises(CatalogueError, match="not the oldest"):
        catalogue.segments.drop(TOPIC, 0, 3)
    row = catalogue.segments.drop(TOPIC, 0, 0)
    assert (row.cold_min, row.cold_commit) == (3, 9)
    row = catalogue.segments.drop(TOPIC, 0, 3)
    assert (row.cold_min, row.cold_commit) == (7, 9)
    catalogue.segments.mark_deleting(TOPIC, 0, 7)
    row = catalogue.segments.drop(TOPIC, 0, 7)
    assert (row.cold_min, row.cold_commit, row.cold_cl_end) == (9, 9, manifests[2].cl_end)
    assert catalogue.segments.of(TOPIC, 0) == []
    # the queue continues where it was: nothing is re-tiered, the address space goes on
    nxt = chain(QUEUE, [3, 4, 2, 5])[3].manifest
    catalogue.segments.commit(nxt)


# -- repair ----------------------------------------------------------------------------


def test_truncate_drops_the_tail(catalogue: Catalogue, manifests: list[Manifest]) -> None:
    _committed(catalogue, manifests, 3)
    dropped = catalogue.segments.truncate(TOPIC, 0, 3)
    assert [s.manifest for s in dropped] == manifests[1:]
    row = catalogue.queues.get(TOPIC, 0)
    assert row is not None
    assert (row.cold_min, row.cold_commit, row.cold_cl_end) == (0, 3, manifests[0].cl_end)
    catalogue.segments.commit(manifests[1])  # tiering resumes from the truncation point
    assert catalogue.segments.truncate(TOPIC, 0, 7) == []


def test_truncate_refusals(catalogue: Catalogue, manifests: list[Manifest]) -> None:
    row = _committed(catalogue, manifests, 3)
    with pytest.raises(CatalogueError, match="inside segment"):
        catalogue.segments.truncate(TOPIC, 0, 5)
    with pytest.raises(CatalogueError, match="outside"):
        catalogue.segments.truncate(TOPIC, 0, 10)
    catalogue.segments.mark_deleting(TOPIC, 0, 0)
    with pytest.raises(CatalogueError, match="being deleted"):
        catalogue.segments.truncate(TOPIC, 0, 0)
    assert catalogue.queues.get(TOPIC, 0) == row
    assert len(catalogue.segments.of(TOPIC, 0)) == 3


def test_truncate_below_init_is_refused(catalogue: Catalogue) -> None:
    catalogue.queues.ensure(TOPIC, 1, 50)
    with pytest.raises(CatalogueError, match="outside"):
        catalogue.segments.truncate(TOPIC, 1, 49)


# -- state and lease -------------------------------------------------------------------


def test_set_state(catalogue: Catalogue, clock: VirtualClock) -> None:
    catalogue.queues.ensure(TOPIC, 0, 0)
    clock.set_ms(clock.now_ms() + 1)
    row = catalogue.queues.set_state(TOPIC, 0, QueueState.DIVERGED)
    assert row.state is QueueState.DIVERGED
    assert row.updated_at_ms == clock.now_ms()
    with pytest.raises(CatalogueError, match="unknown queue"):
        catalogue.queues.set_state(TOPIC, 9, QueueState.PAUSED)


def test_lease_mirror(catalogue: Catalogue, clock: VirtualClock) -> None:
    assert catalogue.lease() is None
    first = catalogue.record_lease("uuid@host", 1, clock.now_ms() + 30_000)
    assert (first.broker, first.owner, first.epoch) == (BROKER, "uuid@host", 1)
    second = catalogue.record_lease("", 1, clock.now_ms())
    assert catalogue.lease() == second
    assert second.owner == ""


def test_a_file_that_is_not_a_database_is_refused(state_dir: Path) -> None:
    state_dir.mkdir(parents=True)
    (state_dir / DB_NAME).write_bytes(b"this is not SQLite" * 100)
    with pytest.raises(CatalogueError, match="cannot open catalogue: file is not a database"):
        Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER)
    with pytest.raises(CatalogueError, match="not a database"):
        Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER, read_only=True)
