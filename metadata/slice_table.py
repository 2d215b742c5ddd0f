"""The catalogue's slices table: batch slices committed and not yet compacted.

A batch object (:mod:`tieredstore.cold.batch`) commits one slice of each of many queues
at once. Each slice is a row here, the link :meth:`Committed.of_slice
<tieredstore.cold.history.Committed.of_slice>` builds from its batch, until compaction
rewrites a run of them as one segment and :meth:`~SliceTable.compact` swaps the rows.

Rules:

* :meth:`~SliceTable.commit_batch` accepts a slice only as a segment is accepted
  (:meth:`~tieredstore.metadata.segment_table.SegmentTable.commit`): of this catalogue's
  cluster/broker, of a known ACTIVE queue, starting exactly at ``(cold_commit,
  cold_cl_end)``; it moves the queue past it. The same link again (same batch key and
  start) is a no-op. One transaction for the whole batch, a savepoint per slice, so a
  refused slice fails alone.
* :meth:`~SliceTable.compact` replaces the slice rows that tile a segment's range
  exactly by that segment's row, in one transaction; the queue's ``cold_commit`` and
  ``cold_cl_end`` do not move (the history is the same, only stored otherwise).
* A slice never expires (expiry waits for compaction); a truncation (``repair``, the heal
  of a lost tail) forgets the slices past its cut with the segments, once they are
  withdrawn in cold (:meth:`tieredstore.metadata.segment_table.SegmentTable.truncate`).

Callers reach it as ``catalogue.slices`` (:class:`tieredstore.metadata.catalogue.Catalogue`).
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Sequence
from typing import Any

from tieredstore.cold.compressed.framed import Framed
from tieredstore.cold.history import Committed, EntryKind, Span
from tieredstore.cold.layout import QueuePath
from tieredstore.cold.manifest import Manifest
from tieredstore.errors import CatalogueError
from tieredstore.metadata.database import SLICE_COLUMNS, CatalogueDatabase, each_in_savepoint
from tieredstore.metadata.rows import QueueRow, SegmentRow
from tieredstore.metadata.segment_table import check_continues, insert_segment

__all__ = ["SliceTable"]


class SliceTable:
    """Committed batch slices (see the module docstring), over the catalogue's database."""

    def __init__(self, db: CatalogueDatabase) -> None:
        self._db = db

    # -- lookups ---------------------------------------------------------------------
    def of(self, topic: str, queue_id: int) -> list[Committed]:
        """The queue's slices as links (kind SLICE), ordered by start offset."""
        with self._db.guard() as conn:
            return self._fetch(conn, topic, queue_id)

    def in_batch(self, batch_key: str) -> list[Committed]:
        """Every slice row of the batch object at ``batch_key``, by queue and start: the
        queues a damaged batch held (empty when none is committed, or compacted)."""
        with self._db.guard() as conn:
            rows = conn.execute(
                f"SELECT {SLICE_COLUMNS} FROM slices WHERE batch_key = ? "
                "ORDER BY topic, queue_id, start_offset",
                (batch_key,),
            ).fetchall()
        return [_link(self._db.cluster, self._db.broker, r) for r in rows]

    def referenced_batches(self) -> set[str]:
        """Every batch key some slice row names: the batches that must not be deleted."""
        return {key for (key,) in self._db.rows("SELECT DISTINCT batch_key FROM slices")}

    def due(
        self, now_ms: int, compact_after_ms: int, segment_max_bytes: int
    ) -> list[tuple[str, int]]:
        """The queues ``(topic, queue_id)`` whose slices should be compacted, by name:
        the oldest slice was created at or before ``now_ms - compact_after_ms``, or their
        commit-log bytes add up to ``segment_max_bytes`` or more. Any queue state."""
        rows = self._db.rows(
            "SELECT topic, queue_id FROM slices GROUP BY topic, queue_id "
            "HAVING min(created_at_ms) <= ? OR sum(cl_size) >= ? ORDER BY topic, queue_id",
            (now_ms - compact_after_ms, segment_max_bytes),
        )
        return [(topic, queue_id) for topic, queue_id in rows]

    def _fetch(
        self, conn: sqlite3.Connection, topic: str, queue_id: int, where: str = "", *params: Any
    ) -> list[Committed]:
        """The queue's slice rows (``where`` narrows them) as links, by start offset."""
        sql = (
            f"SELECT {SLICE_COLUMNS} FROM slices WHERE topic = ? AND queue_id = ? {where} "
            "ORDER BY start_offset"
        )
        rows = conn.execute(sql, (topic, queue_id, *params)).fetchall()
        return [_link(self._db.cluster, self._db.broker, r) for r in rows]

    # -- commits ---------------------------------------------------------------------
    def commit_batch(
        self, links: Sequence[Committed]
    ) -> list[tuple[Committed, QueueRow] | CatalogueError]:
        """Record the slices of a batch whose object is created, in **one** transaction;
        per link, in order, its row (as a link) and its queue's row after it, or the
        CatalogueError that refused it (a refused one changes nothing; the others are
        committed all the same).

        Each link must be a batch slice (kind SLICE) of this catalogue's cluster/broker,
        of a known ACTIVE queue, and continue it exactly (``start == cold_commit``,
        ``cl_base == cold_cl_end``: no gap, no overlap); it moves ``cold_commit`` to its
        end and ``cold_cl_end`` to its ``cl_end``. The very same link again (same batch
        key and start) returns its row and the queue's (a retry after a crash).

        Raises:
            CatalogueError: the database failed (then none of them is committed).
        """
        return each_in_savepoint(self._db, links, self._commit_one)

    def _commit_one(self, conn: sqlite3.Connection, link: Committed) -> tuple[Committed, QueueRow]:
        """The checks and writes of one link of :meth:`commit_batch`, in its savepoint."""
        where = self._db.queue_where(link.topic, link.queue_id)
        what = f"slice [{link.start_offset}, {link.end_offset})"
        problem = _link_problem(link)
        if problem:
            raise CatalogueError(f"{what}: {problem}", where=where)
        self._db.require_ours("batch slice", link.queue.cluster, link.queue.broker, where)
        row = self._db.require_queue(conn, link.topic, link.queue_id)
        same = self._fetch(
            conn, link.topic, link.queue_id, "AND start_offset = ?", link.start_offset
        )
        if same and same[0].key == link.key:
            return same[0], row
        if same:
            raise CatalogueError(
                f"a different {same[0].describe()} is already committed at offset "
                f"{link.start_offset}",
                where=where,
            )
        check_continues(row, what, link.start_offset, link.cl_base, where)
        conn.execute(
            f"INSERT INTO slices ({SLICE_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            _slice_values(link),
        )
        queue = self._db.set_queue(conn, row, cold_commit=link.end_offset, cold_cl_end=link.cl_end)
        stored = self._fetch(
            conn, link.topic, link.queue_id, "AND start_offset = ?", link.start_offset
        )
        return stored[0], queue

    # -- compaction ------------------------------------------------------------------
    def compact(self, manifest: Manifest) -> SegmentRow:
        """Swap the slice rows inside ``[manifest.start_offset, manifest.end_offset)``
        for ``manifest``'s segment (written to the bucket by compaction), in one
        transaction; return the segment's row.

        The slices must tile the manifest's range exactly: the first starts at its start,
        the last ends at its end, each starts where the previous ends (offsets and cold
        commitlog), and the commitlog range is the manifest's ``[cl_base, cl_end)``. The
        queue's ``cold_commit`` and ``cold_cl_end`` do not change; neither does its state
        matter (repair of a DIVERGED queue compacts first). The same manifest again,
        after the swap, returns its row.

        Raises:
            CatalogueError: another cluster/broker's manifest; an unknown queue; a
                different segment at its start; slices that do not tile its range
                (naming the offsets); or the database failed.
        """
        where = self._db.queue_where(manifest.topic, manifest.queue_id)
        self._db.require_ours("manifest", manifest.cluster, manifest.broker, where)
        start, end = manifest.start_offset, manifest.end_offset
        with self._db.transaction() as conn:
            self._db.require_queue(conn, manifest.topic, manifest.queue_id)
            done = self._db.fetch_segments(
                conn, manifest.topic, manifest.queue_id, "AND start_offset = ?", start
            )
            if done and done[0].manifest == manifest:
                return done[0]
            if done:
                raise CatalogueError(
                    f"cannot compact [{start}, {end}): segment {done[0]} is already there",
                    where=where,
                )
            slices = self._fetch(
                conn, manifest.topic, manifest.queue_id,
                "AND end_offset > ? AND start_offset < ?", start, end,
            )  # fmt: skip
            problem = _tiling_problem(slices, manifest)
            if problem:
                raise CatalogueError(f"cannot compact [{start}, {end}): {problem}", where=where)
            conn.execute(
                "DELETE FROM slices WHERE topic = ? AND queue_id = ? AND start_offset >= ? "
                "AND start_offset < ?",
                (manifest.topic, manifest.queue_id, start, end),
            )
            insert_segment(conn, manifest)
            return self._db.fetch_segments(
                conn, manifest.topic, manifest.queue_id, "AND start_offset = ?", start
            )[0]


def _link_problem(link: Committed) -> str:
    """Why ``link`` cannot be a slice row (not a slice; spans not in its batch object,
    or not its sizes), or ``""``."""
    if link.kind is not EntryKind.SLICE:
        return f"a {link.kind.value} link, not a batch slice"
    cl, cq = link.commit_log, link.consume_queue
    if {cl.key, cq.key} != {link.key} or (cl.object_size, cl.framed) != (
        cq.object_size,
        cq.framed,
    ):
        return f"its spans are not both in its batch object {link.key}"
    if cl.size != link.cl_end - link.cl_base or cq.size != 20 * link.message_count:
        return f"span sizes {cl.size}, {cq.size} do not match its offsets and cold commitlog"
    return ""


def _tiling_problem(slices: Sequence[Committed], m: Manifest) -> str:
    """Why ``slices`` (by start) do not tile ``m``'s offsets and commitlog, or ``""``."""
    if not slices:
        return "no batch slice holds these offsets"
    first, last = slices[0], slices[-1]
    if first.start_offset != m.start_offset or first.cl_base != m.cl_base:
        return (
            f"the first slice starts at offset {first.start_offset}, cold commitlog "
            f"{first.cl_base}, not {m.start_offset}, {m.cl_base}"
        )
    for prev, nxt in itertools.pairwise(slices):
        if (nxt.start_offset, nxt.cl_base) != (prev.end_offset, prev.cl_end):
            return (
                f"slice [{nxt.start_offset}, {nxt.end_offset}) does not continue "
                f"[{prev.start_offset}, {prev.end_offset}) (cold commitlog {nxt.cl_base} "
                f"after {prev.cl_end})"
            )
    if last.end_offset != m.end_offset or last.cl_end != m.cl_end:
        return (
            f"the last slice ends at offset {last.end_offset}, cold commitlog {last.cl_end}, "
            f"not {m.end_offset}, {m.cl_end}"
        )
    return ""


def _link(cluster: str, broker: str, r: Sequence[Any]) -> Committed:
    """A slice row as the link :meth:`Committed.of_slice
    <tieredstore.cold.history.Committed.of_slice>` built from its batch."""
    (topic, qid, start, end, cl_base, cl_end, key, sequence, cl_at, cl_size, cl_digest,
     cq_at, cq_size, cq_digest, object_size, algorithm, ts_min, ts_max, writer, epoch,
     created, stored_size, frames_at) = r  # fmt: skip
    framed = None if stored_size is None else Framed(stored_size, at=frames_at)
    return Committed(
        kind=EntryKind.SLICE,
        queue=QueuePath(cluster, broker, topic, qid),
        start_offset=start,
        end_offset=end,
        cl_base=cl_base,
        cl_end=cl_end,
        commit_log=Span(key, cl_at, cl_size, cl_digest, object_size, framed),
        consume_queue=Span(key, cq_at, cq_size, cq_digest, object_size, framed),
        digest_algorithm=algorithm,
        min_store_timestamp=ts_min,
        max_store_timestamp=ts_max,
        writer_id=writer,
        lease_epoch=epoch,
        created_at_ms=created,
        key=key,
        sequence=sequence,
    )


def _slice_values(c: Committed) -> tuple[Any, ...]:
    cl, cq = c.commit_log, c.consume_queue
    return (
        c.topic, c.queue_id, c.start_offset, c.end_offset, c.cl_base, c.cl_end, c.key,
        c.sequence, cl.at, cl.size, cl.digest, cq.at, cq.size, cq.digest, cl.object_size,
        c.digest_algorithm, c.min_store_timestamp, c.max_store_timestamp, c.writer_id,
        c.lease_epoch, c.created_at_ms,
        None if cl.framed is None else cl.framed.stored_size,
        None if cl.framed is None else cl.framed.at,
    )  # fmt: skip
