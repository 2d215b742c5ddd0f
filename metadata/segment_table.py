"""The catalogue's segments table: lookups, commits, expiry and the truncation repair needs.

Rules:

* :meth:`~SegmentTable.commit` accepts only the segment that starts at ``(cold_commit,
  cold_cl_end)`` of an ACTIVE queue (the same manifest twice is a no-op), and moves the
  queue's ``cold_commit`` to its end. :meth:`~SegmentTable.commit_many` applies the same
  rules to many segments in one transaction (one fsync), a savepoint per segment, so a
  refused one fails alone.
* Only the oldest COMMITTED segment may be marked DELETING, and only the oldest DELETING
  one dropped, ``cold_min`` following (the lowest start over the segments and batch slices
  left). A segment after a batch slice never expires before it: a slice is only ever
  replaced by compaction (:mod:`tieredstore.metadata.slice_table`), so expiry waits for that.
* :meth:`~SegmentTable.truncate` forgets a suffix, segments and batch slices, for
  ``repair`` and the heal of a lost tail, which first quarantine the segments and
  withdraw the slices in cold (:class:`~tieredstore.cold.batch.Withdrawn`).
* Batch slices before a segment change nothing for its commit: continuity comes from the
  queue row, which slices advance as segments do.

Callers reach it as ``catalogue.segments`` (:class:`tieredstore.metadata.catalogue.Catalogue`).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from typing import Any

from tieredstore.cold.manifest import Manifest
from tieredstore.errors import CatalogueError, OffsetOutOfRangeError
from tieredstore.metadata.database import SEGMENT_COLUMNS, CatalogueDatabase, each_in_savepoint
from tieredstore.metadata.rows import QueueRow, QueueState, SegmentRow, SegmentStatus

__all__ = ["SegmentTable", "check_continues", "insert_segment"]

log = logging.getLogger(__name__)


class SegmentTable:
    """Committed and expiring segments (see the module docstring), over the catalogue's
    database."""

    def __init__(self, db: CatalogueDatabase) -> None:
        self._db = db

    # -- lookups ---------------------------------------------------------------------
    def of(self, topic: str, queue_id: int) -> list[SegmentRow]:
        """The queue's segments (COMMITTED and DELETING), ordered by start offset."""
        with self._db.guard() as conn:
            return self._db.fetch_segments(conn, topic, queue_id)

    def at(self, topic: str, queue_id: int, offset: int) -> SegmentRow:
        """Return the COMMITTED segment holding queue offset ``offset``.

        Raises OffsetOutOfRangeError when no committed segment holds it (not tiered yet,
        expired, being deleted, or an unknown queue), naming the queue's cold range.
        """
        with self._db.guard() as conn:
            found = self._db.fetch_segments(
                conn, topic, queue_id,
                "AND start_offset <= ? AND end_offset > ? AND status = ?",
                offset, offset, SegmentStatus.COMMITTED.value,
            )  # fmt: skip
            row = self._db.fetch_queue(conn, topic, queue_id)
        if found:
            return found[0]
        span = "unknown queue" if row is None else f"cold holds [{row.cold_min}, {row.cold_commit})"
        raise OffsetOutOfRangeError(
            f"queue offset {offset} is in no committed segment ({span})",
            where=self._db.queue_where(topic, queue_id),
        )

    # -- commits ---------------------------------------------------------------------
    def commit(self, manifest: Manifest) -> SegmentRow:
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
        with self._db.transaction() as conn:
            return self._commit_one(conn, manifest)[0]

    def commit_many(
        self, manifests: Sequence[Manifest]
    ) -> list[tuple[SegmentRow, QueueRow] | CatalogueError]:
        """:meth:`commit` of many segments in **one** transaction (one fsync: a
        group commit), in order; per manifest, its row and its queue's row after it, or
        the CatalogueError that refused it (a refused one changes nothing; the others
        are committed all the same).

        Raises:
            CatalogueError: the database failed (then none of them is committed).
        """
        return each_in_savepoint(self._db, manifests, self._commit_one)

    def _commit_one(
        self, conn: sqlite3.Connection, manifest: Manifest
    ) -> tuple[SegmentRow, QueueRow]:
        """The checks and writes of :meth:`commit`, in the open transaction;
        the segment's row and its queue's row after it."""
        where = self._db.queue_where(manifest.topic, manifest.queue_id)
        self._db.require_ours("manifest", manifest.cluster, manifest.broker, where)
        row = self._db.require_queue(conn, manifest.topic, manifest.queue_id)
        same_start = self._db.fetch_segments(
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
        check_continues(row, f"segment [{manifest.start_offset}, {manifest.end_offset})",
                        manifest.start_offset, manifest.cl_base, where)  # fmt: skip
        insert_segment(conn, manifest)
        queue = self._db.set_queue(
            conn, row, cold_commit=manifest.end_offset, cold_cl_end=manifest.cl_end
        )
        seg = self._db.fetch_segments(
            conn, row.topic, row.queue_id, "AND start_offset = ?", manifest.start_offset
        )[0]
        return seg, queue

    # -- expiry ----------------------------------------------------------------------
    def mark_deleting(self, topic: str, queue_id: int, start_offset: int) -> SegmentRow:
        """Mark the segment at ``start_offset`` DELETING (expiry step 1); idempotent.

        Only a prefix of a queue's segments expires, so every segment before it must be
        DELETING already. Readers stop seeing it at once (:meth:`at`).
        """
        where = self._db.queue_where(topic, queue_id)
        with self._db.transaction() as conn:
            seg = self._require_segment(conn, topic, queue_id, start_offset)
            if seg.status is SegmentStatus.DELETING:
                return seg
            older = self._db.fetch_segments(
                conn, topic, queue_id, "AND start_offset < ? AND status = ?",
                start_offset, SegmentStatus.COMMITTED.value,
            )  # fmt: skip
            if older:
                raise CatalogueError(
                    f"cannot expire {seg} before the older committed {older[0]}: only a "
                    "prefix of a queue expires",
                    where=where,
                )
            sliced = _slice_ranges(conn, topic, queue_id, "start_offset < ?", start_offset)
            if sliced:
                raise CatalogueError(
                    f"cannot expire {seg} before the older batch slice [{sliced[0][0]}, "
                    f"{sliced[0][1]}): only a prefix expires; wait for compaction",
                    where=where,
                )
            conn.execute(
                "UPDATE segments SET status = ? WHERE topic = ? AND queue_id = ? "
                "AND start_offset = ?",
                (SegmentStatus.DELETING.value, topic, queue_id, start_offset),
            )
            return self._require_segment(conn, topic, queue_id, start_offset)

    def drop(self, topic: str, queue_id: int, start_offset: int) -> QueueRow:
        """Remove a DELETING segment's row (expiry's last step); return the queue row.

        It must be the queue's oldest segment. ``cold_min`` moves to the lowest start of
        the segments and batch slices left, or to ``cold_commit`` when none remains.
        """
        where = self._db.queue_where(topic, queue_id)
        with self._db.transaction() as conn:
            seg = self._require_segment(conn, topic, queue_id, start_offset)
            if seg.status is not SegmentStatus.DELETING:
                raise CatalogueError(f"{seg} is not DELETING; mark it first", where=where)
            first = self._db.fetch_segments(conn, topic, queue_id)[0]
            if first.start_offset != start_offset:
                raise CatalogueError(f"{seg} is not the oldest segment ({first} is)", where=where)
            conn.execute(
                "DELETE FROM segments WHERE topic = ? AND queue_id = ? AND start_offset = ?",
                (topic, queue_id, start_offset),
            )
            (rest,) = conn.execute(
                "SELECT min(s) FROM (SELECT min(start_offset) AS s FROM segments WHERE topic = ? "
                "AND queue_id = ? UNION ALL SELECT min(start_offset) FROM slices WHERE topic = ? "
                "AND queue_id = ?)",
                (topic, queue_id, topic, queue_id),
            ).fetchone()
            row = self._db.require_queue(conn, topic, queue_id)
            cold_min = row.cold_commit if rest is None else rest
            return self._db.set_queue(conn, row, cold_min=cold_min)

    # -- repair ----------------------------------------------------------------------
    def _require_segment(
        self, conn: sqlite3.Connection, topic: str, queue_id: int, start_offset: int
    ) -> SegmentRow:
        self._db.require_queue(conn, topic, queue_id)
        found = self._db.fetch_segments(conn, topic, queue_id, "AND start_offset = ?", start_offset)
        if not found:
            raise CatalogueError(
                f"no segment starts at offset {start_offset}",
                where=self._db.queue_where(topic, queue_id),
            )
        return found[0]

    def _truncation(
        self, conn: sqlite3.Connection, row: QueueRow, to_offset: int
    ) -> list[SegmentRow]:
        """The segment rows :meth:`truncate` drops; raises CatalogueError where it
        must refuse (see there)."""
        topic, queue_id = row.topic, row.queue_id
        where = self._db.queue_where(topic, queue_id)
        if not row.init_offset <= to_offset <= row.cold_commit:
            raise CatalogueError(
                f"cannot truncate to {to_offset}: outside [init {row.init_offset}, "
                f"cold commit {row.cold_commit}]",
                where=where,
            )
        sliced = _slice_ranges(conn, topic, queue_id, "start_offset < ? AND end_offset > ?",
                               to_offset, to_offset)  # fmt: skip
        if sliced:
            raise CatalogueError(
                f"cannot truncate to {to_offset}: inside the batch slice "
                f"[{sliced[0][0]}, {sliced[0][1]})",
                where=where,
            )
        straddling = self._db.fetch_segments(
            conn, topic, queue_id, "AND start_offset < ? AND end_offset > ?",
            to_offset, to_offset,
        )  # fmt: skip
        if straddling:
            raise CatalogueError(
                f"cannot truncate to {to_offset}: inside segment {straddling[0]}", where=where
            )
        inside = conn.execute(
            "SELECT start_offset, end_offset FROM losses WHERE topic = ? AND queue_id = ? "
            "AND start_offset < ? AND end_offset > ?",
            (topic, queue_id, to_offset, to_offset),
        ).fetchone()
        if inside is not None:
            raise CatalogueError(
                f"cannot truncate to {to_offset}: inside the accepted loss "
                f"[{inside[0]}, {inside[1]})",
                where=where,
            )
        dropped = self._db.fetch_segments(conn, topic, queue_id, "AND start_offset >= ?", to_offset)
        deleting = [s for s in dropped if s.status is SegmentStatus.DELETING]
        if deleting:
            raise CatalogueError(
                f"cannot truncate: {deleting[0]} is being deleted; finish expiry first",
                where=where,
            )
        return dropped

    def truncate(self, topic: str, queue_id: int, to_offset: int) -> list[SegmentRow]:
        """Forget the segments and batch slices at and after ``to_offset``; return the
        segments.

        For ``tieredstore repair`` and the heal of a lost tail, after the segments are
        quarantined and the slices withdrawn in cold: drops every segment and slice row
        starting at or after ``to_offset`` and resets ``cold_commit`` to ``to_offset`` and
        ``cold_cl_end`` to the lowest commitlog base dropped (unchanged when nothing is
        dropped); ``cold_min`` becomes ``min(cold_min, to_offset)``. The queue's state is
        left to the caller.

        Accepted losses starting at or after ``to_offset`` are forgotten too (repair
        quarantines their records).

        Raises CatalogueError when ``to_offset`` is past ``cold_commit``, before the
        init offset, inside a segment, a batch slice or an accepted loss rather than at a
        boundary, or when a segment to drop is DELETING (finish the expiry first).
        """
        with self._db.transaction() as conn:
            row = self._db.require_queue(conn, topic, queue_id)
            dropped = self._truncation(conn, row, to_offset)
            sliced_base = _forget_from(conn, topic, queue_id, to_offset)
            bases = [
                b for b in (sliced_base, dropped[0].cl_base if dropped else None) if b is not None
            ]
            self._db.set_queue(
                conn,
                row,
                cold_min=min(row.cold_min, to_offset),
                cold_commit=to_offset,
                cold_cl_end=min(bases, default=row.cold_cl_end),
            )
        if dropped:
            log.warning("queue %s/%d truncated to %d: %d segment rows dropped",
                        topic, queue_id, to_offset, len(dropped))  # fmt: skip
        return dropped


def _forget_from(conn: sqlite3.Connection, topic: str, queue_id: int, to_offset: int) -> int | None:
    """Delete the queue's segment, slice and loss rows starting at or after ``to_offset``;
    return the lowest commitlog base of the slices deleted (None: none was)."""
    (sliced_base,) = conn.execute(
        "SELECT min(cl_base) FROM slices WHERE topic = ? AND queue_id = ? AND start_offset >= ?",
        (topic, queue_id, to_offset),
    ).fetchone()
    for table in ("segments", "slices", "losses"):
        conn.execute(
            f"DELETE FROM {table} WHERE topic = ? AND queue_id = ? AND start_offset >= ?",
            (topic, queue_id, to_offset),
        )
    return None if sliced_base is None else int(sliced_base)


def _slice_ranges(
    conn: sqlite3.Connection, topic: str, queue_id: int, where: str, *params: Any
) -> list[tuple[int, int]]:
    """``[start, end)`` of the queue's batch slices that ``where`` selects, by start."""
    rows = conn.execute(
        f"SELECT start_offset, end_offset FROM slices WHERE topic = ? AND queue_id = ? "
        f"AND {where} ORDER BY start_offset",
        (topic, queue_id, *params),
    ).fetchall()
    return [(start, end) for start, end in rows]


def check_continues(row: QueueRow, what: str, start: int, cl_base: int, where: str) -> None:
    """Refuse (CatalogueError) ``what`` (``"segment [s, e)"``, ``"slice [s, e)"``),
    starting at queue offset ``start`` and cold commitlog offset ``cl_base``, unless the
    queue is ACTIVE and it continues the queue exactly: no gap, no overlap."""
    if row.state is not QueueState.ACTIVE:
        raise CatalogueError(f"queue is {row.state.value}; commits are refused", where=where)
    if start != row.cold_commit:
        kind = "leaves a gap after" if start > row.cold_commit else "overlaps"
        raise CatalogueError(f"{what} {kind} the cold commit offset {row.cold_commit}", where=where)
    if cl_base != row.cold_cl_end:
        raise CatalogueError(
            f"{what} starts at cold commitlog offset {cl_base}, the queue's cold "
            f"commitlog ends at {row.cold_cl_end}",
            where=where,
        )


def insert_segment(conn: sqlite3.Connection, m: Manifest) -> None:
    """Insert ``m``'s segment row, COMMITTED (the caller checked it may be)."""
    conn.execute(
        f"INSERT INTO segments ({SEGMENT_COLUMNS}) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        _segment_values(m, SegmentStatus.COMMITTED),
    )


def _segment_values(m: Manifest, status: SegmentStatus) -> tuple[Any, ...]:
    return (
        m.topic, m.queue_id, m.start_offset, m.end_offset, m.cl_base, m.cl_end,
        m.commit_log.size, m.commit_log.digest, m.consume_queue.size, m.consume_queue.digest,
        m.digest_algorithm, m.min_store_timestamp, m.max_store_timestamp, status.value,
        m.format_version, m.writer_id, m.lease_epoch, m.created_at_ms, m.key, m.attempt,
        None if m.commit_log.framed is None else m.commit_log.framed.stored_size,
        None if m.commit_log.framed is None else m.commit_log.framed.stored_digest,
    )  # fmt: skip
