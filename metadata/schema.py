"""The catalogue's SQLite schema and its ordered migrations.

``schema_version`` holds one row per applied migration. :func:`migrate` applies the
missing ones in order, each in its own transaction together with its version row, so a
crash leaves the database at a whole version. A database newer than the code is refused,
never downgraded.

The schema itself guards the invariants nothing may break, even through raw SQL: a queue
row cannot exist without its init offset and cold CQ base (NOT NULL, ``cq_base =
init_offset * 20``), ``init_offset <= cold_min <= cold_commit``, a segment is non-empty
and its sizes match its ranges, and a segment belongs to an existing queue; so is and
does a batch slice (v5), whose two byte ranges also lie inside its batch object.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tieredstore.errors import CatalogueError

__all__ = ["LATEST_VERSION", "MIGRATIONS", "Migration", "migrate", "schema_version"]


@dataclass(frozen=True, slots=True)
class Migration:
    """Statements that take the schema from ``version - 1`` to ``version``."""

    version: int
    description: str
    statements: tuple[str, ...]


_V1: Final = (
    """
    CREATE TABLE schema_version (
        version INTEGER PRIMARY KEY CHECK (version >= 1),
        description TEXT NOT NULL,
        applied_at_ms INTEGER NOT NULL
    ) STRICT
    """,
    """
    CREATE TABLE identity (
        singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
        cluster TEXT NOT NULL CHECK (cluster <> ''),
        broker TEXT NOT NULL CHECK (broker <> ''),
        created_at_ms INTEGER NOT NULL
    ) STRICT
    """,
    """
    CREATE TABLE queues (
        topic TEXT NOT NULL CHECK (topic <> ''),
        queue_id INTEGER NOT NULL CHECK (queue_id >= 0),
        init_offset INTEGER NOT NULL CHECK (init_offset >= 0),
        cq_base INTEGER NOT NULL CHECK (cq_base = init_offset * 20),
        cold_min INTEGER NOT NULL CHECK (cold_min >= init_offset),
        cold_commit INTEGER NOT NULL CHECK (cold_commit >= cold_min),
        cold_cl_end INTEGER NOT NULL CHECK (cold_cl_end >= 0),
        state TEXT NOT NULL CHECK (state IN ('ACTIVE', 'PAUSED', 'DIVERGED', 'DELETED')),
        updated_at_ms INTEGER NOT NULL,
        PRIMARY KEY (topic, queue_id)
    ) STRICT, WITHOUT ROWID
    """,
    """
    CREATE TABLE segments (
        topic TEXT NOT NULL,
        queue_id INTEGER NOT NULL,
        start_offset INTEGER NOT NULL CHECK (start_offset >= 0),
        end_offset INTEGER NOT NULL CHECK (end_offset > start_offset),
        cl_base INTEGER NOT NULL CHECK (cl_base >= 0),
        cl_end INTEGER NOT NULL CHECK (cl_end > cl_base),
        cl_size INTEGER NOT NULL CHECK (cl_size = cl_end - cl_base),
        cl_digest TEXT NOT NULL,
        cq_size INTEGER NOT NULL CHECK (cq_size = 20 * (end_offset - start_offset)),
        cq_digest TEXT NOT NULL,
        digest_algorithm TEXT NOT NULL,
        min_store_timestamp INTEGER NOT NULL CHECK (min_store_timestamp >= 0),
        max_store_timestamp INTEGER NOT NULL
            CHECK (max_store_timestamp >= min_store_timestamp),
        status TEXT NOT NULL CHECK (status IN ('COMMITTED', 'DELETING')),
        format_version INTEGER NOT NULL,
        writer_id TEXT NOT NULL CHECK (writer_id <> ''),
        lease_epoch INTEGER NOT NULL CHECK (lease_epoch >= 1),
        created_at_ms INTEGER NOT NULL,
        manifest_key TEXT NOT NULL UNIQUE,
        PRIMARY KEY (topic, queue_id, start_offset),
        FOREIGN KEY (topic, queue_id) REFERENCES queues (topic, queue_id)
    ) STRICT, WITHOUT ROWID
    """,
    "CREATE UNIQUE INDEX segments_by_end ON segments (topic, queue_id, end_offset)",
    """
    CREATE TABLE leases (
        broker TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        epoch INTEGER NOT NULL CHECK (epoch >= 0),
        expires_at_ms INTEGER NOT NULL,
        updated_at_ms INTEGER NOT NULL
    ) STRICT
    """,
)

# 0.2: data objects carry an upload attempt in their names (manifest format 2); the
# catalogue keeps it so it can name a segment's objects without reading the manifest.
# Rows of 0.1.0 segments keep "" (their objects' names have no attempt).
_V2: Final = ("ALTER TABLE segments ADD COLUMN attempt TEXT NOT NULL DEFAULT ''",)

#: A queue's offset range, the first columns of the tables keyed by one (same SQL text
#: as each migration shipped with).
_QUEUE_RANGE: Final = """\
        topic TEXT NOT NULL,
        queue_id INTEGER NOT NULL,
        start_offset INTEGER NOT NULL CHECK (start_offset >= 0),
        end_offset INTEGER NOT NULL CHECK (end_offset > start_offset),
"""

# 0.2: offsets the broker deleted before they were tiered, accepted by ``resume``.
_V3: Final = (
    """
    CREATE TABLE losses (
"""
    + _QUEUE_RANGE
    + """        accepted_at_ms INTEGER NOT NULL CHECK (accepted_at_ms >= 0),
        writer_id TEXT NOT NULL CHECK (writer_id <> ''),
        lease_epoch INTEGER NOT NULL CHECK (lease_epoch >= 1),
        record_key TEXT NOT NULL UNIQUE,
        PRIMARY KEY (topic, queue_id, start_offset),
        FOREIGN KEY (topic, queue_id) REFERENCES queues (topic, queue_id)
    ) STRICT, WITHOUT ROWID
    """,
)

# 0.3: the catalogue remembers the cold store it caches (canonical URL, see
# tieredstore.backends.factory.canonical_cold_url) and refuses another. Catalogues of
# earlier versions keep "" here until their next writer records the current URL, once.
_V4: Final = ("ALTER TABLE identity ADD COLUMN cold_url TEXT NOT NULL DEFAULT ''",)

# Batch slices (tieredstore.cold.batch): one row per queue's slice of a committed
# batch object, until compaction swaps a run of them for one segment (slice_table.py).
# ``cl_at`` / ``cq_at`` are absolute byte offsets in the batch object (Span.at).
_V5: Final = (
    """
    CREATE TABLE slices (
"""
    + _QUEUE_RANGE
    + """        cl_base INTEGER NOT NULL CHECK (cl_base >= 0),
        cl_end INTEGER NOT NULL CHECK (cl_end > cl_base),
        batch_key TEXT NOT NULL CHECK (batch_key <> ''),
        sequence INTEGER NOT NULL CHECK (sequence >= 0),
        cl_at INTEGER NOT NULL CHECK (cl_at >= 0),
        cl_size INTEGER NOT NULL CHECK (cl_size = cl_end - cl_base),
        cl_digest TEXT NOT NULL,
        cq_at INTEGER NOT NULL CHECK (cq_at >= 0),
        cq_size INTEGER NOT NULL CHECK (cq_size = 20 * (end_offset - start_offset)),
        cq_digest TEXT NOT NULL,
        object_size INTEGER NOT NULL,
        digest_algorithm TEXT NOT NULL,
        min_store_timestamp INTEGER NOT NULL CHECK (min_store_timestamp >= 0),
        max_store_timestamp INTEGER NOT NULL
            CHECK (max_store_timestamp >= min_store_timestamp),
        writer_id TEXT NOT NULL CHECK (writer_id <> ''),
        lease_epoch INTEGER NOT NULL CHECK (lease_epoch >= 1),
        created_at_ms INTEGER NOT NULL CHECK (created_at_ms >= 0),
        PRIMARY KEY (topic, queue_id, start_offset),
        UNIQUE (batch_key, topic, queue_id),
        CHECK (cl_at + cl_size <= object_size),
        CHECK (cq_at + cq_size <= object_size),
        FOREIGN KEY (topic, queue_id) REFERENCES queues (topic, queue_id)
    ) STRICT, WITHOUT ROWID
    """,
    "CREATE UNIQUE INDEX slices_by_end ON slices (topic, queue_id, end_offset)",
)

# 0.2: a segment's COMMIT_LOG object may be stored compressed (manifest format 3,
# tieredstore.cold.compressed.frames); NULL for a plain one (every row before this version).
_V6: Final = ("ALTER TABLE segments ADD COLUMN cl_stored_size INTEGER CHECK (cl_stored_size >= 0)",)

# 0.2: the CRC-32C of a compressed COMMIT_LOG object's stored bytes (manifest format 3's
# stored_digest); NULL for a plain one. Rows written before it (by unreleased builds that
# compressed) keep NULL: their manifests, lacking it, no longer validate either.
_V7: Final = (
    "ALTER TABLE segments ADD COLUMN cl_stored_digest TEXT "
    "CHECK (cl_stored_digest IS NULL OR (cl_stored_size IS NOT NULL "
    "AND length(cl_stored_digest) = 8))",
)

# 0.2: a batch's data section may be stored compressed (batch format 2,
# tieredstore.cold.batch): the object's stored size and where its frames begin (its header's
# length); NULL for a plain batch (every row before this version). ``object_size`` stays
# the size in uncompressed coordinates (header and decoded data section).
_V8: Final = (
    "ALTER TABLE slices ADD COLUMN stored_size INTEGER CHECK (stored_size > 0)",
    "ALTER TABLE slices ADD COLUMN frames_at INTEGER CHECK (frames_at >= 0)",
)

#: Every migration, in order. Append; never edit one that has shipped.
MIGRATIONS: Final[tuple[Migration, ...]] = (
    Migration(1, "queues, segments, leases, identity", _V1),
    Migration(2, "segments.attempt: the upload attempt in data object names", _V2),
    Migration(3, "losses: offsets deleted before tiering, accepted by resume", _V3),
    Migration(4, "identity.cold_url: the cold store this catalogue caches", _V4),
    Migration(5, "slices: batch slices committed and not yet compacted", _V5),
    Migration(6, "segments.cl_stored_size: a compressed COMMIT_LOG object's size", _V6),
    Migration(7, "segments.cl_stored_digest: a compressed COMMIT_LOG object's CRC-32C", _V7),
    Migration(8, "slices.stored_size, frames_at: a compressed batch's frames", _V8),
)
LATEST_VERSION: Final = MIGRATIONS[-1].version


def schema_version(conn: sqlite3.Connection) -> int:
    """Return the database's schema version; 0 for a database without the schema."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if exists is None:
        return 0
    (version,) = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
    return int(version)


def _check_ordered(migrations: Sequence[Migration]) -> None:
    for i, m in enumerate(migrations, start=1):
        if m.version != i:
            raise CatalogueError(f"migration #{i} has version {m.version}; versions must be 1..N")


def migrate(
    conn: sqlite3.Connection,
    *,
    now_ms: int,
    where: str,
    migrations: Sequence[Migration] = MIGRATIONS,
) -> int:
    """Apply the migrations ``conn`` lacks, in order; return the resulting version.

    ``conn`` must be in autocommit mode (``isolation_level=None``) and held by the one
    writer. ``where`` names the database for errors.

    Raises:
        CatalogueError: the database is newer than ``migrations`` (written by a newer
            tieredstore), or a migration fails (its transaction is rolled back).
    """
    _check_ordered(migrations)
    current = schema_version(conn)
    latest = len(migrations)
    if current > latest:
        raise CatalogueError(
            f"catalogue schema v{current} is newer than this tieredstore's v{latest}; "
            "upgrade tieredstore",
            where=where,
        )
    for m in migrations[current:]:
        try:
            conn.execute("BEGIN IMMEDIATE")
            for statement in m.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, description, applied_at_ms) VALUES (?, ?, ?)",
                (m.version, m.description, now_ms),
            )
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise CatalogueError(
                f"migration to schema v{m.version} ({m.description}) failed: {exc}", where=where
            ) from exc
    return max(current, latest)
