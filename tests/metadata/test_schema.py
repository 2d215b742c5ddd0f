"""Schema versions and ordered migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from metadata.catalogue import DB_NAME, Catalogue
from metadata.schema import LATEST_VERSION, MIGRATIONS, Migration, schema_version
from tieredstore.clock import VirtualClock
from tieredstore.cold.layout import object_name
from tieredstore.errors import CatalogueError
from tieredstore.testing.settings import BROKER, CLUSTER

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
    assert LATEST_VERSION == len(MIGRATIONS) == 4
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
