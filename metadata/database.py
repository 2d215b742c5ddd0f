"""The catalogue's database: one SQLite file, its lifecycle and the plumbing under it.

:class:`CatalogueDatabase` opens ``catalogue.sqlite3`` in the sidecar's state directory
(WAL, ``synchronous=FULL``, foreign keys on), migrates its schema, takes the writer lock
(``catalogue.lock``), checks the (cluster, broker) and the cold store it belongs to, and
gives the tables composed over it (:mod:`tieredstore.metadata.queue_table`,
:mod:`tieredstore.metadata.segment_table`, :mod:`tieredstore.metadata.slice_table`) one transaction
helper, one error translation and the row converters. It has no operations of its own:
:class:`tieredstore.metadata.catalogue.Catalogue` is what callers open.

Every method raises :class:`CatalogueError` on a closed catalogue, on a write to a
read-only one, and (translated, ``from`` the sqlite3 error) on any database failure.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final, Required, Self, TypedDict, TypeVar

from tieredstore.backends.factory import canonical_cold_url
from tieredstore.clock import Clock, SystemClock
from tieredstore.cold.compressed.framed import Framed
from tieredstore.cold.layout import broker_prefix, object_name
from tieredstore.cold.manifest import Manifest, ObjectRef
from tieredstore.errors import CatalogueError, CatalogueMismatchError, ConfigError
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.metadata.lock import WriterLock
from tieredstore.metadata.rows import QueueRow, QueueState, SegmentRow, SegmentStatus
from tieredstore.metadata.schema import MIGRATIONS, Migration, migrate, schema_version
from tieredstore.state_dir import CATALOGUE_FILE

__all__ = [
    "DB_NAME",
    "LOCK_NAME",
    "LOSS_COLUMNS",
    "QUEUE_COLUMNS",
    "SEGMENT_COLUMNS",
    "SLICE_COLUMNS",
    "CatalogueDatabase",
    "CatalogueState",
    "OpenOptions",
    "each_in_savepoint",
]

log = logging.getLogger(__name__)

#: The schema version that added ``identity.cold_url`` (:mod:`tieredstore.metadata.schema`).
_COLD_URL_VERSION: Final = 4

#: The catalogue's file in the state dir (named once, in the core: the verifier reads it).
DB_NAME: Final = CATALOGUE_FILE
LOCK_NAME: Final = "catalogue.lock"
_SIDE_FILES: Final = ("-wal", "-shm", "-journal")

QUEUE_COLUMNS: Final = (
    "topic, queue_id, init_offset, cold_min, cold_commit, cold_cl_end, cq_base, state, "
    "updated_at_ms"
)
SEGMENT_COLUMNS: Final = (
    "topic, queue_id, start_offset, end_offset, cl_base, cl_end, cl_size, cl_digest, "
    "cq_size, cq_digest, digest_algorithm, min_store_timestamp, max_store_timestamp, "
    "status, format_version, writer_id, lease_epoch, created_at_ms, manifest_key, attempt, "
    "cl_stored_size, cl_stored_digest"
)
SLICE_COLUMNS: Final = (
    "topic, queue_id, start_offset, end_offset, cl_base, cl_end, batch_key, sequence, "
    "cl_at, cl_size, cl_digest, cq_at, cq_size, cq_digest, object_size, digest_algorithm, "
    "min_store_timestamp, max_store_timestamp, writer_id, lease_epoch, created_at_ms, "
    "stored_size, frames_at"
)

LOSS_COLUMNS: Final = (
    "topic, queue_id, start_offset, end_offset, accepted_at_ms, writer_id, lease_epoch, record_key"
)


class OpenOptions(TypedDict, total=False):
    """The options of :meth:`CatalogueDatabase.open` after the state directory."""

    cluster: Required[str]
    broker: Required[str]
    read_only: bool
    clock: Clock | None
    cold_url: str | None
    migrations: Sequence[Migration]


class CatalogueState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


_T = TypeVar("_T")
_R = TypeVar("_R")


class CatalogueDatabase:
    """The open database of one (cluster, broker); see the module docstring."""

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
        self.clock = clock
        self._conn = conn
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
        cold_url: str | None = None,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> Self:
        """Open (creating if needed) the catalogue in ``state_dir`` for writing, or
        an existing one ``read_only``.

        A writer creates the directory and database, takes ``catalogue.lock``, migrates
        the schema, and records or checks the (cluster, broker) the catalogue belongs
        to; with ``cold_url``, the cold store too (:func:`_check_cold_url`).
        ``migrations`` exists for tests of the migration mechanism.

        Raises:
            InvalidNameError: ``cluster`` or ``broker`` cannot be a cold-store name.
            CatalogueBusyError: another writer holds the catalogue.
            ConfigError: it caches another cold store than ``cold_url`` (wrong state
                directory or wrong ``cold.url``: exit 3 at the CLI).
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
            if cold_url is not None and len(migrations) >= _COLD_URL_VERSION:
                _check_cold_url(catalogue, canonical_cold_url(cold_url))
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

    def __exit__(self, *exc: object) -> None:
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
        with self.transaction(write=not read_only) as conn:
            row = conn.execute("SELECT cluster, broker FROM identity").fetchone()
            if row is None and not read_only:
                conn.execute(
                    "INSERT INTO identity (singleton, cluster, broker, created_at_ms) "
                    "VALUES (1, ?, ?, ?)",
                    (self.cluster, self.broker, self.clock.now_ms()),
                )
                return
        if row is None or tuple(row) != (self.cluster, self.broker):
            owner = "no cluster/broker" if row is None else f"cluster {row[0]!r} broker {row[1]!r}"
            raise CatalogueMismatchError(
                f"catalogue belongs to {owner}, not cluster {self.cluster!r} broker "
                f"{self.broker!r}",
                where=str(self.path),
            )

    def _scalar_version(self) -> int:
        with self.guard() as conn:
            return schema_version(conn)

    # -- plumbing --------------------------------------------------------------------
    @contextlib.contextmanager
    def guard(self) -> Iterator[sqlite3.Connection]:
        """The connection, for reads outside a transaction: serialise access, refuse a
        closed catalogue, translate sqlite3 errors."""
        with self._mutex:
            if self.state is CatalogueState.CLOSED:
                raise CatalogueError("catalogue is closed", where=str(self.path))
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise CatalogueError(
                    f"catalogue database error: {exc}", where=str(self.path)
                ) from exc

    @contextlib.contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction: IMMEDIATE (takes SQLite's write lock) for writes."""
        if write and self.read_only:
            raise CatalogueError("catalogue is open read-only", where=str(self.path))
        with self.guard() as conn:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.guard() as conn:
            return [tuple(r) for r in conn.execute(sql, params).fetchall()]

    def require_ours(self, what: str, cluster: str, broker: str, where: str) -> None:
        """Refuse a record (manifest, loss record) of another cluster or broker."""
        if (cluster, broker) != (self.cluster, self.broker):
            raise CatalogueError(
                f"{what} of cluster {cluster!r} broker {broker!r} does not belong in this "
                "catalogue",
                where=where,
            )

    def queue_where(self, topic: str, queue_id: int) -> str:
        """Where an error about the queue happened, for its message."""
        return f"{self.path} queue {topic}/{queue_id}"

    def segment_row(self, r: Sequence[Any]) -> SegmentRow:
        (topic, qid, start, end, cl_base, cl_end, cl_size, cl_digest, cq_size, cq_digest,
         algorithm, ts_min, ts_max, status, version, writer, epoch, created, _key,
         attempt, cl_stored, cl_stored_digest) = r  # fmt: skip
        framed = None if cl_stored is None else Framed(cl_stored, cl_stored_digest)
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
            commit_log=ObjectRef(object_name(cl_base, attempt), cl_size, cl_digest, framed),
            consume_queue=ObjectRef(object_name(start * CQ_UNIT_SIZE, attempt), cq_size, cq_digest),
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
    def queue_row(r: Sequence[Any]) -> QueueRow:
        topic, qid, init, cold_min, cold_commit, cl_end, cq_base, state, updated = r
        return QueueRow(
            topic, qid, init, cold_min, cold_commit, cl_end, cq_base, QueueState(state), updated
        )

    @classmethod
    def fetch_queue(cls, conn: sqlite3.Connection, topic: str, queue_id: int) -> QueueRow | None:
        r = conn.execute(
            f"SELECT {QUEUE_COLUMNS} FROM queues WHERE topic = ? AND queue_id = ?",
            (topic, queue_id),
        ).fetchone()
        return None if r is None else cls.queue_row(r)

    def require_queue(self, conn: sqlite3.Connection, topic: str, queue_id: int) -> QueueRow:
        row = self.fetch_queue(conn, topic, queue_id)
        if row is None:
            raise CatalogueError("unknown queue", where=self.queue_where(topic, queue_id))
        return row

    def fetch_segments(
        self, conn: sqlite3.Connection, topic: str, queue_id: int, where: str = "", *params: Any
    ) -> list[SegmentRow]:
        sql = (
            f"SELECT {SEGMENT_COLUMNS} FROM segments WHERE topic = ? AND queue_id = ? {where} "
            "ORDER BY start_offset"
        )
        rows = conn.execute(sql, (topic, queue_id, *params)).fetchall()
        return [self.segment_row(r) for r in rows]

    def set_queue(self, conn: sqlite3.Connection, row: QueueRow, **changes: Any) -> QueueRow:
        assigned = ", ".join(f"{name} = ?" for name in changes)
        values = [v.value if isinstance(v, enum.Enum) else v for v in changes.values()]
        conn.execute(
            f"UPDATE queues SET {assigned}, updated_at_ms = ? WHERE topic = ? AND queue_id = ?",
            (*values, self.clock.now_ms(), row.topic, row.queue_id),
        )
        return self.require_queue(conn, row.topic, row.queue_id)


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
        raise CatalogueMismatchError(
            "no catalogue here: nothing tiered from this state dir (has the sidecar run?)",
            where=str(path),
        )
    try:
        return _connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise CatalogueError(f"cannot open catalogue read-only: {exc}", where=str(path)) from exc


def _check_cold_url(db: CatalogueDatabase, url: str) -> None:
    """Refuse ``db`` when it caches another cold store; record ``url`` if none is.

    URLs are compared canonically
    (:func:`~tieredstore.backends.factory.canonical_cold_url`). A catalogue with
    none recorded (created before 0.3, or opened without one) adopts ``url`` on its
    first writable open; a read-only open neither adopts nor refuses then.

    Without this, a state directory reused with another ``cold.url`` reports OK
    while the new store holds nothing, then calls its queues DIVERGED and sends the
    operator to ``repair``: the wrong cure for a wrong setting.
    """
    with db.transaction(write=not db.read_only) as conn:
        (recorded,) = conn.execute("SELECT cold_url FROM identity").fetchone()
        if recorded == "" and not db.read_only:
            conn.execute("UPDATE identity SET cold_url = ?", (url,))
            log.info("catalogue %s records its cold store: %s", db.path, url)
            return
    if recorded not in ("", url):
        raise ConfigError(
            f"state directory caches cold store {recorded}, not {url} (cold.url): "
            "use that store's state directory, or a new one for this store",
            where=str(db.path),
        )


def each_in_savepoint(
    db: CatalogueDatabase, items: Sequence[_T], apply: Callable[[sqlite3.Connection, _T], _R]
) -> list[_R | CatalogueError]:
    """``apply`` to each item in ONE transaction of ``db`` (one fsync: a group commit), each
    in a savepoint of its own: an item it refuses (CatalogueError) is rolled back
    and fails alone, the others commit all the same. Per item, in order, what
    ``apply`` returned or the CatalogueError that refused it.

    Raises:
        CatalogueError: the database failed (then none of them is committed).
    """
    out: list[_R | CatalogueError] = []
    with db.transaction() as conn:
        for i, item in enumerate(items):
            conn.execute(f"SAVEPOINT s{i}")
            try:
                out.append(apply(conn, item))
            except CatalogueError as exc:
                conn.execute(f"ROLLBACK TO s{i}")
                out.append(exc)
            conn.execute(f"RELEASE s{i}")
    return out
