"""The catalogue's segments table: lookups, expiry and the truncation repair needs.

Rules: only the oldest COMMITTED segment may be marked DELETING, and only the oldest
DELETING one dropped, ``cold_min`` following; :meth:`~SegmentTable.truncate_queue`
forgets a suffix for ``repair``. Commits are :mod:`metadata.segment_commits`. Part of
:class:`metadata.catalogue.Catalogue`.
"""

from __future__ import annotations

import logging
import sqlite3

from metadata.database import CatalogueDatabase
from metadata.rows import QueueRow, SegmentRow, SegmentStatus
from tieredstore.errors import CatalogueError, OffsetOutOfRangeError

__all__ = ["SegmentTable"]

log = logging.getLogger(__name__)


class SegmentTable(CatalogueDatabase):
    """Committed and expiring segments (see the module docstring)."""

    # -- segments --------------------------------------------------------------------
    def segments(self, topic: str, queue_id: int) -> list[SegmentRow]:
        """The queue's segments (COMMITTED and DELETING), ordered by start offset."""
        with self._guard():
            return self._fetch_segments(self._conn, topic, queue_id)

    def segment_at(self, topic: str, queue_id: int, offset: int) -> SegmentRow:
        """Return the COMMITTED segment holding queue offset ``offset``.

        Raises OffsetOutOfRangeError when no committed segment holds it (not tiered yet,
        expired, being deleted, or an unknown queue), naming the queue's cold range.
        """
        with self._guard():
            found = self._fetch_segments(
                self._conn, topic, queue_id,
                "AND start_offset <= ? AND end_offset > ? AND status = ?",
                offset, offset, SegmentStatus.COMMITTED.value,
            )  # fmt: skip
            row = self._fetch_queue(self._conn, topic, queue_id)
        if found:
            return found[0]
        span = "unknown queue" if row is None else f"cold holds [{row.cold_min}, {row.cold_commit})"
        raise OffsetOutOfRangeError(
            f"queue offset {offset} is in no committed segment ({span})",
            where=self._where(topic, queue_id),
        )

    def mark_deleting(self, topic: str, queue_id: int, start_offset: int) -> SegmentRow:
        """Mark the segment at ``start_offset`` DELETING (expiry step 1); idempotent.

        Only a prefix of a queue's segments expires, so every segment before it must be
        DELETING already. Readers stop seeing it at once (:meth:`segment_at`).
        """
        where = self._where(topic, queue_id)
        with self._transaction() as conn:
            seg = self._require_segment(conn, topic, queue_id, start_offset)
            if seg.status is SegmentStatus.DELETING:
                return seg
            older = self._fetch_segments(
                conn, topic, queue_id, "AND start_offset < ? AND status = ?",
                start_offset, SegmentStatus.COMMITTED.value,
            )  # fmt: skip
            if older:
                raise CatalogueError(
                    f"cannot expire {seg} before the older committed {older[0]}: only a "
                    "prefix of a queue expires",
                    where=where,
                )
            conn.execute(
                "UPDATE segments SET status = ? WHERE topic = ? AND queue_id = ? "
                "AND start_offset = ?",
                (SegmentStatus.DELETING.value, topic, queue_id, start_offset),
            )
            return self._require_segment(conn, topic, queue_id, start_offset)

    def drop_segment(self, topic: str, queue_id: int, start_offset: int) -> QueueRow:
        """Remove a DELETING segment's row (expiry's last step); return the queue row.

        It must be the queue's oldest segment. ``cold_min`` moves to the next segment's
        start, or to ``cold_commit`` when none remains.
        """
        where = self._where(topic, queue_id)
        with self._transaction() as conn:
            seg = self._require_segment(conn, topic, queue_id, start_offset)
            if seg.status is not SegmentStatus.DELETING:
                raise CatalogueError(f"{seg} is not DELETING; mark it first", where=where)
            first = self._fetch_segments(conn, topic, queue_id)[0]
            if first.start_offset != start_offset:
                raise CatalogueError(f"{seg} is not the oldest segment ({first} is)", where=where)
            conn.execute(
                "DELETE FROM segments WHERE topic = ? AND queue_id = ? AND start_offset = ?",
                (topic, queue_id, start_offset),
            )
            rest = self._fetch_segments(conn, topic, queue_id)
            row = self._require_queue(conn, topic, queue_id)
            cold_min = rest[0].start_offset if rest else row.cold_commit
            return self._set_queue(conn, row, cold_min=cold_min)

    def _require_segment(
        self, conn: sqlite3.Connection, topic: str, queue_id: int, start_offset: int
    ) -> SegmentRow:
        self._require_queue(conn, topic, queue_id)
        found = self._fetch_segments(conn, topic, queue_id, "AND start_offset = ?", start_offset)
        if not found:
            raise CatalogueError(
                f"no segment starts at offset {start_offset}", where=self._where(topic, queue_id)
            )
        return found[0]

    def _truncation(
        self, conn: sqlite3.Connection, row: QueueRow, to_offset: int
    ) -> list[SegmentRow]:
        """The segment rows :meth:`truncate_queue` drops; raises CatalogueError where it
        must refuse (see there)."""
        topic, queue_id = row.topic, row.queue_id
        where = self._where(topic, queue_id)
        if not row.init_offset <= to_offset <= row.cold_commit:
            raise CatalogueError(
                f"cannot truncate to {to_offset}: outside [init {row.init_offset}, "
                f"cold commit {row.cold_commit}]",
                where=where,
            )
        straddling = self._fetch_segments(
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
        dropped = self._fetch_segments(conn, topic, queue_id, "AND start_offset >= ?", to_offset)
        deleting = [s for s in dropped if s.status is SegmentStatus.DELETING]
        if deleting:
            raise CatalogueError(
                f"cannot truncate: {deleting[0]} is being deleted; finish expiry first",
                where=where,
            )
        return dropped

    def truncate_queue(self, topic: str, queue_id: int, to_offset: int) -> list[SegmentRow]:
        """Forget the segments at and after ``to_offset`` (repair); return them.

        For ``tieredstore repair`` after the divergent objects are quarantined: drops every
        segment row starting at or after ``to_offset`` and resets ``cold_commit`` to
        ``to_offset`` and ``cold_cl_end`` to the first dropped segment's commitlog base
        (unchanged when none is dropped); ``cold_min`` becomes ``min(cold_min,
        to_offset)``. The queue's state is left to the caller.

        Accepted losses starting at or after ``to_offset`` are forgotten too (repair
        quarantines their records).

        Raises CatalogueError when ``to_offset`` is past ``cold_commit``, before the
        init offset, inside a segment or an accepted loss rather than at a boundary, or
        when a segment to drop is DELETING (finish the expiry first).
        """
        with self._transaction() as conn:
            row = self._require_queue(conn, topic, queue_id)
            dropped = self._truncation(conn, row, to_offset)
            conn.execute(
                "DELETE FROM segments WHERE topic = ? AND queue_id = ? AND start_offset >= ?",
                (topic, queue_id, to_offset),
            )
            conn.execute(
                "DELETE FROM losses WHERE topic = ? AND queue_id = ? AND start_offset >= ?",
                (topic, queue_id, to_offset),
            )
            self._set_queue(
                conn,
                row,
                cold_min=min(row.cold_min, to_offset),
                cold_commit=to_offset,
                cold_cl_end=dropped[0].cl_base if dropped else row.cold_cl_end,
            )
        if dropped:
            log.warning("queue %s/%d truncated to %d: %d segment rows dropped",
                        topic, queue_id, to_offset, len(dropped))  # fmt: skip
        return dropped
