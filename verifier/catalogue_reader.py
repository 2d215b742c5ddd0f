"""Read the sidecar's SQLite catalogue, read-only, for the catalogue_drift check and the
batch objects it names.

The verifier depends on ``tieredstore`` only and never trusts the catalogue: it reads
the database file directly (``mode=ro``, no lock, beside a running sidecar — SQLite's
WAL lets a reader see the last committed state) and uses it for nothing but the drift
comparison and to name a batch object its slice rows hold that cold does not. The file
is ``<state dir>/catalogue.sqlite3``; a catalogue from before batch slices (no
``slices`` table) has no slice rows.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pyarrow as pa
from pyspark.sql.types import StructType

from tieredstore.errors import CatalogueError
from tieredstore.state_dir import CATALOGUE_FILE
from tieredstore.verifier import schemas

__all__ = ["CatalogueRows", "read_catalogue"]

_SEGMENTS_SQL: Final = (
    "SELECT manifest_key, topic, queue_id, start_offset, end_offset, cl_base, cl_end, "
    "cl_digest, cq_digest, status FROM segments ORDER BY topic, queue_id, start_offset"
)

_HAS_SLICES_SQL: Final = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'slices'"

_SLICES_SQL: Final = (
    "SELECT batch_key, sequence, topic, queue_id, start_offset, end_offset FROM slices "
    "ORDER BY batch_key, topic, queue_id, start_offset"
)


@dataclass(frozen=True)
class CatalogueRows:
    """What the verifier reads of a catalogue: its segments (CATALOGUE) and its batch
    slice rows (CATALOGUE_SLICES), as Arrow tables read in one transaction."""

    segments: pa.Table
    slices: pa.Table


def read_catalogue(state_dir: Path, *, cluster: str, broker: str) -> CatalogueRows:
    """Return the catalogue's segments and slice rows (one read transaction).

    Raises:
        CatalogueError: no catalogue file, not a catalogue, or one that belongs to
            another cluster/broker.
    """
    path = Path(state_dir) / CATALOGUE_FILE
    if not path.is_file():
        raise CatalogueError("no catalogue here", where=str(path))
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30.0)
    except sqlite3.Error as exc:
        raise CatalogueError(f"cannot open catalogue read-only: {exc}", where=str(path)) from exc
    try:
        conn.execute("BEGIN")  # one snapshot: segments and slices as of one commit
        identity = conn.execute("SELECT cluster, broker FROM identity").fetchone()
        if identity is None or tuple(identity) != (cluster, broker):
            raise CatalogueError(
                f"catalogue belongs to cluster/broker {identity!r}, not {(cluster, broker)!r}",
                where=str(path),
            )
        segments = conn.execute(_SEGMENTS_SQL).fetchall()
        has_slices = conn.execute(_HAS_SLICES_SQL).fetchone() is not None
        slices = conn.execute(_SLICES_SQL).fetchall() if has_slices else []
    except sqlite3.Error as exc:
        raise CatalogueError(f"cannot read catalogue: {exc}", where=str(path)) from exc
    finally:
        conn.close()
    return CatalogueRows(
        _table(segments, schemas.CATALOGUE), _table(slices, schemas.CATALOGUE_SLICES)
    )


def _table(rows: list[tuple[object, ...]], schema: StructType) -> pa.Table:
    names = schema.fieldNames()
    return pa.Table.from_pylist(
        [dict(zip(names, r, strict=True)) for r in rows], schema=schemas.arrow_schema(schema)
    )
