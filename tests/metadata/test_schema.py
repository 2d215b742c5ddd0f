"""Schema versions and ordered migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from metadata.catalogue import DB_NAME, Catalogue
from metadata.schema import LATEST_VERSION, MIGRATIONS, Migration, schema_version
from tests.segment_factory import BROKER, CLUSTER
from tieredstore.clock import VirtualClock
from tieredstore.errors import CatalogueError

V2 = Migration(2, "test: a probe table", ("CREATE TABLE probe (x INTEGER NOT NULL) STRICT",))


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
    assert LATEST_VERSION == 1
    assert _versions(state_dir) == [(1, MIGRATIONS[0].description)]


def test_an_old_catalogue_is_migrated_once_keeping_its_data(
    state_dir: Path, clock: VirtualClock
) -> None:
    with _open(state_dir, clock, MIGRATIONS) as v1:
        row = v1.ensure_queue("T", 0, 7)
    with _open(state_dir, clock, (*MIGRATIONS, V2)) as v2:
        assert v2.queues() == [row]
        with v2._guard():
            assert schema_version(v2._conn) == 2
            v2._conn.execute("INSERT INTO probe VALUES (1)")
    # reopening does not run v2 again (its CREATE TABLE would fail)
    _open(state_dir, clock, (*MIGRATIONS, V2)).close()
    assert [v for v, _ in _versions(state_dir)] == [1, 2]


def test_a_newer_catalogue_is_refused(state_dir: Path, clock: VirtualClock) -> None:
    _open(state_dir, clock, (*MIGRATIONS, V2)).close()
    with pytest.raises(CatalogueError, match="v2 is newer than this tieredstore's v1"):
        _open(state_dir, clock, MIGRATIONS)
    with pytest.raises(CatalogueError, match="newer"):
        Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER, read_only=True)


def test_read_only_does_not_migrate(state_dir: Path, clock: VirtualClock) -> None:
    _open(state_dir, clock, MIGRATIONS).close()
    with pytest.raises(CatalogueError, match=r"older .* open it for writing once"):
        Catalogue.open(
            state_dir, cluster=CLUSTER, broker=BROKER, read_only=True, migrations=(*MIGRATIONS, V2)
        )
    assert [v for v, _ in _versions(state_dir)] == [1]


def test_a_failing_migration_rolls_back_whole(state_dir: Path, clock: VirtualClock) -> None:
    _open(state_dir, clock, MIGRATIONS).close()
    bad = Migration(2, "half good", ("CREATE TABLE half (x INTEGER)", "SELECT * FROM nowhere"))
    with pytest.raises(CatalogueError, match=r"migration to schema v2 \(half good\) failed"):
        _open(state_dir, clock, (*MIGRATIONS, bad))
    with _open(state_dir, clock, MIGRATIONS) as cat, cat._guard():
        assert schema_version(cat._conn) == 1
        tables = {r[0] for r in cat._conn.execute("SELECT name FROM sqlite_master")}
        assert "half" not in tables


def test_migrations_must_be_numbered_in_order(state_dir: Path, clock: VirtualClock) -> None:
    with pytest.raises(CatalogueError, match=r"versions must be 1\.\.N"):
        _open(state_dir, clock, (*MIGRATIONS, Migration(3, "skips 2", ())))
