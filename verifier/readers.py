"""How data gets into Spark: a driver-side listing, then Spark tasks that read.

* The **driver** lists the broker's cold prefix once (:func:`list_cold_objects`, fsspec,
  sync), reads the few loss records (``LOSS/``: offsets accepted as lost before
  tiering) and the hot store's queue directories (cheap metadata only).
* **Spark tasks** (``mapInArrow``, no pandas) do every read that scales with the data:
  parse the commit points into links (:class:`ManifestTask`: a MANIFEST is a segment, a
  batch object's head gives one slice per queue it holds), find each hot queue's range
  and lag cutoff (:class:`HotQueueTask`), and verify each link (:class:`SegmentTask`: a
  segment's whole objects, a slice's byte ranges of its batch) — reading the cold
  objects through a plain sync fsspec filesystem opened inside the task
  (``fsspec.core.url_to_fs(url, **storage_options)``; no Hadoop S3 jars, no async
  backends inside executors) and the hot store by path.
* The **driver** then applies the one reading rule (:func:`mark_covering`,
  :func:`tieredstore.cold.history.choose`) to the collected links: segments win, a slice
  covers only offsets no segment holds, the lowest batch sequence first.

Tasks never raise for bad *data*: a manifest or batch head that does not validate
becomes a row with ``error`` set, an object that vanished becomes an
``object_unreadable`` fact (a manifest or batch that vanished before it was parsed was
collected: no row). They do
raise for a broken *environment* (permission denied, unreachable endpoint), which fails
the Spark job and so the run (exit 3). The hot store path must be readable where the
tasks run (on the broker host with ``local[*]``, or a shared mount on a cluster).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import fsspec
import numpy as np
import pyarrow as pa
from fsspec.spec import AbstractFileSystem
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from tieredstore.backends.factory import COMMAND_RETRY, probe
from tieredstore.backends.options import BackendOptions
from tieredstore.backends.posix import is_lock_file
from tieredstore.cold.batch import BatchFence, BatchHead, head_reads
from tieredstore.cold.digests import DigestAlgorithm
from tieredstore.cold.history import Committed, EntryKind, Span, Withdrawal, choose, slices_of
from tieredstore.cold.layout import (
    LossKey,
    ObjectKey,
    OwnEntry,
    QueuePath,
    SegmentKind,
    batch_prefix,
    broker_prefix,
    classify_listed,
    parse_batch_key,
    tiering_key,
)
from tieredstore.cold.loss import LossRecord, read_loss_record
from tieredstore.cold.manifest import FenceMarker, read_stored
from tieredstore.cold.provenance import (
    QueueInit,
    RetentionMark,
    StopMark,
    TieringRecord,
    earliest_inits,
    find_tiered_prefix,
    is_queue_record_key,
    read_queue_records,
    read_tiering_record,
)
from tieredstore.errors import (
    ColdStoreAccessError,
    ColdStoreUnreachableError,
    ConfigError,
    CorruptBatchError,
    CorruptLossRecordError,
    CorruptManifestError,
    CorruptProvenanceError,
    InvalidNameError,
    ObjectNotFoundError,
    OffsetOutOfRangeError,
    StoreNotFoundError,
    TieredStoreError,
)
from tieredstore.findings import FindingKind
from tieredstore.formats.consumequeue import decode_units
from tieredstore.hot.commitlog import HotCommitlog
from tieredstore.hot.store import HotRange, HotStore, QueueKey
from tieredstore.humanize import iso_time
from tieredstore.verifier import schemas
from tieredstore.verifier.decision import (
    ObjectRead,
    content_judged,
    judged,
    object_findings,
    reads_whole,
    span_read,
)
from tieredstore.verifier.segmentcheck import (
    FactKind,
    HotSide,
    ManifestClaims,
    SegmentFacts,
    SegmentGeometry,
    check_segment,
)
from tieredstore.verifier.vocabulary import LagAllowance, LagUnit, Level

__all__ = [
    "BATCH_KIND",
    "ColdListing",
    "ColdLocation",
    "HotQueueTask",
    "ManifestTask",
    "SegmentTask",
    "hot_queue_frame",
    "list_cold_objects",
    "loss_detail",
    "losses_frames",
    "manifest_frame",
    "mark_covering",
    "objects_frame",
    "open_cold_filesystem",
    "probe_cold",
    "read_batch",
    "require_tiered",
    "segment_facts_frame",
    "tail_timestamp",
]

Row = dict[str, Any]

#: The OBJECTS kind of a batch object (``_batches/``; topic "", queue_id -1, base its
#: sequence).
BATCH_KIND = "BATCH"


# -- the cold side, on the driver -----------------------------------------------------


@dataclass(frozen=True)
class ColdLocation:
    """A cold store root URL and its fsspec storage options (picklable into tasks)."""

    url: str
    storage_options: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def filesystem(self) -> tuple[AbstractFileSystem, str]:
        """Return the sync fsspec filesystem and the root path inside it.

        Raises:
            ConfigError: an unknown scheme, a missing fsspec plugin, or ``memory://``
                (one process's memory: Spark tasks run in other processes).
        """
        if self.url.strip().lower().startswith("memory://"):
            raise ConfigError(
                "the verifier cannot read memory:// (it lives in one process; Spark tasks "
                "run in others)",
                where=self.url,
            )
        try:
            fs, root = fsspec.core.url_to_fs(self.url, **dict(self.storage_options))
        except (ValueError, ImportError, TypeError) as exc:
            raise ConfigError(f"bad cold URL: {exc}", where=self.url) from exc
        return fs, str(root).rstrip("/")

    @staticmethod
    def path(root: str, key: str) -> str:
        """The filesystem path of object ``key`` under ``root``."""
        return f"{root}/{key}" if root else key


@dataclass(frozen=True)
class ColdListing:
    """The broker prefix as listed once by the driver.

    ``objects`` has the :data:`~tieredstore.verifier.schemas.OBJECTS` schema; ``losses`` are the
    loss records, read and validated; ``unrecognised`` are keys that are neither ours
    (``_lease.json``, ``_quarantine/``) nor a segment object nor a valid loss record
    (e.g. a POSIX temp file left by a crash): reported, never an anomaly by themselves
    (a loss record that does not validate acknowledges nothing, so its offsets stay a
    ``gap`` or ``hot_not_covered``).
    """

    objects: pa.Table
    unrecognised: tuple[str, ...]
    losses: tuple[LossRecord, ...] = ()
    tiering: TieringRecord | None = None
    inits: tuple[QueueInit, ...] = ()
    retention: tuple[RetentionMark, ...] = ()
    stops: tuple[StopMark, ...] = ()


def _mtime_ms(fs: AbstractFileSystem, path: str, info: Mapping[str, Any]) -> int:
    for name in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value * 1000)
        if isinstance(value, dt.datetime):
            return int(value.timestamp() * 1000)
        if isinstance(value, str):
            return int(dt.datetime.fromisoformat(value).timestamp() * 1000)
    return int(fs.modified(path).timestamp() * 1000)


def _check_root(fs: AbstractFileSystem, root: str, url: str) -> None:
    # An empty prefix on an object store is normal (nothing tiered yet), but a missing
    # local directory or bucket is a typo the operator must hear about.
    top = root.split("/", 1)[0] if "file" not in _protocols(fs) else root
    try:
        ok = bool(fs.exists(top)) if top else True
    except OSError as exc:
        raise ConfigError(f"cannot reach the cold store: {exc}", where=url) from exc
    if not ok:
        raise ConfigError("cold store root does not exist", where=url)


def _protocols(fs: AbstractFileSystem) -> tuple[str, ...]:
    proto = fs.protocol
    return (proto,) if isinstance(proto, str) else tuple(proto)


def open_cold_filesystem(cold: ColdLocation) -> tuple[AbstractFileSystem, str]:
    """Open the cold filesystem on the driver and check its root exists.

    Raises:
        ConfigError: bad URL, or a cold root (local directory, bucket) that does not exist.
    """
    fs, root = cold.filesystem()
    _check_root(fs, root, cold.url)
    return fs, root


def list_cold_objects(cold: ColdLocation, cluster: str, broker: str) -> ColdListing:
    """List every object under ``<md5(cluster)[:8]>_<cluster>/<broker>/`` (driver side):
    segment objects by their kind, batch objects (``_batches/``) as :data:`BATCH_KIND`.

    Raises:
        ConfigError: as :func:`open_cold_filesystem`, or the listing fails.
    """
    fs, root = open_cold_filesystem(cold)
    # With its trailing slash, so that broker "b" never lists broker "b2".
    prefix = broker_prefix(cluster, broker).rstrip("/") + "/"
    try:
        found: dict[str, Mapping[str, Any]] = fs.find(
            ColdLocation.path(root, prefix.rstrip("/")), detail=True
        )
    except OSError as exc:
        raise ConfigError(f"cannot list the cold store: {exc}", where=cold.url) from exc
    rows: list[Row] = []
    unrecognised: list[str] = []
    losses: list[LossRecord] = []
    records = _Provenance(fs, prefix, tiering_key(cluster, broker))
    batches = batch_prefix(cluster, broker) + "/"
    cut = len(root) + 1 if root else 0
    for path, info in sorted(found.items()):
        key = path[cut:]
        parsed = classify_listed(key, prefix)
        sequence = parse_batch_key(key, batches) if isinstance(parsed, OwnEntry) else None
        if sequence is not None:  # a batch object (or a batch fence): its slices are links
            rows.append(_object_row(fs, path, info, key, BATCH_KIND, ("", -1), sequence))
            continue
        if isinstance(parsed, OwnEntry):  # lease, quarantine, config, provenance: ours
            if not records.take(path, key):
                unrecognised.append(key)  # a provenance record that does not validate
            continue
        if is_lock_file(key.rsplit("/", 1)[-1]):  # e.g. ._lease.json.lock: the backend's own
            continue
        loss = _read_loss(fs, path, key) if isinstance(parsed, LossKey) else None
        if loss is not None:
            losses.append(loss)
            continue
        if not isinstance(parsed, ObjectKey):  # unrecognised, or a loss record that is not
            unrecognised.append(key)
            continue
        queue = (parsed.topic, parsed.queue_id)
        rows.append(_object_row(fs, path, info, key, parsed.kind.value, queue, parsed.base_offset))
    table = pa.Table.from_pylist(rows, schema=schemas.arrow_schema(schemas.OBJECTS))
    return ColdListing(
        table, tuple(unrecognised), tuple(losses), records.tiering, records.in_force(),
        tuple(records.retention), tuple(records.stops),
    )  # fmt: skip


def _object_row(
    fs: AbstractFileSystem,
    path: str,
    info: Mapping[str, Any],
    key: str,
    kind: str,
    queue: tuple[str, int],
    base: int,
) -> Row:
    """One OBJECTS row."""
    return {
        "key": key,
        "kind": kind,
        "topic": queue[0],
        "queue_id": queue[1],
        "base": base,
        "size": int(info["size"]),
        "mtime_ms": _mtime_ms(fs, path, info),
    }


class _Provenance:
    """The provenance records met in a listing (:mod:`tieredstore.cold.provenance`), read and
    validated; one that does not validate explains nothing (it is listed as
    unrecognised, so the offsets it would have explained stay an anomaly)."""

    def __init__(self, fs: AbstractFileSystem, prefix: str, tiering: str) -> None:
        self.fs, self.prefix, self.tiering_key = fs, prefix, tiering
        self.tiering: TieringRecord | None = None
        self.inits: list[QueueInit] = []
        self.retention: list[RetentionMark] = []
        self.stops: list[StopMark] = []

    def take(self, path: str, key: str) -> bool:
        """Read ``key`` if it is a provenance record; False if it is one that is corrupt."""
        is_tiering = key == self.tiering_key
        try:
            if not is_tiering and not is_queue_record_key(key, self.prefix):
                return True  # the lease, quarantine, config copies: not ours to read
            data = self.fs.cat_file(path)
            if is_tiering:
                self.tiering = read_tiering_record(data, key)
                return True
            recs = read_queue_records(data, key, self.prefix)
        except FileNotFoundError:
            return True
        except (CorruptProvenanceError, InvalidNameError):
            return False
        for rec in recs:
            if isinstance(rec, QueueInit):
                self.inits.append(rec)
            elif isinstance(rec, StopMark):
                self.stops.append(rec)
            else:
                self.retention.append(rec)
        return True

    def in_force(self) -> tuple[QueueInit, ...]:
        """One init record per queue, the one in force
        (:func:`~tieredstore.cold.provenance.earliest_inits`)."""
        return tuple(earliest_inits(self.inits))


class _FsRecords:
    """The driver's sync fsspec filesystem as a
    :class:`~tieredstore.cold.provenance.RecordSource`."""

    def __init__(self, fs: AbstractFileSystem, root: str) -> None:
        self.fs, self.root = fs, root

    async def read(self, key: str) -> bytes:
        try:
            data: bytes = self.fs.cat_file(ColdLocation.path(self.root, key))
        except FileNotFoundError as exc:
            raise ObjectNotFoundError("no such object", where=key) from exc
        return data

    async def list(self, prefix: str = "") -> list[_Key]:
        try:
            found = self.fs.find(ColdLocation.path(self.root, prefix.rstrip("/")))
        except FileNotFoundError:
            return []
        cut = len(self.root) + 1 if self.root else 0
        return [_Key(str(p)[cut:]) for p in sorted(found)]


@dataclass(frozen=True)
class _Key:
    key: str


def require_tiered(
    cold: ColdLocation, cluster: str, broker: str, *, require_record: bool = True
) -> TieringRecord | None:
    """The broker's tiering record, read on the driver before Spark starts
    (:func:`~tieredstore.cold.provenance.find_tiered_prefix` over the driver's filesystem;
    None only when not ``require_record`` and the prefix holds segments but no record).

    Raises:
        NotTieredError: nothing at the prefix (one line: what was looked for, which
            brokers the cluster has); ConfigError as :func:`open_cold_filesystem`;
            ColdStoreUnreachableError when an object store does not answer.
    """
    _probe(cold, tiering_key(cluster, broker))
    fs, root = open_cold_filesystem(cold)
    return asyncio.run(
        find_tiered_prefix(_FsRecords(fs, root), cluster, broker, where=cold.url,
                           require_record=require_record)
    )  # fmt: skip


def probe_cold(cold: ColdLocation) -> None:
    """Ask the store at ``cold`` for one listing before Spark starts (``verify --fleet``,
    which reads every cluster's records): the one message of an unreachable store or one
    that refuses us (:func:`_probe`), never a Spark task's stack trace."""
    _probe(cold, "_probe")


def _probe(cold: ColdLocation, key: str) -> None:
    """Ask an S3 store for one key through the core backend before fsspec's sync API
    does: a store that does not answer raises ColdStoreUnreachableError, the message
    every command gives for it (fsspec's ``exists`` would say False after its own
    retries, and the operator would look for a missing bucket); one that refuses us
    (credentials, permission, bucket, region) raises ColdStoreAccessError, its one
    message. Other stores: nothing."""
    if not cold.url.strip().lower().startswith(("s3://", "s3a://")):
        return
    so = cold.storage_options
    options = BackendOptions(
        endpoint_url=so.get("endpoint_url"),
        region=dict(so.get("client_kwargs") or {}).get("region_name"),
        access_key=so.get("key"),
        secret_key=so.get("secret"),
        session_token=so.get("token"),
    )
    try:
        asyncio.run(probe(cold.url.rstrip("/"), options, key, retry=COMMAND_RETRY))
    except (ColdStoreUnreachableError, ColdStoreAccessError):
        raise  # the one message for each, never "does not exist" for a bucket we may not list
    except TieredStoreError:
        return  # it answered otherwise: the checks below say what is wrong


def _read_loss(fs: AbstractFileSystem, path: str, key: str) -> LossRecord | None:
    """A loss record, or None when it vanished or does not validate."""
    try:
        return read_loss_record(fs.cat_file(path), key)
    except FileNotFoundError:
        return None
    except CorruptLossRecordError:
        return None


def losses_frames(
    spark: SparkSession, losses: tuple[LossRecord, ...]
) -> tuple[DataFrame, DataFrame]:
    """LOSSES (one row per record, its report text built here) and LOSS_SPANS (each
    queue's records merged into maximal contiguous or overlapping spans)."""
    rows = [
        {
            "record_key": x.key,
            "topic": x.topic,
            "queue_id": x.queue_id,
            "start_offset": x.start_offset,
            "end_offset": x.end_offset,
            "accepted_at_ms": x.accepted_at_ms,
            "writer_id": x.writer_id,
            "lease_epoch": x.lease_epoch,
            "detail": loss_detail(x),
        }
        for x in losses
    ]
    spans: list[Row] = []
    for x in sorted(losses, key=lambda r: (r.topic, r.queue_id, r.start_offset)):
        last = spans[-1] if spans else None
        same = last is not None and (last["topic"], last["queue_id"]) == (x.topic, x.queue_id)
        if last is not None and same and x.start_offset <= last["span_end"]:
            last["span_end"] = max(last["span_end"], x.end_offset)
        else:
            spans.append(
                {"topic": x.topic, "queue_id": x.queue_id, "span_start": x.start_offset,
                 "span_end": x.end_offset}
            )  # fmt: skip
    return (
        spark.createDataFrame(
            pa.Table.from_pylist(rows, schema=schemas.arrow_schema(schemas.LOSSES)),
            schema=schemas.LOSSES,
        ),
        spark.createDataFrame(
            pa.Table.from_pylist(spans, schema=schemas.arrow_schema(schemas.LOSS_SPANS)),
            schema=schemas.LOSS_SPANS,
        ),
    )


def loss_detail(x: LossRecord) -> str:
    """The report text of one accepted loss."""
    when = iso_time(x.accepted_at_ms, timespec="milliseconds", zulu=False)
    return (
        f"{x.count} messages the broker deleted before they were tiered; the loss was "
        f"accepted at {when} by writer {x.writer_id} "
        f"(lease epoch {x.lease_epoch})"
    )


def objects_frame(spark: SparkSession, listing: ColdListing) -> DataFrame:
    """The listing as a DataFrame with the OBJECTS schema."""
    return spark.createDataFrame(listing.objects, schema=schemas.OBJECTS)


# -- plumbing shared by the tasks -----------------------------------------------------


def _map_rows(
    batches: Iterator[pa.RecordBatch],
    schema: StructType,
    per_row: Callable[[Row], Row | None],
) -> Iterator[pa.RecordBatch]:
    arrow = schemas.arrow_schema(schema)
    for batch in batches:
        out = [r for r in map(per_row, batch.to_pylist()) if r is not None]
        yield pa.RecordBatch.from_pylist(out, schema=arrow)


def _partitions(spark: SparkSession, rows: int, per_partition: int) -> int:
    parallelism = spark.sparkContext.defaultParallelism
    return max(1, min(parallelism * 4, -(-rows // per_partition)))


# -- manifests ------------------------------------------------------------------------


@dataclass(frozen=True)
class ManifestTask:
    """Parse commit points into SEGMENTS rows (in a Spark task): a MANIFEST object into
    its segment, a batch object into one row per slice (:func:`read_batch`)."""

    cold: ColdLocation

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, root = self.cold.filesystem()
        arrow = schemas.arrow_schema(schemas.SEGMENTS)
        for batch in batches:
            out = [row for obj in batch.to_pylist() for row in self._rows(fs, root, obj)]
            yield pa.RecordBatch.from_pylist(out, schema=arrow)

    @classmethod
    def _rows(cls, fs: AbstractFileSystem, root: str, obj: Row) -> list[Row]:
        if obj["kind"] == BATCH_KIND:
            return _slice_rows(fs, root, obj)
        row = cls._row(fs, root, obj)
        return [] if row is None else [row]

    @staticmethod
    def _row(fs: AbstractFileSystem, root: str, obj: Row) -> Row | None:
        key = obj["key"]
        base: Row = {
            "manifest_key": key,
            "topic": obj["topic"],
            "queue_id": obj["queue_id"],
            "start_offset": obj["base"],
            "manifest_mtime_ms": obj["mtime_ms"],
            "link": schemas.LINK_SEGMENT,
            "sequence": -1,
        }
        try:
            data = fs.cat_file(ColdLocation.path(root, key))
        except FileNotFoundError:
            return None  # expired between the listing and now: no longer committed
        try:
            m = read_stored(data, key)
        except CorruptManifestError as exc:
            return base | {"error": str(exc)}
        if isinstance(m, FenceMarker):
            return None  # GC's fence: no segment here
        return base | {
            "end_offset": m.end_offset,
            "cl_base": m.cl_base,
            "cl_end": m.cl_end,
            "cl_key": m.commit_log_key,
            "cl_size": m.commit_log.size,
            "cl_digest": m.commit_log.digest,
            "cq_key": m.consume_queue_key,
            "cq_size": m.consume_queue.size,
            "cq_digest": m.consume_queue.digest,
            "min_store_timestamp": m.min_store_timestamp,
            "max_store_timestamp": m.max_store_timestamp,
            "message_count": m.message_count,
            "writer_id": m.writer_id,
            "lease_epoch": m.lease_epoch,
            "created_at_ms": m.created_at_ms,
            "cl_at": 0,
            "cq_at": 0,
            "cl_object_size": m.commit_log.size,
            "cq_object_size": m.consume_queue.size,
            "cl_stored_size": None if m.commit_log.framed is None else m.commit_log.stored_size,
            "cl_stored_digest": (
                None if m.commit_log.framed is None else m.commit_log.framed.stored_digest
            ),
        }


def read_batch(fs: AbstractFileSystem, path: str, key: str, size: int) -> BatchHead | BatchFence:
    """The head of the ``size``-byte batch object ``key`` at ``path``, read by fsspec
    range reads as :func:`~tieredstore.cold.batch.head_reads` says.

    Raises:
        FileNotFoundError: it vanished (collected).
        CorruptBatchError / UnsupportedFormatError: it does not parse (naming ``key``).
    """
    reads = head_reads(key, size)
    try:
        want = next(reads)
        while True:
            want = reads.send(fs.cat_file(path, start=0, end=want))
    except StopIteration as parsed:
        return parsed.value  # type: ignore[no-any-return]


def _slice_rows(fs: AbstractFileSystem, root: str, obj: Row) -> list[Row]:
    """SEGMENTS rows of one batch object: one per slice; none for a fence or a batch
    that vanished; one ``error`` row naming the batch when its head does not parse."""
    key = obj["key"]
    base: Row = {
        "manifest_key": key,
        "topic": "",
        "queue_id": -1,
        "start_offset": obj["base"],
        "manifest_mtime_ms": obj["mtime_ms"],
        "link": schemas.LINK_SLICE,
        "sequence": obj["base"],
    }
    try:
        head = read_batch(fs, ColdLocation.path(root, key), key, obj["size"])
    except FileNotFoundError:
        return []  # collected between the listing and now: no longer committed
    except (CorruptBatchError, CorruptManifestError) as exc:  # Unsupported is the latter
        return [base | {"error": str(exc)}]
    if isinstance(head, BatchFence):  # no batch has this sequence; it may withdraw slices
        return [
            base | {
                "manifest_key": f"{key}#{w.topic}/{w.queue_id}", "topic": w.topic,
                "queue_id": w.queue_id, "start_offset": w.from_offset,
                "link": schemas.LINK_WITHDRAWAL,
            }
            for w in head.withdrawn
        ]  # fmt: skip
    return [
        base
        | {
            "manifest_key": link.history_key,
            "topic": link.topic,
            "queue_id": link.queue_id,
            "start_offset": link.start_offset,
            "end_offset": link.end_offset,
            "cl_base": link.cl_base,
            "cl_end": link.cl_end,
            "cl_key": key,
            "cl_size": link.commit_log.size,
            "cl_digest": link.commit_log.digest,
            "cq_key": key,
            "cq_size": link.consume_queue.size,
            "cq_digest": link.consume_queue.digest,
            "min_store_timestamp": link.min_store_timestamp,
            "max_store_timestamp": link.max_store_timestamp,
            "message_count": link.message_count,
            "writer_id": link.writer_id,
            "lease_epoch": link.lease_epoch,
            "created_at_ms": link.created_at_ms,
            "cl_at": link.commit_log.at,
            "cq_at": link.consume_queue.at,
            "cl_object_size": link.commit_log.object_size,
            "cq_object_size": link.consume_queue.object_size,
            "cl_stored_size": (
                None if link.commit_log.framed is None else link.commit_log.stored_size
            ),
        }
        for link in slices_of(head)
    ]


def _link(row: Row) -> Committed:
    """A valid SEGMENTS row as a history link (what :func:`choose` orders by)."""
    is_slice = row["link"] == schemas.LINK_SLICE
    return Committed(
        kind=EntryKind.SLICE if is_slice else EntryKind.SEGMENT,
        queue=QueuePath("c", "b", row["topic"], row["queue_id"]),  # names are not judged
        start_offset=row["start_offset"],
        end_offset=row["end_offset"],
        cl_base=row["cl_base"],
        cl_end=row["cl_end"],
        commit_log=Span(row["cl_key"], row["cl_at"], row["cl_size"], row["cl_digest"],
                        row["cl_object_size"]),
        consume_queue=Span(row["cq_key"], row["cq_at"], row["cq_size"], row["cq_digest"],
                           row["cq_object_size"]),
        digest_algorithm=DigestAlgorithm.for_hex(row["cl_digest"]).value,
        min_store_timestamp=row["min_store_timestamp"],
        max_store_timestamp=row["max_store_timestamp"],
        writer_id=row["writer_id"],
        lease_epoch=row["lease_epoch"],
        created_at_ms=row["created_at_ms"],
        key=row["manifest_key"],
        sequence=row["sequence"],
    )  # fmt: skip


def mark_covering(segments: pa.Table) -> pa.Table:
    """SEGMENTS (collected) with ``covers`` set by the one reading rule, per queue
    (driver side, :func:`tieredstore.cold.history.choose`): true for every valid segment
    (one overlapping another stays an ``overlap``) and for each slice the rule chooses;
    false for the slices it does not (they hold offsets a segment or an earlier slice
    holds); null for rows with ``error``. Withdrawal rows and the slices they withdraw
    are dropped: no check reads them (no reader does)."""
    rows = segments.to_pylist()
    by_queue: dict[tuple[str, int], tuple[list[Committed], list[Committed | Withdrawal]]] = {}
    for row in rows:
        if row["error"] is None:
            segs, slices = by_queue.setdefault((row["topic"], row["queue_id"]), ([], []))
            if row["link"] == schemas.LINK_SEGMENT:
                segs.append(_link(row))
            else:
                slices.append(_withdrawal(row) if _withdraws(row) else _link(row))
    chosen: set[str] = set()
    dropped: set[str] = set()
    for segs, slices in by_queue.values():
        history = choose(segs, slices)
        chosen.update(link.key for link in history.links)
        dropped.update(link.key for link in history.withdrawn)
    keep = [not _withdraws(r) and r["manifest_key"] not in dropped for r in rows]
    covers = [
        None if r["error"] is not None
        else r["link"] == schemas.LINK_SEGMENT or r["manifest_key"] in chosen
        for r in rows
    ]  # fmt: skip
    index = segments.schema.get_field_index("covers")
    marked = segments.set_column(index, segments.schema.field(index), pa.array(covers, pa.bool_()))
    return marked.filter(pa.array(keep, pa.bool_()))


def _withdraws(row: Row) -> bool:
    return bool(row["link"] == schemas.LINK_WITHDRAWAL)


def _withdrawal(row: Row) -> Withdrawal:
    """A withdrawal row as :func:`choose` takes it (its key: the fence's batch key)."""
    queue = QueuePath("c", "b", row["topic"], row["queue_id"])  # names are not judged
    fence_key = row["manifest_key"].partition("#")[0]
    return Withdrawal(queue, row["start_offset"], row["sequence"], fence_key)


def manifest_frame(objects: DataFrame, cold: ColdLocation) -> DataFrame:
    """SEGMENTS: one row per MANIFEST object of ``objects`` and per slice of each batch
    object, parsed in Spark tasks (``covers`` null: :func:`mark_covering` sets it)."""
    manifests = objects.where(objects.kind.isin(SegmentKind.MANIFEST.value, BATCH_KIND))
    # The listing is sorted by key, so each queue's manifests are spread evenly over the
    # listing's partitions already; a shuffle would buy nothing.
    return manifests.mapInArrow(ManifestTask(cold), schemas.SEGMENTS)


# -- hot queues -----------------------------------------------------------------------


@dataclass(frozen=True)
class HotQueueTask:
    """Find each hot queue's ``[min, max)`` and lag cutoff (in a Spark task).

    The lag cutoff is the first offset allowed to be untiered: ``max - N`` for a message
    allowance, else the first offset whose storeTimestamp is at least ``reference_ts -
    allowance`` (binary search; store times grow with queue offsets). ``stored_from``
    is, for each of ``epoch_times``, the first offset stored at or after it (the same
    search): what hot proves of which rules were in force when its messages were stored.
    Queues whose consume-queue directory holds no file are left out: to the checks they
    are absent.
    """

    hot_root: str
    allowance: LagAllowance
    reference_ts: int
    epoch_times: tuple[int, ...] = ()

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        hot = HotStore(self.hot_root)
        return _map_rows(batches, schemas.HOT_QUEUES, functools.partial(self._row, hot))

    def _row(self, hot: HotStore, q: Row) -> Row | None:
        try:
            return self._inspect(hot, q)
        except TieredStoreError as exc:  # a hot file that does not parse: stop the run
            zero = {"hot_min": 0, "hot_max": 0, "lag_cutoff": 0, "stored_from": []}
            return {"topic": q["topic"], "queue_id": q["queue_id"], "error": str(exc)} | zero

    def _inspect(self, hot: HotStore, q: Row) -> Row | None:
        topic, qid = q["topic"], q["queue_id"]
        if not hot.cq_files(topic, qid):
            return None
        rng = _retry_once(lambda: hot.queue_range(topic, qid))
        return {
            "topic": topic,
            "queue_id": qid,
            "hot_min": rng.min,
            "hot_max": rng.max,
            "lag_cutoff": self._cutoff(hot, QueueKey(topic, qid), rng),
            "stored_from": [
                _stored_from(hot, QueueKey(topic, qid), rng, t) for t in self.epoch_times
            ],
            "error": None,
        }

    def _cutoff(self, hot: HotStore, queue: QueueKey, rng: HotRange) -> int:
        if self.allowance.unit is LagUnit.MESSAGES:
            return max(rng.min, rng.max - int(self.allowance.value))
        return _stored_from(hot, queue, rng, self.reference_ts - int(self.allowance.value * 1000))


def _stored_from(hot: HotStore, queue: QueueKey, rng: HotRange, ms: int) -> int:
    """The first offset of ``rng`` stored at or after ``ms`` (``rng.max``: none); binary
    search, store times growing with queue offsets. At or before time 0 (a tiering
    record's first entry may start there) every record qualifies: no record is read."""
    if ms <= 0:
        return rng.min
    lo, hi = rng.min, rng.max
    while lo < hi:
        mid = (lo + hi) // 2
        if _timestamp(hot, queue.topic, queue.queue_id, mid) < ms:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _retry_once(read: Callable[[], HotRange]) -> HotRange:
    # The broker may delete the oldest file between our listing and our read.
    try:
        return read()
    except StoreNotFoundError:
        return read()


def _timestamp(hot: HotStore, topic: str, queue_id: int, offset: int) -> int:
    unit = hot.read_units(topic, queue_id, offset, offset + 1)[0]
    return hot.read_store_timestamp(int(unit["commitlog_offset"]))


def hot_queue_frame(
    spark: SparkSession,
    queues: list[QueueKey],
    hot_root: Path,
    allowance: LagAllowance,
    reference_ts: int,
    epoch_times: tuple[int, ...] = (),
) -> DataFrame:
    """HOT_QUEUES for the hot ``queues`` the driver listed (``stored_from`` for each of
    ``epoch_times``).

    The input is spread over partitions directly (no shuffle): at most 50 queues per task
    (finding a queue's range reads its newest consume-queue file), up to four tasks per
    core.
    """
    n = _partitions(spark, len(queues), 50)
    rows = spark.sparkContext.parallelize([(q.topic, q.queue_id) for q in queues], n)
    task = HotQueueTask(str(hot_root), allowance, reference_ts, epoch_times)
    return spark.createDataFrame(rows, schema=schemas.HOT_INPUT).mapInArrow(
        task, schemas.HOT_QUEUES
    )


def tail_timestamp(hot: HotStore, queue: QueueKey, offset: int) -> int:
    """The storeTimestamp of the hot record at queue ``offset`` (driver side, two reads).

    Used for the lag in seconds of queues with an untiered tail, once the run knows where
    each tail starts.
    """
    return _timestamp(hot, queue.topic, queue.queue_id, offset)


# -- segments -------------------------------------------------------------------------


#: How a link's object findings travel to the driver (SEGMENT_FACTS ``facts``).
_OBJECT_FACT: Final = {
    FindingKind.MISSING_OBJECT: FactKind.OBJECT_UNREADABLE,
    FindingKind.SIZE_MISMATCH: FactKind.OBJECT_SIZE,
    FindingKind.DIGEST_MISMATCH: FactKind.OBJECT_DIGEST,
}


@dataclass(frozen=True)
class SegmentTask:
    """Verify links (SEGMENT_WORK rows: segments and slices alike) into SEGMENT_FACTS
    rows (in a Spark task)."""

    cold: ColdLocation
    hot_root: str
    level: Level

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        fs, root = self.cold.filesystem()
        hot = HotStore(self.hot_root)
        with HotCommitlog(hot.commitlog_files()) as hot_cl:
            run = functools.partial(_SegmentRun, fs, root, hot, hot_cl, self.level)
            yield from _map_rows(batches, schemas.SEGMENT_FACTS, lambda row: run(row).result())


class _SegmentRun:
    """The verification of one link: read what is needed, then check (pure)."""

    def __init__(
        self,
        fs: AbstractFileSystem,
        root: str,
        hot: HotStore,
        hot_cl: HotCommitlog,
        level: Level,
        seg: Row,
    ) -> None:
        self.fs, self.root, self.hot, self.hot_cl = fs, root, hot, hot_cl
        self.level = level
        self.seg = seg
        self.facts: list[Row] = []
        self.out: Row = {
            k: seg[k] for k in ("manifest_key", "topic", "queue_id", "start_offset", "end_offset")
        } | {k: seg[k] for k in ("cl_key", "cq_key", "cl_digest", "cq_digest")}
        self.out |= {"cq_digest_actual": None, "cl_digest_actual": None, "covers": seg["covers"]}

    def result(self) -> Row:
        seg = self.seg
        start, end = seg["start_offset"], seg["end_offset"]
        lo, hi = start, start
        if seg["hot_present"]:
            lo, hi = max(start, seg["hot_min"]), min(end, seg["hot_max"])
        cold_only = (min(end, seg["hot_min"]) - start) if seg["hot_present"] else end - start
        compared = bytes_compared = 0
        reads = [self._read("cq"), self._read("cl", read=self.level is Level.CONTENT)]
        cq, cl = reads[0][1], reads[1][1]
        for f in object_findings(seg["manifest_key"], start, end, [r for r, _ in reads]):
            self._fact(_OBJECT_FACT[f.kind], f.object_key or "", f.detail)
        reads = reads if self.level is Level.CONTENT else reads[:1]  # what the level reads
        if cq is not None and judged(r for r, _ in reads):  # the one rule: read whole
            units = decode_units(cq, where=seg["cq_key"])
            geo = SegmentGeometry(start, end, seg["cl_base"], seg["cl_end"])
            hot_side = self._hot_side(lo, hi) if hi > lo else None
            if hot_side is None and hi > lo:
                cold_only += hi - lo  # the broker deleted it while we looked
            claims = ManifestClaims(
                seg["min_store_timestamp"], seg["max_store_timestamp"], seg["message_count"]
            )
            found = check_segment(geo, units, cl=cl, hot=hot_side, claims=claims)
            tiles = not any(f.kind is FactKind.CQ_OFFSETS for f in found.facts)
            if content_judged(tiles):
                compared, bytes_compared = found.units_compared, found.bytes_compared
            else:  # units that do not tile point at no records to compare with hot
                hot_kinds = (FactKind.CQ_VS_HOT, FactKind.RECORD_BYTES)
                found = SegmentFacts(0, 0, [f for f in found.facts if f.kind not in hot_kinds])
            self._add_facts(found)
        return self.out | {
            "units_compared": compared,
            "bytes_compared": bytes_compared,
            "cold_only": max(cold_only, 0),
            "facts": self.facts,
        }

    def _read(self, which: str, *, read: bool = True) -> tuple[ObjectRead, bytes | None]:
        """Gather the facts of one object of the link (listed size, bytes read, digest):
        a segment's whole object, or a slice's byte range of its batch (a range read).
        Only an object listed at the link's size is read, and only if ``read``."""
        seg = self.seg
        key, listed = seg[f"{which}_key"], seg[f"{which}_listed_size"]
        at, size = seg[f"{which}_at"], seg[f"{which}_size"]
        says = "its batch index" if seg["link"] == schemas.LINK_SLICE else "its manifest"
        batch = seg["link"] == schemas.LINK_SLICE
        # A compressed object's stored size (None: plain); a slice's two spans lie in one
        # batch object, whose stored size is cl_stored_size.
        stored = seg.get("cl_stored_size" if batch else f"{which}_stored_size")
        recorded = seg[f"{which}_object_size"] if stored is None else stored
        fact = ObjectRead(key, listed, recorded, size, says=says)
        if not read or listed is None or listed != recorded:
            return fact, None
        path = ColdLocation.path(self.root, key)
        framed = stored is not None
        try:
            whole = reads_whole(at, size, recorded, framed=framed)
            data: bytes = (
                self.fs.cat_file(path) if whole else self.fs.cat_file(path, start=at, end=at + size)
            )
        except FileNotFoundError:
            data = b""
        fact, span = span_read(
            fact,
            data,
            expected=seg[f"{which}_digest"],
            framed=framed,
            stored_digest=None if batch else seg.get(f"{which}_stored_digest"),
            at=at,
            batch=batch,
        )
        if span is not None:
            self.out[f"{which}_digest_actual"] = fact.actual
        return fact, span

    def _fact(self, kind: FactKind, key: str, detail: str) -> None:
        start, end = self.seg["start_offset"], self.seg["end_offset"]
        self.facts.append(
            {
                "kind": kind.value,
                "start_offset": start,
                "end_offset": end,
                "count": end - start,
                "object_key": key,
                "detail": detail,
            }
        )

    def _add_facts(self, found: SegmentFacts) -> None:
        obj = {
            FactKind.CQ_OFFSETS: self.seg["cq_key"],
            FactKind.RECORD_FIELDS: self.seg["cl_key"],
            FactKind.RECORD_BYTES: self.seg["cl_key"],
            FactKind.CQ_VS_HOT: self.seg["cq_key"],
            FactKind.MANIFEST_FIELDS: self.seg["manifest_key"],
        }
        for f in found.facts:
            self.facts.append(
                {
                    "kind": f.kind.value,
                    "start_offset": f.range.start,
                    "end_offset": f.range.end,
                    "count": f.range.count,
                    "object_key": obj.get(f.kind),
                    "detail": f.detail,
                }
            )

    def _hot_side(self, lo: int, hi: int) -> HotSide | None:
        topic, qid = self.seg["topic"], self.seg["queue_id"]
        try:
            units = self.hot.read_units(topic, qid, lo, hi)
            records = None
            if self.level is Level.CONTENT:
                offsets = units["commitlog_offset"].astype(np.int64)
                records = self.hot_cl.gather(offsets, units["size"].astype(np.int64))
        except (OffsetOutOfRangeError, StoreNotFoundError):
            return None
        return HotSide(lo, units, records)


def segment_facts_frame(
    work: DataFrame, cold: ColdLocation, hot_root: Path, level: Level, count: int
) -> DataFrame:
    """SEGMENT_FACTS for ``work`` (SEGMENT_WORK rows, at most ``count``), verified in tasks.

    Four partitions per core (fewer only with fewer segments) keep every core busy to
    the end of the stage: segments differ a lot in size, and a straggler partition would
    serialise the tail; a store of a few large segments still gets one task per segment.
    """
    n = _partitions(work.sparkSession, count, 1)
    task = SegmentTask(cold, str(hot_root), level)
    return work.repartition(n).mapInArrow(task, schemas.SEGMENT_FACTS)
