"""The catalogue's queues table and the losses accepted on them.

A queue row is created eagerly (:meth:`QueueTable.ensure`) with its init offset and cold
commitlog base in one transaction; its state changes only through
:meth:`~QueueTable.set_state` (along the state table,
:data:`tieredstore.metadata.rows.TRANSITIONS`) and :meth:`~QueueTable.accept_loss`, which records an
accepted loss (a :class:`~tieredstore.cold.loss.LossRecord` already in the bucket) and moves
``cold_commit`` past it. Callers reach it as ``catalogue.queues``
(:class:`tieredstore.metadata.catalogue.Catalogue`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from tieredstore.cold.layout import QueuePath
from tieredstore.cold.loss import LossRecord
from tieredstore.errors import CatalogueError
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.metadata.database import LOSS_COLUMNS, QUEUE_COLUMNS, CatalogueDatabase
from tieredstore.metadata.rows import QueueRow, QueueState, is_valid_transition

__all__ = ["QueueTable"]

log = logging.getLogger(__name__)


class QueueTable:
    """Queues and accepted losses (see the module docstring), over the catalogue's
    database."""

    def __init__(self, db: CatalogueDatabase) -> None:
        self._db = db

    # -- queues ----------------------------------------------------------------------
    def ensure(self, topic: str, queue_id: int, init_offset: int, *, cl_base: int = 0) -> QueueRow:
        """Return the queue's row, creating it (eagerly initialised) if it is new.

        A new row gets, in one transaction: ``init_offset``, ``cold_min = cold_commit =
        init_offset``, ``cq_base = init_offset * 20``, ``cold_cl_end = cl_base`` (0 for a
        queue tiered from scratch; a rebuild from manifests passes the first manifest's
        commitlog base) and state ACTIVE. An existing row is returned unchanged, whatever
        ``init_offset`` says: the first initialisation wins.

        Raises InvalidNameError for a topic the cold store cannot hold and CatalogueError
        for a negative offset.
        """
        return self.ensure_many([(topic, queue_id, init_offset)], cl_base=cl_base)[0]

    def ensure_many(
        self, queues: Sequence[tuple[str, int, int]], *, cl_base: int = 0
    ) -> list[QueueRow]:
        """:meth:`ensure` for many ``(topic, queue_id, init_offset)`` at once, in
        one transaction (a broker's first start may bring thousands of queues: one
        commit, not one each); rows in the order given.

        Every name and offset is checked before anything is written: one bad entry
        raises (as :meth:`ensure` does) and creates no row at all.
        """
        for topic, queue_id, init_offset in queues:
            QueuePath(self._db.cluster, self._db.broker, topic, queue_id)  # validates the names
            if init_offset < 0 or cl_base < 0:
                raise CatalogueError(
                    f"init offset {init_offset} / commitlog base {cl_base} must be >= 0",
                    where=self._db.queue_where(topic, queue_id),
                )
        rows: list[QueueRow] = []
        created: list[QueueRow] = []
        with self._db.transaction() as conn:
            for topic, queue_id, init_offset in queues:
                existing = self._db.fetch_queue(conn, topic, queue_id)
                if existing is not None:
                    rows.append(existing)
                    continue
                conn.execute(
                    f"INSERT INTO queues ({QUEUE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (topic, queue_id, init_offset, init_offset, init_offset, cl_base,
                     init_offset * CQ_UNIT_SIZE, QueueState.ACTIVE.value, self._db.clock.now_ms()),
                )  # fmt: skip
                row = self._db.require_queue(conn, topic, queue_id)
                rows.append(row)
                created.append(row)
        for row in created:
            # DEBUG: discovery logs the same event at INFO, with the policy that chose it.
            log.debug("queue %s initialised at offset %d", row, row.init_offset)
        return rows

    def get(self, topic: str, queue_id: int) -> QueueRow | None:
        """Return the queue's row, or None if the catalogue has never seen it."""
        with self._db.guard() as conn:
            return self._db.fetch_queue(conn, topic, queue_id)

    def all(self) -> list[QueueRow]:
        """Every queue, ordered by (topic, queue id)."""
        rows = self._db.rows(f"SELECT {QUEUE_COLUMNS} FROM queues ORDER BY topic, queue_id")
        return [self._db.queue_row(r) for r in rows]

    def set_state(self, topic: str, queue_id: int, state: QueueState) -> QueueRow:
        """Move a queue to ``state``; return the updated row.

        Only the moves of :data:`~tieredstore.metadata.rows.TRANSITIONS` are made: any other
        (DELETED to ACTIVE, or to a state the catalogue does not store, STOPPED or DEGRADED) raises
        CatalogueError naming the queue and both states, and the row is left unchanged.
        A state set to itself is a no-op: the row comes back as it was, ``updated_at_ms``
        included. Unknown queue: CatalogueError.

        DELETED (the topic's cold data destroyed) also forgets the queue's batch slices,
        in the same transaction, ``cold_min`` moving to its first segment left, else to
        ``cold_commit``: their bytes in the batch objects are garbage from then on (a
        batch is collected once no slice row names it,
        :meth:`~tieredstore.metadata.slice_table.SliceTable.referenced_batches`).
        """
        with self._db.transaction() as conn:
            row = self._db.require_queue(conn, topic, queue_id)
            if not is_valid_transition(row.state, state):
                raise CatalogueError(
                    f"cannot move the queue from {row.state.value} to {state.value}: "
                    "not a transition of the queue state table",
                    where=self._db.queue_where(topic, queue_id),
                )
            if state is row.state:
                return row
            if state is not QueueState.DELETED:
                return self._db.set_queue(conn, row, state=state)
            conn.execute("DELETE FROM slices WHERE topic = ? AND queue_id = ?", (topic, queue_id))
            segments = self._db.fetch_segments(conn, topic, queue_id)
            cold_min = segments[0].start_offset if segments else row.cold_commit
            return self._db.set_queue(conn, row, state=state, cold_min=cold_min)

    # -- losses ----------------------------------------------------------------------
    def _loss_row(self, r: Sequence[Any]) -> LossRecord:
        topic, qid, start, end, accepted, writer, epoch, _key = r
        queue = QueuePath(self._db.cluster, self._db.broker, topic, qid)
        return LossRecord.new(
            queue, start, end, accepted_at_ms=accepted, writer_id=writer, lease_epoch=epoch
        )

    def losses(self, topic: str | None = None, queue_id: int | None = None) -> list[LossRecord]:
        """Accepted losses, of one queue or (``topic`` None) of all, by queue and start."""
        where = ""
        params: tuple[object, ...] = ()
        if topic is not None:
            where, params = "WHERE topic = ? AND queue_id = ?", (topic, queue_id)
        rows = self._db.rows(
            f"SELECT {LOSS_COLUMNS} FROM losses {where} ORDER BY topic, queue_id, start_offset",
            params,
        )
        return [self._loss_row(r) for r in rows]

    def accept_loss(self, record: LossRecord) -> QueueRow:
        """Record an accepted loss and move the queue past it; return the queue's row.

        In one transaction: insert the loss, set ``cold_commit = end`` (and ``cold_min``
        too when the queue holds no segment), and set the queue ACTIVE. The same record
        again returns the row unchanged (``resume`` repeated after a crash).

        Raises:
            CatalogueError: a record of another cluster/broker; an unknown queue; a queue
                DIVERGED or DELETED; a loss that does not start at ``cold_commit``; a
                different loss already recorded at the same start.
        """
        where = self._db.queue_where(record.topic, record.queue_id)
        self._db.require_ours("loss record", record.cluster, record.broker, where)
        with self._db.transaction() as conn:
            row = self._db.require_queue(conn, record.topic, record.queue_id)
            same = conn.execute(
                f"SELECT {LOSS_COLUMNS} FROM losses WHERE topic = ? AND queue_id = ? "
                "AND start_offset = ?",
                (record.topic, record.queue_id, record.start_offset),
            ).fetchone()
            if same is not None and self._loss_row(same) == record:
                return row
            if same is not None:
                raise CatalogueError(
                    f"a different loss {self._loss_row(same).describe()} is already "
                    f"recorded at offset {record.start_offset}",
                    where=where,
                )
            # PAUSED -> ACTIVE or ACTIVE -> ACTIVE: both in the state table
            if row.state not in (QueueState.ACTIVE, QueueState.PAUSED):
                raise CatalogueError(
                    f"queue is {row.state.value}; a loss cannot be accepted", where=where
                )
            if record.start_offset != row.cold_commit:
                raise CatalogueError(
                    f"loss [{record.start_offset}, {record.end_offset}) does not start at the "
                    f"cold commit offset {row.cold_commit}",
                    where=where,
                )
            conn.execute(
                f"INSERT INTO losses ({LOSS_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (record.topic, record.queue_id, record.start_offset, record.end_offset,
                 record.accepted_at_ms, record.writer_id, record.lease_epoch, record.key),
            )  # fmt: skip
            empty = row.cold_min == row.cold_commit
            return self._db.set_queue(
                conn,
                row,
                cold_min=record.end_offset if empty else row.cold_min,
                cold_commit=record.end_offset,
                state=QueueState.ACTIVE,
            )
