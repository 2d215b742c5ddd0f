"""Conformance checks: a store written by a real RocketMQ broker against what it was sent.

Used by the live broker tests (``tests/broker/test_conformance.py``, store read while
the broker runs and again after it stopped) and by the offline golden-store tests
(``tests/tieredstore/hot/test_golden_store.py``). Every check reads the store only through the
tieredstore scanner (``HotStore``) and compares with the :class:`Manifest`: the
producer's messages and the broker's own answers (SendResult, per-queue offsets).

Each check collects every mismatch before failing, so one run reports them all, each
naming the queue and offset (or file and byte) it is about.
"""

from __future__ import annotations

import hashlib
import struct
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tests.support.broker.manifest import Manifest
from tests.support.broker.traffic import (
    COMPRESS_THRESHOLD,
    DELAY_LEVEL_MS,
    RETRY_TOPIC,
    USER_TOPICS,
    ExpectedMessage,
    Kind,
)
from tieredstore.formats.checkpoint import Checkpoint
from tieredstore.formats.msgid import offset_msg_id
from tieredstore.formats.record import (
    BLANK_MAGIC_CODE,
    CompressionType,
    MagicCode,
    MessageRecord,
    TransactionType,
    body_crc,
)
from tieredstore.formats.tags import tags_code
from tieredstore.hot.store import HotRange, HotStore, QueueKey

__all__ = [
    "HALF_TOPIC",
    "OP_HALF_TOPIC",
    "SCHEDULE_TOPIC",
    "TIMER_TOPIC",
    "Located",
    "Problems",
    "StoreIndex",
    "check_checkpoint",
    "check_commitlog",
    "check_consume_queue_files",
    "check_messages",
    "check_offsets",
    "check_records",
    "check_topics",
    "index_store",
    "op_half_offsets",
]

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"

#: Properties the client or broker add on their own (never user properties).
SYSTEM_PROPERTIES = frozenset(
    {
        "MSG_REGION", "UNIQ_KEY", "CLUSTER", "WAIT", "TRACE_ON", "TAGS", "KEYS", "DELAY",
        "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP", "__transactionId__",
        "TIMER_DELAY_MS", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES", "ORIGIN_MESSAGE_ID", "RETRY_TOPIC", "CORRECTION_FLAG",
        "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS",
    }
)  # fmt: skip
_MAX_REPORTED = 40


class Problems:
    """Collects mismatches; :meth:`raise_if_any` fails with all of them, one a line."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.items: list[str] = []

    def check(self, ok: bool, message: str) -> None:
        if not ok:
            self.items.append(message)

    def equal(self, actual: object, expected: object, where: str, field: str) -> None:
        if actual != expected:
            self.items.append(f"{where}: {field} is {actual!r}, expected {expected!r}")

    def raise_if_any(self) -> None:
        if self.items:
            shown = "\n  ".join(self.items[:_MAX_REPORTED])
            more = len(self.items) - _MAX_REPORTED
            tail = f"\n  ... and {more} more" if more > 0 else ""
            raise AssertionError(f"{len(self.items)} problem(s) with {self.what}:\n  {shown}{tail}")


@dataclass(frozen=True, slots=True)
class Located:
    """A record reached through a consume-queue unit."""

    queue: QueueKey
    queue_offset: int
    unit_tags_code: int
    record: MessageRecord

    def __str__(self) -> str:
        return f"{self.queue}@{self.queue_offset}"


@dataclass(frozen=True, slots=True)
class StoreIndex:
    """Every record of every queue, by queue and by client message id (UNIQ_KEY)."""

    ranges: Mapping[QueueKey, HotRange]
    records: tuple[Located, ...]
    #: What :func:`index_store` found wrong with single records (see :func:`check_records`).
    problems: tuple[str, ...]

    def by_uniq_key(self) -> dict[str, list[Located]]:
        out: dict[str, list[Located]] = defaultdict(list)
        for loc in self.records:
            key = loc.record.properties.get("UNIQ_KEY")
            if key is not None:
                out[key].append(loc)
        return out


def _window_check(p: Problems, rec: MessageRecord, where: str, manifest: Manifest) -> None:
    lo, hi = manifest.window_start_ms, manifest.window_end_ms
    p.check(
        lo <= rec.born_timestamp <= rec.store_timestamp <= hi,
        f"{where}: born {rec.born_timestamp} / store {rec.store_timestamp} not ordered "
        f"within the run's window [{lo}, {hi}]",
    )


def _check_unit_and_record(
    p: Problems, loc: Located, raw: bytes, commitlog_offset: int, size: int, m: Manifest
) -> None:
    rec, where = loc.record, str(loc)
    p.equal(rec.topic, loc.queue.topic, where, "topic")
    p.equal(rec.queue_id, loc.queue.queue_id, where, "queueId")
    p.equal(rec.queue_offset, loc.queue_offset, where, "queueOffset")
    p.equal(rec.physical_offset, commitlog_offset, where, "physicalOffset vs CQ unit")
    p.equal(rec.total_size, size, where, "totalSize vs CQ unit size")
    p.equal(body_crc(rec.body), rec.body_crc, where, "crc32(body) & 0x7FFFFFFF vs bodyCRC")
    p.check(rec.has_cq_unit, f"{where}: transaction type {rec.transaction_type.name} in a CQ")
    p.equal(str(rec.store_host), m.store_host, where, "storeHost")
    long_topic = len(rec.topic.encode()) > 127
    p.equal(rec.magic, MagicCode.V2 if long_topic else MagicCode.V1, where, "magic")
    p.check(rec.encode() == raw, f"{where}: decode → encode does not give the stored bytes")
    _window_check(p, rec, where, m)
    if loc.queue.topic == SCHEDULE_TOPIC:
        # The schedule queue's tagsCode is the delivery time, not a tags hash.
        level = int(rec.properties.get("DELAY", "0"))
        p.equal(loc.queue.queue_id, level - 1, where, "schedule queue id vs DELAY level")
        expected = rec.store_timestamp + DELAY_LEVEL_MS.get(level, 0)
        p.equal(loc.unit_tags_code, expected, where, "tagsCode (storeTimestamp + delay)")
    else:
        p.equal(loc.unit_tags_code, tags_code(rec.tags), where, "tagsCode (hash of TAGS)")


def index_store(store: HotStore, manifest: Manifest) -> StoreIndex:
    """Read every unit of every queue in ``[hot min, hot max)`` and the record behind it.

    Checks each record against its unit and itself on the way — topic, queue id and
    offset, physical offset, size, body CRC, byte-exact re-encoding, store host, magic
    version, timestamps, and the unit's tagsCode — and keeps what it found wrong in
    ``problems`` (reported by :func:`check_records`) so the other checks still run.
    """
    p = Problems("consume queues and the records they point at")
    ranges: dict[QueueKey, HotRange] = {}
    records: list[Located] = []
    for queue in store.queues():
        rng = store.queue_range(queue.topic, queue.queue_id)
        ranges[queue] = rng
        units = store.read_units(queue.topic, queue.queue_id, rng.min, rng.max)
        raws = store.read_records_bytes(units["commitlog_offset"], units["size"])
        for i, (unit, raw) in enumerate(zip(units, raws, strict=True)):
            offset = rng.min + i
            # read_message is the API under test; the bulk bytes check it byte for byte.
            rec = store.read_message(queue.topic, queue.queue_id, offset)
            loc = Located(queue, offset, int(unit["tags_code"]), rec)
            _check_unit_and_record(
                p, loc, raw, int(unit["commitlog_offset"]), int(unit["size"]), manifest
            )
            records.append(loc)
    return StoreIndex(ranges, tuple(records), tuple(p.items))


def check_records(index: StoreIndex) -> None:
    """Fail with the per-record problems :func:`index_store` found."""
    p = Problems("consume queues and the records they point at")
    p.items.extend(index.problems)
    p.check(bool(index.records), "the store holds no records at all")
    p.raise_if_any()


# -- messages --------------------------------------------------------------------------
def _expected_topics(m: ExpectedMessage) -> Counter[str]:
    """Where the broker writes a message: the record for each topic it passes through."""
    if m.kind is Kind.DELAY:
        return Counter({SCHEDULE_TOPIC: 1, m.topic: 1})
    if m.kind is Kind.TIMER:
        return Counter({TIMER_TOPIC: 1, m.topic: 1})
    if m.kind is Kind.TX_COMMIT:
        return Counter({HALF_TOPIC: 1, m.topic: 1})
    if m.kind is Kind.TX_ROLLBACK:
        return Counter({HALF_TOPIC: 1})
    if m.fails_once:
        return Counter({m.topic: 1, SCHEDULE_TOPIC: 1, RETRY_TOPIC: 1})
    return Counter({m.topic: 1})


def _check_content(p: Problems, loc: Located, m: ExpectedMessage) -> None:
    """Body, tags, keys and user properties survive every copy the broker makes."""
    rec, where = loc.record, f"{loc} (message #{m.index} {m.msg_id})"
    body = rec.decompressed_body()
    p.equal(len(body), m.body_length, where, "decompressed body length")
    p.equal(hashlib.sha256(body).hexdigest(), m.body_sha256, where, "decompressed body sha256")
    compressed = m.body_length >= COMPRESS_THRESHOLD
    p.equal(rec.compressed, compressed, where, f"compressed flag (body {m.body_length} B)")
    if rec.compressed:
        p.equal(rec.compression_type, CompressionType.ZLIB, where, "compression type")
        p.equal(rec.sys_flag & 0x700, 0x300, where, "sysFlag compression bits")
    p.equal(rec.tags, m.tags, where, "TAGS")
    p.equal(tuple(rec.keys), m.keys, where, "KEYS")
    props = rec.properties
    for name, value in m.properties.items():
        p.equal(props.get(name), value, where, f"user property {name!r}")
    extra = set(props) - set(m.properties) - SYSTEM_PROPERTIES
    p.check(not extra, f"{where}: unexpected properties {sorted(extra)}")


def _one(p: Problems, copies: list[Located], topic: str, m: ExpectedMessage) -> Located | None:
    found = [c for c in copies if c.queue.topic == topic]
    if len(found) != 1:
        p.items.append(f"message #{m.index} {m.msg_id}: {len(found)} records in {topic}")
        return None
    return found[0]


def _check_sent_record(p: Problems, loc: Located, m: ExpectedMessage, queue: QueueKey) -> None:
    """The record the SendResult describes: its queue, offset and offset message id."""
    where = f"message #{m.index} {m.msg_id}"
    p.equal(loc.queue, queue, where, "queue of the record the SendResult names")
    p.equal(loc.queue_offset, m.queue_offset, where, "queue offset vs SendResult")
    if m.offset_msg_id:
        p.equal(offset_msg_id(loc.record), m.offset_msg_id, where, "offsetMsgId vs SendResult")


def _check_routed(p: Problems, sys_copy: Located, m: ExpectedMessage, real_topic: str) -> None:
    props, where = sys_copy.record.properties, str(sys_copy)
    p.equal(props.get("REAL_TOPIC"), real_topic, where, "REAL_TOPIC")
    p.equal(props.get("REAL_QID"), str(m.queue_id), where, "REAL_QID")


def _check_one_message(p: Problems, m: ExpectedMessage, copies: list[Located]) -> None:
    where = f"message #{m.index} {m.msg_id} ({m.kind.value} to {m.topic})"
    p.equal(m.send_status, "SEND_OK", where, "send status")
    got = Counter(c.queue.topic for c in copies)
    if got != _expected_topics(m):
        p.items.append(f"{where}: records per topic {dict(got)}, expected "
                       f"{dict(_expected_topics(m))}")  # fmt: skip
        return
    for c in copies:
        _check_content(p, c, m)
    final = QueueKey(m.topic, m.queue_id)
    if m.kind is Kind.NORMAL:
        sent = _one(p, copies, m.topic, m)
        if sent is not None:
            _check_sent_record(p, sent, m, final)
            p.equal(sent.record.transaction_type, TransactionType.NOT_TYPE, where, "tx type")
            p.equal(sent.record.reconsume_times, 0, where, "reconsumeTimes")
        if m.fails_once:
            _check_retried(p, m, copies)
        return
    first_topic = {Kind.DELAY: SCHEDULE_TOPIC, Kind.TIMER: TIMER_TOPIC}.get(m.kind, HALF_TOPIC)
    first_queue = m.delay - 1 if m.kind is Kind.DELAY else 0
    first = _one(p, copies, first_topic, m)
    if first is None:
        return
    _check_sent_record(p, first, m, QueueKey(first_topic, first_queue))
    _check_routed(p, first, m, m.topic)
    if first_topic == HALF_TOPIC:
        p.equal(first.record.transaction_type, TransactionType.NOT_TYPE, where, "half tx type")
    if m.kind is Kind.TX_ROLLBACK:
        return
    delivered = _one(p, copies, m.topic, m)
    if delivered is None:
        return
    p.equal(delivered.queue, final, where, "delivered queue (REAL_QID)")
    if m.kind is Kind.TX_COMMIT:
        p.equal(delivered.record.transaction_type, TransactionType.COMMIT, where, "tx type")
    elif m.kind is Kind.DELAY:
        p.check(
            delivered.record.store_timestamp >= first.unit_tags_code,
            f"{where}: delivered at {delivered.record.store_timestamp}, "
            f"before its delivery time {first.unit_tags_code}",
        )
    else:
        out_ms = int(first.record.properties.get("TIMER_OUT_MS", "0"))
        p.check(
            delivered.record.store_timestamp >= out_ms > first.record.store_timestamp - 1000,
            f"{where}: timer fired at {delivered.record.store_timestamp}, TIMER_OUT_MS {out_ms}",
        )


def _check_retried(p: Problems, m: ExpectedMessage, copies: list[Located]) -> None:
    """A message the consumer failed once: parked in the schedule topic, then retried."""
    where = f"message #{m.index} {m.msg_id} (failed once)"
    parked = _one(p, copies, SCHEDULE_TOPIC, m)
    retried = _one(p, copies, RETRY_TOPIC, m)
    if parked is None or retried is None:
        return
    p.equal(parked.queue.queue_id, 0, where, "schedule queue (delay level 1)")
    for loc in (parked, retried):
        props = loc.record.properties
        p.equal(props.get("RETRY_TOPIC"), m.topic, str(loc), "RETRY_TOPIC")
        p.equal(props.get("ORIGIN_MESSAGE_ID"), m.offset_msg_id, str(loc), "ORIGIN_MESSAGE_ID")
        p.equal(loc.record.reconsume_times, 1, str(loc), "reconsumeTimes")
    p.equal(parked.record.properties.get("REAL_TOPIC"), RETRY_TOPIC, str(parked), "REAL_TOPIC")
    p.equal(retried.record.magic, MagicCode.V2, str(retried), "magic (topic > 127 bytes)")


def check_messages(index: StoreIndex, manifest: Manifest) -> None:
    """Every produced message is where the broker said, exactly once per topic it passes
    through, with its body, tags, keys and properties; nothing else is in the store.
    """
    p = Problems("produced messages")
    by_key = index.by_uniq_key()
    for m in manifest.messages:
        _check_one_message(p, m, by_key.get(m.msg_id, []))
    known = {m.msg_id for m in manifest.messages}
    for key, copies in by_key.items():
        p.check(key in known, f"{copies[0]}: record with UNIQ_KEY {key} nobody sent")
    for loc in index.records:
        if "UNIQ_KEY" not in loc.record.properties:
            p.equal(loc.queue.topic, OP_HALF_TOPIC, str(loc), "topic of a record without UNIQ_KEY")
    _check_op_records(p, index, manifest)
    p.raise_if_any()


def op_half_offsets(records: Iterable[MessageRecord]) -> set[int]:
    """Half-queue offsets the broker's op records mark as done (commit or rollback).

    An op record (RMQ_SYS_TRANS_OP_HALF_TOPIC, tag ``d``) has no UNIQ_KEY; its body
    lists the half-queue offsets it settles, each followed by a comma (``b"0,1,"``).
    The broker batches them, so one op record may settle several transactions.
    """
    out: set[int] = set()
    for rec in records:
        out.update(int(x) for x in rec.body.decode("ascii").split(",") if x)
    return out


def _check_op_records(p: Problems, index: StoreIndex, manifest: Manifest) -> None:
    ops = [loc for loc in index.records if loc.queue.topic == OP_HALF_TOPIC]
    for loc in ops:
        p.equal(loc.record.tags, "d", str(loc), "op record TAGS")
    tx = {m.queue_offset for m in manifest.messages if m.kind in (Kind.TX_COMMIT, Kind.TX_ROLLBACK)}
    p.equal(op_half_offsets(loc.record for loc in ops), tx, OP_HALF_TOPIC, "settled half offsets")


# -- offsets, files, metadata ------------------------------------------------------------
def check_offsets(store: HotStore, manifest: Manifest) -> None:
    """The scanner's hot [min, max) of every queue equals what the broker reported."""
    p = Problems("hot min/max offsets vs the broker's own")
    p.check(bool(manifest.broker_offsets), "the manifest holds no broker offsets")
    for o in manifest.broker_offsets:
        got = store.queue_range(o.topic, o.queue_id)
        p.equal((got.min, got.max), (o.min, o.max), f"{o.topic}/{o.queue_id}", "[min, max)")
    reported = {QueueKey(o.topic, o.queue_id) for o in manifest.broker_offsets}
    for queue in store.queues():
        p.check(queue in reported, f"{queue}: a queue on disk the broker was not asked about")
    p.raise_if_any()


def _data_files(store: HotStore, offsets: Iterable[int]) -> list[int]:
    files = store.commitlog_files()
    used = {f.base for off in offsets if (f := files.find(off)) is not None}
    return sorted(used)


def check_commitlog(
    store: HotStore, index: StoreIndex, manifest: Manifest, *, min_data_files: int
) -> None:
    """A sequential commitlog scan finds exactly the records the consume queues point
    at; every full file ends with the BLANK filler; file names and sizes are as set.
    """
    p = Problems("the commitlog")
    scanned = list(store.scan_commitlog())
    for s in scanned:
        p.equal(s.record.physical_offset, s.offset, f"commitlog@{s.offset}", "physicalOffset")
    by_cq = {loc.record.physical_offset for loc in index.records}
    by_scan = {s.offset for s in scanned}
    p.check(
        by_cq == by_scan,
        f"scan and consume queues disagree: {len(by_scan - by_cq)} records only in the scan "
        f"(first {sorted(by_scan - by_cq)[:5]}), {len(by_cq - by_scan)} only via CQ "
        f"(first {sorted(by_cq - by_scan)[:5]})",
    )
    files = store.commitlog_files().files
    size = manifest.commitlog_file_size
    for n, f in enumerate(files):
        p.equal(f.path.name, f"{n * size:020d}", str(f.path), "file name")
        p.equal(f.size, size, str(f.path), "file size")
    data_files = _data_files(store, by_scan)
    p.check(
        len(data_files) >= min_data_files,
        f"records span {len(data_files)} commitlog files, expected at least {min_data_files}",
    )
    listing = store.commitlog_files()
    ends: dict[int, int] = {}
    for s in scanned:
        holder = listing.find(s.offset)
        if holder is not None:
            ends[holder.base] = max(ends.get(holder.base, 0), s.offset + s.record.total_size)
    for base in data_files:
        end = ends[base]
        tail = store.read_record_bytes(end, 8) if end + 8 <= base + size else b""
        remaining, magic = struct.unpack(">ii", tail) if len(tail) == 8 else (0, 0)
        where = f"commitlog@{end} (file {base:020d})"
        if base == data_files[-1]:
            p.equal((remaining, magic), (0, 0), where, "bytes after the last record")
        else:
            p.equal((remaining, magic), (base + size - end, BLANK_MAGIC_CODE), where, "end filler")
    p.raise_if_any()


def check_consume_queue_files(store: HotStore, manifest: Manifest, *, min_files: int) -> None:
    """CQ file names are multiples of the file size, sizes are as set, and the busiest
    queue rolled into at least ``min_files`` files.
    """
    p = Problems("consume-queue files")
    size = manifest.cq_file_size
    most = 0
    for queue in store.queues():
        files = store.cq_files(queue.topic, queue.queue_id).files
        most = max(most, len(files))
        for f in files:
            p.equal(f.base % size, 0, str(f.path), "file base modulo file size")
            p.equal(f.size, size, str(f.path), "file size")
    p.check(most >= min_files, f"the busiest queue has {most} CQ files, expected {min_files}+")
    p.raise_if_any()


def check_topics(store: HotStore) -> None:
    """``config/topics.json`` holds the user topics as created and the retry topic."""
    p = Problems("config/topics.json")
    topics = store.topics()
    for name, queues in USER_TOPICS.items():
        cfg = topics.get(name)
        if cfg is None:
            p.items.append(f"topic {name} missing")
            continue
        p.equal((cfg.read_queue_nums, cfg.write_queue_nums), (queues, queues), name, "queues")
        p.equal(cfg.perm, 6, name, "perm")
    p.check(RETRY_TOPIC in topics, f"retry topic {RETRY_TOPIC} missing")
    p.raise_if_any()


def check_checkpoint(
    checkpoint: Checkpoint, index: StoreIndex, manifest: Manifest, *, clean: bool
) -> None:
    """The checkpoint decodes to plausible values.

    The broker writes it on its own schedule, so while it runs a field may still be 0;
    after a clean stop the flush and dispatch timestamps are set and lie within the
    store timestamps of the records. The index timestamp stays 0 until an index file
    fills up; the two offsets are 0 for a broker without HA/controller.
    """
    p = Problems("the checkpoint")
    stamps = [loc.record.store_timestamp for loc in index.records]
    lo, hi = min(stamps), max(stamps)
    for name, value in (
        ("physicMsgTimestamp", checkpoint.physic_msg_timestamp),
        ("logicsMsgTimestamp", checkpoint.logics_msg_timestamp),
    ):
        if clean or value:
            p.check(lo <= value <= hi, f"{name} {value} outside the records' [{lo}, {hi}]")
    index_ts = checkpoint.index_msg_timestamp
    p.check(
        index_ts == 0 or manifest.window_start_ms <= index_ts <= manifest.window_end_ms,
        f"indexMsgTimestamp {index_ts} outside the run's window",
    )
    end = max(loc.record.physical_offset + loc.record.total_size for loc in index.records)
    for name, value in (
        ("masterFlushedOffset", checkpoint.master_flushed_offset),
        ("confirmPhyOffset", checkpoint.confirm_phy_offset),
    ):
        p.check(0 <= value <= end, f"{name} {value} outside [0, {end}]")
    p.raise_if_any()
