"""Schema versions and ordered migrations."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.segments import chain
from tieredstore.clock import VirtualClock
from tieredstore.cold.compressed.framed import Framed
from tieredstore.cold.layout import QueuePath, object_name
from tieredstore.cold.manifest import COMPRESSED_VERSION, Manifest
from tieredstore.errors import CatalogueError
from tieredstore.metadata.catalogue import DB_NAME, Catalogue
from tieredstore.metadata.schema import LATEST_VERSION, MIGRATIONS, Migration, schema_version

#: A probe migration one past the real ones, as the next release would add.
NEXT = LATEST_VERSION + 1
PROBE = Migration(NEXT, "test: a probe table", ("CREATE TABLE probe (x INTEGER NOT NULL) STRICT",))


def _versions(state_dir: Path) -> list[tuple[int, str]]:
    raw = sqlite3.connect(state_dir / DB_NAME)
    try:
        return [tuple(r) for r in raw.execute("SELECT version, description FROM schema_version")]
    finally:
        raw.close()


def _open(state_dir: Path, clock: VirtualClock, migrations: tuple[Migration, ...]) -> Catalogue:
    return Catalogue.open(
        state_dir, cluster=CLUSTER, broker=BROKER, clock=clock, migrations=migrations
    )


def test_a_new_catalogue_is_at_the_latest_version(state_dir: Path, clock: VirtualClock) -> None:
    _open(state_dir, clock, MIGRATIONS).close()
    assert LATEST_VERSION == len(MIGRATIONS) == 8
    assert _versions(state_dir) == [(m.version, m.description) for m in MIGRATIONS]


def test_an_old_catalogue_is_migrated_once_keeping_its_data(
    state_dir: Path, clock: VirtualClock
) -> None:
    with _open(state_dir, clock, MIGRATIONS) as old:
        row = old.queues.ensure("T", 0, 7)
    with _open(state_dir, clock, (*MIGRATIONS, PROBE)) as new:
        assert new.queues.all() == [row]
        with new.db.guard() as conn:
            assert schema_version(conn) == NEXT
            conn.execute("INSERT INTO probe VALUES (1)")
    # reopening does not run the probe again (its CREATE TABLE would fail)
    _open(state_dir, clock, (*MIGRATIONS, PROBE)).close()
    assert [v for v, _ in _versions(state_dir)] == [*range(1, NEXT + 1)]


def test_a_0_1_catalogue_keeps_its_segments_readable(state_dir: Path, clock: VirtualClock) -> None:
    """A v1 catalogue (0.1.0) gains ``attempt = ''``: its segments keep naming the data
    objects 0.1.0 wrote, without an attempt suffix."""
    _open(state_dir, clock, MIGRATIONS[:1]).close()
    raw = sqlite3.connect(state_dir / DB_NAME)
    with raw:
        raw.execute("INSERT INTO queues VALUES ('T', 0, 0, 0, 0, 10, 40, 'ACTIVE', 0)")
        raw.execute(
            "INSERT INTO segments VALUES ('T', 0, 0, 2, 0, 40, 40, ?, 40, ?, 'sha256', 5, 6, "
            "'COMMITTED', 1, 'w', 1, 0, 'k')",
            ("a" * 64, "b" * 64),
        )
    raw.close()
    with _open(state_dir, clock, MIGRATIONS) as cat:
        (seg,) = cat.segments.of("T", 0)
    assert seg.manifest.format_version == 1
    assert seg.manifest.attempt == ""
    assert seg.manifest.commit_log_key.endswith(f"/T/0/COMMIT_LOG/{object_name(0)}")
    assert seg.manifest.consume_queue_key.endswith(f"/T/0/CONSUME_QUEUE/{object_name(0)}")


def test_a_newer_catalogue_is_refused(state_dir: Path, clock: VirtualClock) -> None:
    _open(state_dir, clock, (*MIGRATIONS, PROBE)).close()
    with pytest.raises(
        CatalogueError, match=f"v{NEXT} is newer than this tieredstore's v{LATEST_VERSION}"
    ):
        _open(state_dir, clock, MIGRATIONS)
    with pytest.raises(CatalogueError, match="newer"):
        Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER, read_only=True)


def test_read_only_does_not_migrate(state_dir: Path, clock: VirtualClock) -> None:
    _open(state_dir, clock, MIGRATIONS).close()
    with pytest.raises(CatalogueError, match=r"older .* open it for writing once"):
        Catalogue.open(
            state_dir,
            cluster=CLUSTER,
            broker=BROKER,
            read_only=True,
            migrations=(*MIGRATIONS, PROBE),
        )
    assert [v for v, _ in _versions(state_dir)] == [*range(1, LATEST_VERSION + 1)]


def test_a_failing_migration_rolls_back_whole(state_dir: Path, clock: VirtualClock) -> None:
    _open(state_dir, clock, MIGRATIONS).close()
    bad = Migration(NEXT, "half good", ("CREATE TABLE half (x INTEGER)", "SELECT * FROM nowhere"))
    with pytest.raises(CatalogueError, match=rf"migration to schema v{NEXT} \(half good\) failed"):
        _open(state_dir, clock, (*MIGRATIONS, bad))
    with _open(state_dir, clock, MIGRATIONS) as cat, cat.db.guard() as conn:
        assert schema_version(conn) == LATEST_VERSION
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert "half" not in tables


def test_migrations_must_be_numbered_in_order(state_dir: Path, clock: VirtualClock) -> None:
    with pytest.raises(CatalogueError, match=r"versions must be 1\.\.N"):
        _open(state_dir, clock, (*MIGRATIONS, Migration(NEXT + 1, "skips one", ())))


# -- v5: batch slices ----------------------------------------------------------------------

#: topic, start, end, cl_end, cl_at, cl_size, cq_at, cq_size, object_size (cl_base 0).
_SLICE = (
    "INSERT INTO slices VALUES ('{t}', 0, {s}, {e}, 0, {ce}, 'k.batch', 3, {ca}, {cl}, 'd', "
    "{qa}, {cq}, 'd', {size}, 'crc32c', 1, 1, 'w', 1, 0, {stored}, {fa})"
)


def _slice(**kw: object) -> str:
    values: dict[str, object] = {"t": "t", "s": 10, "e": 11, "ce": 100, "ca": 0, "cl": 100}
    values |= {"qa": 100, "cq": 20, "size": 120, "stored": "NULL", "fa": "NULL"}
    values.update(kw)
    return _SLICE.format(**values)


SLICE_BREAKS = [
    (_slice(t="nope"), "FOREIGN KEY"),
    (_slice(e=10, cq=0), "end_offset > start_offset"),
    (_slice(ce=0, cl=0), "cl_end > cl_base"),
    (_slice(cl=99), "cl_size = cl_end - cl_base"),
    (_slice(cq=40), "cq_size = 20"),
    (_slice(size=119), "cq_at \\+ cq_size <= object_size"),
    (_slice(ca=30, size=125), "cl_at \\+ cl_size <= object_size"),
    (_slice(ca=-1), "cl_at >= 0"),
    (_slice().replace("'k.batch'", "''"), "batch_key <> ''"),
    (_slice().replace("'k.batch', 3", "'k.batch', -1"), "sequence >= 0"),
    (_slice(stored=0, fa=16), "stored_size > 0"),
    (_slice(stored=60, fa=-1), "frames_at >= 0"),
]


@pytest.mark.parametrize(("sql", "reason"), SLICE_BREAKS)
def test_raw_sql_cannot_break_a_slice_row(
    state_dir: Path, clock: VirtualClock, sql: str, reason: str
) -> None:
    with _open(state_dir, clock, MIGRATIONS) as cat:
        cat.queues.ensure("t", 0, 10)
    raw = sqlite3.connect(state_dir / DB_NAME)
    try:
        raw.execute("PRAGMA foreign_keys = ON")
        raw.execute(_slice())  # the valid row the broken ones are variations of
        raw.execute("DELETE FROM slices")
        with pytest.raises(sqlite3.IntegrityError, match=reason):
            raw.execute(sql)
    finally:
        raw.close()


def test_a_v4_catalogue_migrates_to_slices_keeping_its_rows(
    state_dir: Path, clock: VirtualClock
) -> None:
    with _open(state_dir, clock, MIGRATIONS[:4]) as old:
        row = old.queues.ensure("t", 0, 10)
        with old.db.guard() as conn:
            assert "slices" not in {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    with _open(state_dir, clock, MIGRATIONS) as new:
        assert new.queues.all() == [row]
        assert new.slices.of("t", 0) == []
        assert new.slices.referenced_batches() == set()
    assert [v for v, _ in _versions(state_dir)] == [*range(1, LATEST_VERSION + 1)]
    raw = sqlite3.connect(state_dir / DB_NAME)
    try:
        raw.execute("PRAGMA foreign_keys = ON")
        raw.execute(_slice())
        with pytest.raises(sqlite3.IntegrityError, match="cq_size = 20"):
            raw.execute(_slice(s=11, e=12, cq=40))
    finally:
        raw.close()


# -- v7: a compressed COMMIT_LOG object's stored digest -------------------------------------


def test_a_v6_catalogue_migrates_to_stored_digests_keeping_its_segments(
    state_dir: Path, clock: VirtualClock
) -> None:
    """A v6 catalogue (0.2 before stored digests) gains ``cl_stored_digest``; its plain
    segments read as before, and compressed ones commit with their stored digest."""
    plain, compressed = chain(QueuePath(CLUSTER, BROKER, "T", 0), [2, 3])
    _open(state_dir, clock, MIGRATIONS[:6]).close()
    raw = sqlite3.connect(state_dir / DB_NAME)
    with raw:
        raw.execute("INSERT INTO queues VALUES ('T', 0, 0, 0, 0, 0, 0, 'ACTIVE', 0)")
        raw.execute(
            "INSERT INTO segments VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'COMMITTED', "
            "?, ?, ?, ?, ?, ?, NULL)",
            _v6_row(plain.manifest),
        )
        raw.execute(
            "UPDATE queues SET cold_commit = ?, cold_cl_end = ?",
            (plain.manifest.end_offset, plain.manifest.cl_end),
        )
    raw.close()
    framed = Framed(99, "0a1b2c3d")
    ref = dataclasses.replace(compressed.manifest.commit_log, framed=framed)
    m = dataclasses.replace(compressed.manifest, format_version=COMPRESSED_VERSION, commit_log=ref)
    with _open(state_dir, clock, MIGRATIONS) as cat:
        cat.segments.commit(m)
        assert [s.manifest for s in cat.segments.of("T", 0)] == [plain.manifest, m]
    assert [v for v, _ in _versions(state_dir)] == [*range(1, LATEST_VERSION + 1)]
    raw = sqlite3.connect(state_dir / DB_NAME)
    try:
        rows = raw.execute("SELECT cl_stored_size, cl_stored_digest FROM segments").fetchall()
    finally:
        raw.close()
    assert rows == [(None, None), (99, "0a1b2c3d")]


def _v6_row(m: Manifest) -> tuple[object, ...]:
    return (
        m.topic, m.queue_id, m.start_offset, m.end_offset, m.cl_base, m.cl_end,
        m.commit_log.size, m.commit_log.digest, m.consume_queue.size, m.consume_queue.digest,
        m.digest_algorithm, m.min_store_timestamp, m.max_store_timestamp, m.format_version,
        m.writer_id, m.lease_epoch, m.created_at_ms, m.key, m.attempt,
    )  # fmt: skip
