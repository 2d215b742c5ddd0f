"""The catalogue: which queues are tiered and which segments are committed, in SQLite.

One SQLite database (``catalogue.sqlite3``; WAL, ``synchronous=FULL``, foreign keys on) in
the sidecar's state directory, for one (cluster, broker). It is a cache of the bucket's
manifests — the cold store is self-describing, so :func:`tieredstore.metadata.reconcile.reconcile`
adopts manifests the catalogue missed and :func:`rebuild` recreates it from manifests alone.

Rules it enforces:

* **Eager initialisation.** ``catalogue.queues.ensure`` creates a queue row with its
  init offset, ``cold_min = cold_commit = init``, ``cq_base = init * 20`` and its cold
  commitlog base in one transaction; the schema refuses a row without them.
* **Contiguity.** ``catalogue.segments.commit`` accepts only the segment that starts
  at ``(cold_commit, cold_cl_end)`` — no gap, no overlap — of an ACTIVE queue; the same
  manifest committed twice is a no-op (a retry after a crash).
* **Batch slices.** ``catalogue.slices.commit_batch`` accepts a batch's slices by the
  same contiguity rule, each advancing its queue; ``catalogue.slices.compact`` swaps a run
  of slices for the segment compaction wrote, which must tile them exactly.
* **Prefix expiry.** Only the oldest COMMITTED segment may be marked DELETING, and only
  the oldest segment, once DELETING, may be dropped; ``cold_min`` follows. Batch slices
  never expire: a segment after one waits for its compaction.
* **Accepted losses.** ``catalogue.queues.accept_loss`` records offsets the broker deleted
  before they were tiered (a :class:`~tieredstore.cold.loss.LossRecord` already written to the
  bucket by ``resume``) and moves ``cold_commit`` past them: the only way a queue's
  committed range may hold offsets no segment covers.
* **One writer.** A writer holds ``catalogue.lock`` (``flock``) for its lifetime; a
  second writer gets :class:`~tieredstore.errors.CatalogueBusyError`. Read-only opens
  (``status``) take no lock and may run beside the writer.

Methods are synchronous (SQLite is local and fast); async code calls them through
``asyncio.to_thread``. One connection serves all threads, serialised by a mutex.
"""

from __future__ import annotations

from pathlib import Path
from typing import Self, Unpack

from tieredstore.metadata.database import (
    DB_NAME,
    LOCK_NAME,
    CatalogueDatabase,
    CatalogueState,
    OpenOptions,
)
from tieredstore.metadata.queue_table import QueueTable
from tieredstore.metadata.rows import LeaseRow, QueueRow, QueueState, SegmentRow, SegmentStatus
from tieredstore.metadata.segment_table import SegmentTable
from tieredstore.metadata.slice_table import SliceTable
from tieredstore.settings.loader import Settings

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


class Catalogue:
    """The catalogue of one (cluster, broker). Open with :meth:`open`; a context manager.

    Composed of one object per concern over one database (:mod:`tieredstore.metadata.database`,
    ``catalogue.db``): ``catalogue.queues`` (queues and accepted losses,
    :mod:`tieredstore.metadata.queue_table`), ``catalogue.segments`` (segment lookups, commits,
    expiry and truncation, :mod:`tieredstore.metadata.segment_table`), ``catalogue.slices`` (batch
    slices: commits, compaction's swap, :mod:`tieredstore.metadata.slice_table`), and here the
    mirror of the bucket's lease. Every method raises :class:`CatalogueError` on a closed catalogue,
    on a write to a read-only one, and on any database failure.
    """

    def __init__(self, db: CatalogueDatabase) -> None:
        self.db = db
        self.queues = QueueTable(db)
        self.segments = SegmentTable(db)
        self.slices = SliceTable(db)

    @classmethod
    def open(cls, state_dir: Path | str, **options: Unpack[OpenOptions]) -> Self:
        """Open the catalogue in ``state_dir``: :meth:`CatalogueDatabase.open
        <tieredstore.metadata.database.CatalogueDatabase.open>` says how, with which options, and
        what it raises."""
        return cls(CatalogueDatabase.open(state_dir, **options))

    @classmethod
    def read_only_for(cls, settings: Settings) -> Self:
        """Open, read-only, the catalogue ``settings`` name (state directory, cluster,
        broker, checked against their cold store): what a command beside a running
        sidecar reads."""
        return cls.open(
            settings.state.dir,
            cluster=settings.cold.cluster,
            broker=settings.cold.broker,
            read_only=True,
            cold_url=settings.cold.url,
        )

    @property
    def path(self) -> Path:
        return self.db.path

    @property
    def cluster(self) -> str:
        return self.db.cluster

    @property
    def broker(self) -> str:
        return self.db.broker

    @property
    def read_only(self) -> bool:
        return self.db.read_only

    @property
    def state(self) -> CatalogueState:
        return self.db.state

    def close(self) -> None:
        """Close the database and release the writer lock. Safe to call twice."""
        self.db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- lease mirror ----------------------------------------------------------------
    def record_lease(self, owner: str, epoch: int, expires_at_ms: int) -> LeaseRow:
        """Mirror the bucket's lease (informational: ``status`` shows it)."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO leases (broker, owner, epoch, expires_at_ms, updated_at_ms) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (broker) DO UPDATE SET owner = "
                "excluded.owner, epoch = excluded.epoch, expires_at_ms = "
                "excluded.expires_at_ms, updated_at_ms = excluded.updated_at_ms",
                (self.broker, owner, epoch, expires_at_ms, self.db.clock.now_ms()),
            )
        lease = self.lease()
        assert lease is not None
        return lease

    def lease(self) -> LeaseRow | None:
        """The mirrored lease, or None if no writer has recorded one."""
        rows = self.db.rows(
            "SELECT broker, owner, epoch, expires_at_ms, updated_at_ms FROM leases "
            "WHERE broker = ?",
            (self.broker,),
        )
        return LeaseRow(*rows[0]) if rows else None
