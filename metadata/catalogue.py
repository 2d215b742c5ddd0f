"""The catalogue: which queues are tiered and which segments are committed, in SQLite.

One SQLite database (``catalogue.sqlite3``; WAL, ``synchronous=FULL``, foreign keys on) in
the sidecar's state directory, for one (cluster, broker). It is a cache of the bucket's
manifests — the cold store is self-describing, so :meth:`Catalogue.reconcile` adopts
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
* **One writer.** A writer holds ``catalogue.lock`` (``flock``) for its lifetime; a
  second writer gets :class:`~tieredstore.errors.CatalogueBusyError`. Read-only opens
  (``status``) take no lock and may run beside the writer.

Methods are synchronous (SQLite is local and fast); async code calls them through
``asyncio.to_thread``. One connection serves all threads, serialised by a mutex.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self

from metadata.lock import WriterLock
from metadata.rows import LeaseRow, QueueRow, QueueState, SegmentRow, SegmentStatus
from metadata.schema import MIGRATIONS, Migration, migrate, schema_version
from tieredstore.clock import Clock, SystemClock
from tieredstore.errors import CatalogueError, OffsetOutOfRangeError
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.layout import QueuePath, broker_prefix, object_name
from tieredstore.manifest import Manifest, ObjectRef

if TYPE_CHECKING:
    from metadata.reconcile import ReconcileReport
    from tieredstore.backends.base import Backend

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
    "rebuild",
]

log = logging.getLogger(__name__)

DB_NAME: Final = "catalogue.sqlite3"
LOCK_NAME: Final = "catalogue.lock"
_SIDE_FILES: Final = ("-wal", "-shm", "-journal")

_QUEUE_COLUMNS: Final = (
    "topic, queue_id, init_offset, cold_min, cold_commit, cold_cl_end, cq_base, state, "
    "updated_at_ms"
)
_SEGMENT_COLUMNS: Final = (
    "topic, queue_id, start_offset, end_offset, cl_base, cl_end, cl_size, cl_digest, "
    "cq_size, cq_digest, digest_algorithm, min_store_timestamp, max_store_timestamp, "
    "status, format_version, writer_id, lease_epoch, created_at_ms, manifest_key"
)


class CatalogueState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


class Catalogue:
    """The catalogue of one (cluster, broker). Open with :meth:`open`; a context manager.

    Every method raises :class:`CatalogueError` on a closed catalogue, on a write to a
    read-only one, and (translated, ``from`` the sqlite3 error) on any database failure.
    """

    def __init__(
        self,
        *,
        path: Path,
        conn: sqlite3.Connection,
        cluster: str,
        broker: str,
        clock: Clock,
        lock: WriterLock | None,
    ) -> None:
        self.path = path
        self.cluster = cluster
        self.broker = broker
        self.read_only = lock is None
        self.state = CatalogueState.OPEN
        self._conn = conn
        self._clock = clock
        self._lock = lock
        self._mutex = threading.RLock()

    # -- lifecycle -------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        state_dir: Path | str,
        *,
        cluster: str,
        broker: str,
        read_only: bool = False,
        clock: Clock | None = None,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> Catalogue:
        """Open (creating if needed) the catalogue in ``state_dir`` for writing, or
        an existing one ``read_only``.

        A writer creates the directory and database, takes ``catalogue.lock``, migrates
        the schema, and records or checks the (cluster, broker) the catalogue belongs
        to. ``migrations`` exists for tests of the migration mechanism.

        Raises:
            InvalidNameError: ``cluster`` or ``broker`` cannot be a cold-store name.
            CatalogueBusyError: another writer holds the catalogue.
            CatalogueError: it belongs to another cluster/broker, its schema is newer
                than this code (or, read-only, older), it does not exist (read-only), or
                SQLite fails.
        """
        broker_prefix(cluster, broker)  # refuse names the cold store cannot hold
        clock = clock or SystemClock()
        state = Path(state_dir)
        path = state / DB_NAME
        if read_only:
            conn = _connect_read_only(path)
            lock = None
        else:
            try:
                state.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CatalogueError(
                    f"cannot create state directory: {exc}", where=str(state)
                ) from exc
            lock = WriterLock.acquire(state / LOCK_NAME, what=f"catalogue {path}")
            try:
                conn = _connect_writer(path, clock=clock, migrations=migrations)
            except BaseException:
                lock.release()
                raise
        catalogue = cls(
            path=path, conn=conn, cluster=cluster, broker=broker, clock=clock, lock=lock
        )
        try:
            catalogue._check_identity(read_only=read_only, migrations=migrations)
        except BaseException:
            catalogue.close()
            raise
        return catalogue

    def close(self) -> None:
        """Close the database and release the writer lock. Safe to call twice."""
        with self._mutex:
            if self.state is CatalogueState.CLOSED:
                return
            self.state = CatalogueState.CLOSED
            try:
                self._conn.close()
            finally:
                if self._lock is not None:
                    self._lock.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _check_identity(self, *, read_only: bool, migrations: Sequence[Migration]) -> None:
        version = self._scalar_version()
        if read_only and version != len(migrations):
            newer = version > len(migrations)
            raise CatalogueError(
                f"catalogue schema v{version} is "
                + ("newer than this tieredstore's" if newer else "older than the current")
                + f" v{len(migrations)}"
                + ("; upgrade tieredstore" if newer else "; open it for writing once to migrate"),
                where=str(self.path),
            )
        with self._transaction(write=not read_only) as conn:
            row = conn.execute("SELECT cluster, broker FROM identity").fetchone()
            if row is None and not read_only:
                conn.execute(
                    "INSERT INTO identity (singleton, cluster, broker, created_at_ms) "
                    "VALUES (1, ?, ?, ?)",
                    (self.cluster, self.broker, self._clock.now_ms()),
                )
                return
        if row is None or tuple(row) != (self.cluster, self.broker):
            owner = "no cluster/broker" if row is None else f"cluster {row[0]!r} broker {row[1]!r}"
            raise CatalogueError(
                f"catalogue belongs to {owner}, not cluster {self.cluster!r} broker "
                f"{self.broker!r}",
                where=str(self.path),
            )

    def _scalar_version(self) -> int:
        with self._guard():
            return schema_version(self._conn)

    # -- plumbing --------------------------------------------------------------------
    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Serialise access, refuse a closed catalogue, translate sqlite3 errors."""
        with self._mutex:
            if self.state is CatalogueState.CLOSED:
                raise CatalogueError("catalogue is closed", where=str(self.path))
            try:
                yield
            except sqlite3.Error as exc:
                raise CatalogueError(
                    f"catalogue database error: {exc}", where=str(self.path)
                ) from exc

    @contextlib.contextmanager
    def _transaction(self, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction: IMMEDIATE (takes SQLite's write lock) for writes."""
        if write and self.read_only:
            raise CatalogueError("catalogue is open read-only", where=str(self.path))
        with self._guard():
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._guard():
            return [tuple(r) for r in self._conn.execute(sql, params).fetchall()]

    def _where(self, topic: str, queue_id: int) -> str:
        return f"{self.path} queue {topic}/{queue_id}"

    def _segment_row(self, r: Sequence[Any]) -> SegmentRow:
        (topic, qid, start, end, cl_base, cl_end, cl_size, cl_digest, cq_size, cq_digest,
         algorithm, ts_min, ts_max, status, version, writer, epoch, created, _key) = r  # fmt: skip
        manifest = Manifest(
            format_version=version,
            cluster=self.cluster,
            broker=self.broker,
            topic=topic,
            queue_id=qid,
            start_offset=start,
            end_offset=end,
            cl_base=cl_base,
            cl_end=cl_end,
            commit_log=ObjectRef(object_name(cl_base), cl_size, cl_digest),
            consume_queue=ObjectRef(object_name(start * CQ_UNIT_SIZE), cq_size, cq_digest),
            digest_algorithm=algorithm,
            min_store_timestamp=ts_min,
            max_store_timestamp=ts_max,
            message_count=end - start,
            writer_id=writer,
            lease_epoch=epoch,
            created_at_ms=created,
        )
        return SegmentRow(manifest, SegmentStatus(status))

    @staticmethod
    def _queue_row(r: Sequence[Any]) -> QueueRow:
        topic, qid, init, cold_min, cold_commit, cl_end, cq_base, state, updated = r
        return QueueRow(
            topic, qid, init, cold_min, cold_commit, cl_end, cq_base, QueueState(state), updated
        )

    @classmethod
    def _fetch_queue(cls, conn: sqlite3.Connection, topic: str, queue_id: int) -> QueueRow | None:
        r = conn.execute(
            f"SELECT {_QUEUE_COLUMNS} FROM queues WHERE topic = ? AND queue_id = ?",
            (topic, queue_id),
        ).fetchone()
        return None if r is None else cls._queue_row(r)

    def _require_queue(self, conn: sqlite3.Connection, topic: str, queue_id: int) -> QueueRow:
        row = self._fetch_queue(conn, topic, queue_id)
        if row is None:
            raise CatalogueError("unknown queue", where=self._where(topic, queue_id))
        return row

    def _fetch_segments(
        self, conn: sqlite3.Connection, topic: str, queue_id: int, where: str = "", *params: Any
    ) -> list[SegmentRow]:
        sql = (
            f"SELECT {_SEGMENT_COLUMNS} FROM segments WHERE topic = ? AND queue_id = ? {where} "
            "ORDER BY start_offset"
        )
        rows = conn.execute(sql, (topic, queue_id, *params)).fetchall()
        return [self._segment_row(r) for r in rows]

    def _set_queue(self, conn: sqlite3.Connection, row: QueueRow, **changes: Any) -> QueueRow:
        assigned = ", ".join(f"{name} = ?" for name in changes)
        values = [v.value if isinstance(v, enum.Enum) else v for v in changes.values()]
        conn.execute(
            f"UPDATE queues SET {assigned}, updated_at_ms = ? WHERE topic = ? AND queue_id = ?",
            (*values, self._clock.now_ms(), row.topic, row.queue_id),
        )
        return self._require_queue(conn, row.topic, row.queue_id)

    # -- queues ----------------------------------------------------------------------
    def ensure_queue(
        self, topic: str, queue_id: int, init_offset: int, *, cl_base: int = 0
    ) -> QueueRow:
        """Return the queue's row, creating it (eagerly initialised) if it is new.

        A new row gets, in one transaction: ``init_offset``, ``cold_min = cold_commit =
        init_offset``, ``cq_base = init_offset * 20``, ``cold_cl_end = cl_base`` (0 for a
        queue tiered from scratch; a rebuild from manifests passes the first manifest's
        commitlog base) and state ACTIVE. An existing row is returned unchanged, whatever
        ``init_offset`` says: the first initialisation wins.

        Raises InvalidNameError for a topic the cold store cannot hold and CatalogueError
        for a negative offset.
        """
        QueuePath(self.cluster, self.broker, topic, queue_id)  # validates the names
        if init_offset < 0 or cl_base < 0:
            raise CatalogueError(
                f"init offset {init_offset} / commitlog base {cl_base} must be >= 0",
                where=self._where(topic, queue_id),
            )
        with self._transaction() as conn:
            existing = self._fetch_queue(conn, topic, queue_id)
            if existing is not None:
                return existing
            conn.execute(
                f"INSERT INTO queues ({_QUEUE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (topic, queue_id, init_offset, init_offset, init_offset, cl_base,
                 init_offset * CQ_UNIT_SIZE, QueueState.ACTIVE.value, self._clock.now_ms()),
            )  # fmt: skip
            row = self._require_queue(conn, topic, queue_id)
        log.info("queue %s initialised at offset %d", row, init_offset)
        return row

    def queue(self, topic: str, queue_id: int) -> QueueRow | None:
        """Return the queue's row, or None if the catalogue has never seen it."""
        with self._guard():
            return self._fetch_queue(self._conn, topic, queue_id)

    def queues(self) -> list[QueueRow]:
        """Every queue, ordered by (topic, queue id)."""
        rows = self._rows(f"SELECT {_QUEUE_COLUMNS} FROM queues ORDER BY topic, queue_id")
        return [self._queue_row(r) for r in rows]

    def set_state(self, topic: str, queue_id: int, state: QueueState) -> QueueRow:
        """Set a queue's state; return the updated row. Unknown queue: CatalogueError."""
        with self._transaction() as conn:
            row = self._require_queue(conn, topic, queue_id)
            return self._set_queue(conn, row, state=state)

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
        where = self._where(manifest.topic, manifest.queue_id)
        if (manifest.cluster, manifest.broker) != (self.cluster, self.broker):
            raise CatalogueError(
                f"manifest of cluster {manifest.cluster!r} broker {manifest.broker!r} "
                "does not belong in this catalogue",
                where=where,
            )
        with self._transaction() as conn:
            row = self._require_queue(conn, manifest.topic, manifest.queue_id)
            same_start = self._fetch_segments(
                conn, row.topic, row.queue_id, "AND start_offset = ?", manifest.start_offset
            )
            if same_start and same_start[0].manifest == manifest:
                return same_start[0]
            if same_start:
                raise CatalogueError(
                    f"a different segment {same_start[0]} is already committed at offset "
                    f"{manifest.start_offset}",
                    where=where,
                )
            self._check_continues(row, manifest, where)
            conn.execute(
                f"INSERT INTO segments ({_SEGMENT_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                _segment_values(manifest, SegmentStatus.COMMITTED),
            )
            self._set_queue(conn, row, cold_commit=manifest.end_offset, cold_cl_end=manifest.cl_end)
            return self._fetch_segments(
                conn, row.topic, row.queue_id, "AND start_offset = ?", manifest.start_offset
            )[0]

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

    def truncate_queue(self, topic: str, queue_id: int, to_offset: int) -> list[SegmentRow]:
        """Forget the segments at and after ``to_offset`` (repair); return them.

        For ``tieredstore repair`` after the divergent objects are quarantined: drops every
        segment row starting at or after ``to_offset`` and resets ``cold_commit`` to
        ``to_offset`` and ``cold_cl_end`` to the first dropped segment's commitlog base
        (unchanged when none is dropped); ``cold_min`` becomes ``min(cold_min,
        to_offset)``. The queue's state is left to the caller.

        Raises CatalogueError when ``to_offset`` is past ``cold_commit``, before the
        init offset, inside a segment rather than at a boundary, or when a segment to
        drop is DELETING (finish the expiry first).
        """
        where = self._where(topic, queue_id)
        with self._transaction() as conn:
            row = self._require_queue(conn, topic, queue_id)
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
            dropped = self._fetch_segments(
                conn, topic, queue_id, "AND start_offset >= ?", to_offset
            )
            deleting = [s for s in dropped if s.status is SegmentStatus.DELETING]
            if deleting:
                raise CatalogueError(
                    f"cannot truncate: {deleting[0]} is being deleted; finish expiry first",
                    where=where,
                )
            conn.execute(
                "DELETE FROM segments WHERE topic = ? AND queue_id = ? AND start_offset >= ?",
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

    # -- the bucket ------------------------------------------------------------------
    async def reconcile(self, backend: Backend) -> ReconcileReport:
        """Compare with the bucket's manifests; adopt those that continue the catalogue.

        See :func:`metadata.reconcile.reconcile`.
        """
        from metadata.reconcile import reconcile  # here: reconcile imports this module

        return await reconcile(self, backend)


def _segment_values(m: Manifest, status: SegmentStatus) -> tuple[Any, ...]:
    return (
        m.topic, m.queue_id, m.start_offset, m.end_offset, m.cl_base, m.cl_end,
        m.commit_log.size, m.commit_log.digest, m.consume_queue.size, m.consume_queue.digest,
        m.digest_algorithm, m.min_store_timestamp, m.max_store_timestamp, status.value,
        m.format_version, m.writer_id, m.lease_epoch, m.created_at_ms, m.key,
    )  # fmt: skip


def _connect(target: str, *, uri: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(
        target, uri=uri, isolation_level=None, check_same_thread=False, timeout=30.0
    )
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _connect_writer(
    path: Path, *, clock: Clock, migrations: Sequence[Migration]
) -> sqlite3.Connection:
    """Open (creating) the database for the lock holder, in WAL mode, migrated."""
    if not path.exists():
        # A -wal or -shm left without its database would be replayed into the new one.
        for suffix in _SIDE_FILES:
            orphan = path.with_name(path.name + suffix)
            if orphan.exists():
                log.warning("removing %s: its database is gone", orphan)
                orphan.unlink()
    try:
        conn = _connect(str(path), uri=False)
    except sqlite3.Error as exc:
        raise CatalogueError(f"cannot open catalogue: {exc}", where=str(path)) from exc
    try:
        (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if str(mode).lower() != "wal":
            raise CatalogueError(f"cannot switch to WAL mode (got {mode})", where=str(path))
        conn.execute("PRAGMA synchronous = FULL")
        migrate(conn, now_ms=clock.now_ms(), where=str(path), migrations=migrations)
    except sqlite3.Error as exc:
        conn.close()
        raise CatalogueError(f"cannot open catalogue: {exc}", where=str(path)) from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _connect_read_only(path: Path) -> sqlite3.Connection:
    if not path.exists():
        raise CatalogueError("no catalogue here (has the sidecar run?)", where=str(path))
    try:
        return _connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise CatalogueError(f"cannot open catalogue read-only: {exc}", where=str(path)) from exc


async def rebuild(
    backend: Backend,
    state_dir: Path | str,
    *,
    cluster: str,
    broker: str,
    clock: Clock | None = None,
) -> ReconcileReport:
    """Build a fresh catalogue in ``state_dir`` from the bucket's manifests alone.

    Every queue with manifests gets a row whose init offset is its first manifest's
    start (the true init offset is not in the bucket), then every contiguous manifest is
    adopted. Refuses to overwrite: move an existing catalogue away first.

    Raises CatalogueError when a catalogue already exists in ``state_dir``, plus
    whatever :meth:`Catalogue.open` and the backend raise.
    """
    path = Path(state_dir) / DB_NAME
    if path.exists():
        raise CatalogueError(
            "a catalogue already exists; move it away to rebuild from manifests",
            where=str(path),
        )
    with Catalogue.open(state_dir, cluster=cluster, broker=broker, clock=clock) as catalogue:
        return await catalogue.reconcile(backend)
