"""The catalogue's segment commits: one at a time, or a group in one transaction.

Rules: :meth:`SegmentCommits.commit_segment` accepts only the segment that starts at
``(cold_commit, cold_cl_end)`` of an ACTIVE queue (the same manifest twice is a no-op),
and moves the queue's ``cold_commit`` to its end. :meth:`SegmentCommits.commit_segments`
applies the same rules to many segments in one transaction (one fsync), a savepoint per
segment, so a refused one fails alone. Part of :class:`metadata.catalogue.Catalogue`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from metadata.database import _SEGMENT_COLUMNS, CatalogueDatabase
from metadata.rows import QueueRow, QueueState, SegmentRow, SegmentStatus
from tieredstore.errors import CatalogueError
from tieredstore.manifest import Manifest

__all__ = ["SegmentCommits"]


class SegmentCommits(CatalogueDatabase):
    """Segment commits (see the module docstring)."""

    def commit_segment(self, manifest: Manifest) -> SegmentRow:
        """Record a segment whose manifest is written, and advance the queue past it.

        In one transaction: insert the segment, set ``cold_commit = end`` and
        ``cold_cl_end = cl_end``. Committing the very same manifest again returns the
        existing row (a retry after a crash between manifest write and catalogue commit).

        Raises:
            CatalogueError: another cluster/broker's manifest; an unknown queue; a queue
                not ACTIVE; a different segment already at this start; or a segment that
                does not continue the queue exactly (``start != cold_commit`` or
                ``cl_base != cold_cl_end``: a gap or an overlap).
        """
        with self._transaction() as conn:
            return self._commit_one(conn, manifest)[0]

    def commit_segments(
        self, manifests: Sequence[Manifest]
    ) -> list[tuple[SegmentRow, QueueRow] | CatalogueError]:
        """:meth:`commit_segment` of many segments in **one** transaction (one fsync: a
        group commit), in order; per manifest, its row and its queue's row after it, or
        the CatalogueError that refused it (a refused one changes nothing; the others
        are committed all the same).

        Raises:
            CatalogueError: the database failed (then none of them is committed).
        """
        out: list[tuple[SegmentRow, QueueRow] | CatalogueError] = []
        with self._transaction() as conn:
            for i, manifest in enumerate(manifests):
                conn.execute(f"SAVEPOINT s{i}")
                try:
                    out.append(self._commit_one(conn, manifest))
                except CatalogueError as exc:
                    conn.execute(f"ROLLBACK TO s{i}")
                    out.append(exc)
                conn.execute(f"RELEASE s{i}")
        return out

    def _commit_one(
        self, conn: sqlite3.Connection, manifest: Manifest
    ) -> tuple[SegmentRow, QueueRow]:
        """The checks and writes of :meth:`commit_segment`, in the open transaction;
        the segment's row and its queue's row after it."""
        where = self._where(manifest.topic, manifest.queue_id)
        self._require_ours("manifest", manifest.cluster, manifest.broker, where)
        row = self._require_queue(conn, manifest.topic, manifest.queue_id)
        same_start = self._fetch_segments(
            conn, row.topic, row.queue_id, "AND start_offset = ?", manifest.start_offset
        )
        if same_start and same_start[0].manifest == manifest:
            return same_start[0], row
        if same_start:
            raise CatalogueError(
                f"a different segment {same_start[0]} is already committed at offset "
                f"{manifest.start_offset}",
                where=where,
            )
        self._check_continues(row, manifest, where)
        conn.execute(
            f"INSERT INTO segments ({_SEGMENT_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            _segment_values(manifest, SegmentStatus.COMMITTED),
        )
        queue = self._set_queue(
            conn, row, cold_commit=manifest.end_offset, cold_cl_end=manifest.cl_end
        )
        seg = self._fetch_segments(
            conn, row.topic, row.queue_id, "AND start_offset = ?", manifest.start_offset
        )[0]
        return seg, queue

    @staticmethod
    def _check_continues(row: QueueRow, manifest: Manifest, where: str) -> None:
        if row.state is not QueueState.ACTIVE:
            raise CatalogueError(f"queue is {row.state.value}; commits are refused", where=where)
        seg = f"segment [{manifest.start_offset}, {manifest.end_offset})"
        if manifest.start_offset != row.cold_commit:
            kind = "leaves a gap after" if manifest.start_offset > row.cold_commit else "overlaps"
            raise CatalogueError(
                f"{seg} {kind} the cold commit offset {row.cold_commit}", where=where
            )
        if manifest.cl_base != row.cold_cl_end:
            raise CatalogueError(
                f"{seg} starts at cold commitlog offset {manifest.cl_base}, the queue's cold "
                f"commitlog ends at {row.cold_cl_end}",
                where=where,
            )


def _segment_values(m: Manifest, status: SegmentStatus) -> tuple[Any, ...]:
    return (
        m.topic, m.queue_id, m.start_offset, m.end_offset, m.cl_base, m.cl_end,
        m.commit_log.size, m.commit_log.digest, m.consume_queue.size, m.consume_queue.digest,
        m.digest_algorithm, m.min_store_timestamp, m.max_store_timestamp, status.value,
        m.format_version, m.writer_id, m.lease_epoch, m.created_at_ms, m.key, m.attempt,
    )  # fmt: skip
