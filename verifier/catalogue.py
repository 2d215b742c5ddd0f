"""Read the sidecar's SQLite catalogue, read-only, for the catalogue_drift check.

The verifier depends on ``tieredstore`` only and never trusts the catalogue: it reads
the database file directly (``mode=ro``, no lock, beside a running sidecar — SQLite's
WAL lets a reader see the last committed state) and uses it for nothing but the drift
comparison. The file is ``<state dir>/catalogue.sqlite3`` (schema version 1).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Final

import pyarrow as pa

from tieredstore.errors import CatalogueError
from verifier import schemas

__all__ = ["CATALOGUE_FILE", "read_catalogue"]

CATALOGUE_FILE: Final = "catalogue.sqlite3"

_SEGMENTS_SQL: Final = (
    "SELECT manifest_key, topic, queue_id, start_offset, end_offset, cl_base, cl_end, "
    "cl_digest, cq_digest, status FROM segments ORDER BY topic, queue_id, start_offset"
)


def read_catalogue(state_dir: Path, *, cluster: str, broker: str) -> pa.Table:
    """Return the catalogue's segments as a CATALOGUE-schema Arrow table.

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
        identity = conn.execute("SELECT cluster, broker FROM identity").fetchone()
        if identity is None or tuple(identity) != (cluster, broker):
            raise CatalogueError(
                f"catalogue belongs to cluster/broker {identity!r}, not {(cluster, broker)!r}",
                where=str(path),
            )
        rows = conn.execute(_SEGMENTS_SQL).fetchall()
    except sqlite3.Error as exc:
        raise CatalogueError(f"cannot read catalogue: {exc}", where=str(path)) from exc
    finally:
        conn.close()
    names = schemas.CATALOGUE.fieldNames()
    return pa.Table.from_pylist(
        [dict(zip(names, r, strict=True)) for r in rows],
        schema=schemas.arrow_schema(schemas.CATALOGUE),
    )
