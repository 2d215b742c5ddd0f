"""The catalogue: which queues are tiered and which segments are committed, in SQLite.

One SQLite database (``catalogue.sqlite3``; WAL, ``synchronous=FULL``, foreign keys on) in
the sidecar's state directory, for one (cluster, broker). It is a cache of the bucket's
manifests — the cold store is self-describing, so :func:`metadata.reconcile.reconcile` adopts
manifests the catalogue missed and :func:`rebuild` recreates it from manifests alone.

Rules it enforces:

* **Eager initialisation.** :meth:`~Catalogue.ensure_queue` creates a queue row with its
  init offset, ``cold_min = cold_commit = init``, ``cq_base = init * 20`` and its cold
  commitlog base in one transaction; the schema refuses a row without them.
* **Contiguity.** :meth:`~Catalogue.commit_segment` accepts only the segment that starts
  at ``(cold_commit, cold_cl_end)`` — no gap, no overlap — of an ACTIVE queue; the same
  manifest committed twice is a no-op (a retry after a crash).
* **Prefix expiry.** Only the oldest COMMITTED segment may be marked DELETING, and only
  the oldest segment, once DELETING, may be dropped; ``cold_min`` follows.
* **Accepted losses.** :meth:`~Catalogue.accept_loss` records offsets the broker deleted
  before they were tiered (a :class:`~tieredstore.loss.LossRecord` already written to the
  bucket by ``resume``) and moves ``cold_commit`` past them: the only way a queue's
  committed range may hold offsets no segment covers.
* **One writer.** A writer holds ``catalogue.lock`` (``flock``) for its lifetime; a
  second writer gets :class:`~tieredstore.errors.CatalogueBusyError`. Read-only opens
  (``status``) take no lock and may run beside the writer.

Methods are synchronous (SQLite is local and fast); async code calls them through
``asyncio.to_thread``. One connection serves all threads, serialised by a mutex.
"""

from __future__ import annotations

from metadata.database import DB_NAME, LOCK_NAME, CatalogueState
from metadata.queue_table import QueueTable
from metadata.rows import LeaseRow, QueueRow, QueueState, SegmentRow, SegmentStatus
from metadata.segment_commits import SegmentCommits
from metadata.segment_table import SegmentTable

__all__ = [
    "DB_NAME",
    "LOCK_NAME",
    "Catalogue",
    "CatalogueState",
    "LeaseRow",
    "QueueRow",
    "QueueState",
    "SegmentRow",
    "SegmentStatus",
]


class Catalogue(QueueTable, SegmentTable, SegmentCommits):
    """The catalogue of one (cluster, broker). Open with :meth:`open`; a context manager.

    One class for callers, built from one concern per module: the database and its
    lifecycle (:mod:`metadata.database`), queues and accepted losses
    (:mod:`metadata.queue_table`), segments (:mod:`metadata.segment_table`) and their
    commits (:mod:`metadata.segment_commits`), and here the mirror of the bucket's
    lease. Every method raises :class:`CatalogueError` on a closed catalogue, on a write
    to a read-only one, and on any database failure.
    """

    # -- lease mirror ----------------------------------------------------------------
    def record_lease(self, owner: str, epoch: int, expires_at_ms: int) -> LeaseRow:
        """Mirror the bucket's lease (informational: ``status`` shows it)."""
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO leases (broker, owner, epoch, expires_at_ms, updated_at_ms) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (broker) DO UPDATE SET owner = "
                "excluded.owner, epoch = excluded.epoch, expires_at_ms = "
                "excluded.expires_at_ms, updated_at_ms = excluded.updated_at_ms",
                (self.broker, owner, epoch, expires_at_ms, self._clock.now_ms()),
            )
        lease = self.lease()
        assert lease is not None
        return lease

    def lease(self) -> LeaseRow | None:
        """The mirrored lease, or None if no writer has recorded one."""
        rows = self._rows(
            "SELECT broker, owner, epoch, expires_at_ms, updated_at_ms FROM leases "
            "WHERE broker = ?",
            (self.broker,),
        )
        return LeaseRow(*rows[0]) if rows else None
