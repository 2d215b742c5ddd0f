"""Write a synthetic RocketMQ store, byte for byte as a broker lays it out.

Used by ``tieredstore synth``, the demo, the tests and the benchmarks. Deterministic: the
same :class:`SynthSpec` (seed included) gives the same bytes.

What it writes, as the broker does: one shared commitlog rolled into fixed-size files
(an 8-byte BLANK filler ends a file when the next record plus 8 bytes does not fit), the
next commitlog file pre-created all zeros, per-queue consume-queue files (preallocated,
filler units before a queue's first offset when it starts above 0), ``checkpoint`` and
``config/topics.json``. Optional: tags, keys, user properties, ZLIB-compressed bodies
above a size (sysFlag COMPRESSED, compression-type bits 0 = ZLIB, as the Java client
does for bodies over 4 KiB), a topic longer than 127 bytes (v2 magic), IPv6 hosts, and
transaction PREPARED records (which get no consume-queue unit). Bodies are hex text or
JSON events (``body_kind``, :mod:`tieredstore.hot.synth_bodies`).

A store can be reopened and appended to (:meth:`SyntheticStore.open`) to play a live
broker: each :meth:`SyntheticStore.append` writes commitlog bytes first, then the CQ
units, then the checkpoint — the order in which a reader can observe a real broker.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tieredstore.errors import ConfigError, StoreNotFoundError
from tieredstore.formats.checkpoint import Checkpoint
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE, FILLER_SIZE
from tieredstore.formats.record import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    HostPort,
    MessageRecord,
    SysFlag,
    TransactionType,
)
from tieredstore.formats.tags import tags_code
from tieredstore.formats.topics import TopicConfig, encode_topics
from tieredstore.hot.synth_bodies import BODY_KINDS, JSON_MIN_SIZE, body_maker

__all__ = [
    "MessagePlan",
    "SynthSpec",
    "SyntheticStore",
    "Written",
    "generate_messages",
    "synthesize",
]

_SPEC_FILE = "synth.json"
_CQ_UNIT = struct.Struct(">qiq")


@dataclass(frozen=True, slots=True)
class SynthSpec:
    """What to synthesize. Sizes are bytes; times are epoch milliseconds."""

    topics: int = 4
    queues: int = 4
    messages: int = 10_000
    body_min: int = 16
    body_max: int = 1024
    commitlog_file_size: int = 4 << 20
    cq_file_size: int = 6000 * CQ_UNIT_SIZE
    start_time: int = 1_700_000_000_000
    interval_ms: int = 1
    seed: int = 0
    topic_prefix: str = "SynthTopic"
    tags: bool = True
    keys: bool = True
    properties: bool = True
    compress_over: int = 4096  # 0 disables compression
    long_topic: bool = False
    ipv6: bool = False
    prepared_every: int = 0  # every Nth message is a PREPARED half message; 0 = none
    queue_start: int = 0  # first queue offset of every queue (filler units before it)
    body_kind: str = "hex"  # "hex" or "json" (tieredstore.hot.synth_bodies.BODY_KINDS)

    def validate(self) -> SynthSpec:
        """Return the spec with the CQ file size rounded up to 20; refuse nonsense."""
        if self.topics < 1 or self.queues < 1 or self.messages < 0:
            raise ConfigError("synth needs at least one topic and queue, and messages >= 0")
        if not 0 <= self.body_min <= self.body_max:
            raise ConfigError(f"bad body size range {self.body_min}..{self.body_max}")
        if self.commitlog_file_size < self.body_max + 4096:
            raise ConfigError(
                f"commitlog file size {self.commitlog_file_size} is too small for bodies of "
                f"{self.body_max} bytes"
            )
        if self.body_kind not in BODY_KINDS:
            kinds = ", ".join(sorted(BODY_KINDS))
            raise ConfigError(f"unknown body kind {self.body_kind!r} (one of {kinds})")
        if self.body_kind == "json" and self.body_min < JSON_MIN_SIZE:
            raise ConfigError(
                f"JSON bodies need at least {JSON_MIN_SIZE} bytes, not {self.body_min}"
            )
        if self.cq_file_size < CQ_UNIT_SIZE or self.queue_start < 0:
            raise ConfigError("bad consume-queue file size or queue start")
        rounded = -(-self.cq_file_size // CQ_UNIT_SIZE) * CQ_UNIT_SIZE
        return replace(self, cq_file_size=rounded)

    def topic_names(self) -> list[str]:
        names = [f"{self.topic_prefix}{i}" for i in range(self.topics)]
        if self.long_topic:
            names[-1] = f"{self.topic_prefix}Long" + "x" * 140
        return names


@dataclass(frozen=True, slots=True)
class MessagePlan:
    """One message to store: everything but the offsets the store assigns."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str]
    sys_flag: int
    born_timestamp: int
    store_timestamp: int
    born_host: HostPort
    store_host: HostPort

    @property
    def has_cq_unit(self) -> bool:
        return (self.sys_flag & 0xC) not in (TransactionType.PREPARED, TransactionType.ROLLBACK)


@dataclass(frozen=True, slots=True)
class Written:
    """Where one message landed."""

    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    size: int
    store_timestamp: int
    tags_code: int


def _hosts(spec: SynthSpec) -> tuple[HostPort, HostPort]:
    if spec.ipv6:
        return (
            HostPort(ipaddress.IPv6Address("fd00::10"), 51000),
            HostPort(ipaddress.IPv6Address("fd00::1"), 10911),
        )
    return (
        HostPort(ipaddress.IPv4Address("10.0.0.10"), 51000),
        HostPort(ipaddress.IPv4Address("127.0.0.1"), 10911),
    )


def generate_messages(spec: SynthSpec, *, first_index: int = 0) -> Iterator[MessagePlan]:
    """Yield the spec's messages, deterministically, starting at message ``first_index``.

    Message ``i`` depends only on the spec and ``i``, so a store appended in several
    calls holds the same messages as one written at once. A body is drawn at its size
    (``body_min..body_max``) in the spec's ``body_kind``, then ZLIB-compressed (flag
    COMPRESSED) when ``compress_over`` is set and the body is longer than it.
    """
    spec = spec.validate()
    make_body = body_maker(spec.body_kind)
    topics = spec.topic_names()
    born_host, store_host = _hosts(spec)
    for i in range(first_index, first_index + spec.messages):
        rng = random.Random(spec.seed * 1_000_003 + i)
        props: dict[str, str] = {}
        if spec.keys:
            props["KEYS"] = f"key-{i} order-{i % 97}"
        props["UNIQ_KEY"] = f"{spec.seed:08X}{i:024X}"
        if spec.properties and i % 3 == 0:
            props["user-prop"] = f"value-{i}"
        if spec.tags and i % 5 != 4:
            props["TAGS"] = f"Tag{i % 7}"
        sys_flag = 0
        if spec.prepared_every and i % spec.prepared_every == spec.prepared_every - 1:
            sys_flag |= TransactionType.PREPARED
            props["TRAN_MSG"] = "true"
        body = make_body(rng, rng.randint(spec.body_min, spec.body_max))
        if spec.compress_over and len(body) > spec.compress_over:
            body = zlib.compress(body)
            sys_flag |= SysFlag.COMPRESSED
        store_ts = spec.start_time + i * spec.interval_ms
        yield MessagePlan(
            topic=topics[rng.randrange(len(topics))],
            queue_id=rng.randrange(spec.queues),
            body=body,
            properties=props,
            sys_flag=sys_flag,
            born_timestamp=store_ts - rng.randint(0, 5),
            store_timestamp=store_ts,
            born_host=born_host,
            store_host=store_host,
        )


def _cq_path(root: Path, spec: SynthSpec, topic: str, queue_id: int, base: int) -> Path:
    """The consume-queue file at ``base``, created (zeros, fillers below the queue's
    start) if absent."""
    qdir = root / "consumequeue" / topic / str(queue_id)
    path = qdir / f"{base:020d}"
    if not path.exists():
        qdir.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:
            fh.truncate(spec.cq_file_size)
            start = spec.queue_start * CQ_UNIT_SIZE
            if base <= start < base + spec.cq_file_size and start > base:
                filler = _CQ_UNIT.pack(0, FILLER_SIZE, 0)
                fh.write(filler * ((start - base) // CQ_UNIT_SIZE))
    return path


def _write_units(root: Path, spec: SynthSpec, placed: list[Written]) -> None:
    """Write the consume-queue units of ``placed``, one pwrite per queue and file."""
    by_queue: dict[tuple[str, int], list[Written]] = {}
    for w in placed:
        by_queue.setdefault((w.topic, w.queue_id), []).append(w)
    fs = spec.cq_file_size
    for (topic, qid), items in by_queue.items():
        i = 0
        while i < len(items):
            pos = items[i].queue_offset * CQ_UNIT_SIZE
            base = pos - pos % fs
            buf = bytearray()
            while i < len(items) and items[i].queue_offset * CQ_UNIT_SIZE < base + fs:
                w = items[i]
                buf += _CQ_UNIT.pack(w.commitlog_offset, w.size, w.tags_code)
                i += 1
            fd = os.open(_cq_path(root, spec, topic, qid, base), os.O_WRONLY)
            try:
                os.pwrite(fd, buf, pos - base)
            finally:
                os.close(fd)


class SyntheticStore:
    """A synthetic store open for appending. Use :meth:`create` or :meth:`open`."""

    def __init__(self, root: Path, spec: SynthSpec, written: int) -> None:
        self.root = root
        self.spec = spec
        self.written = written  # messages generated so far (next message index)
        self._cl_pos = 0
        self._next_offset: dict[tuple[str, int], int] = {}
        self._last_store_ts = spec.start_time

    # -- lifecycle -----------------------------------------------------------------
    @classmethod
    def create(cls, root: Path | str, spec: SynthSpec) -> SyntheticStore:
        """Create an empty store at ``root`` (which must be empty or absent)."""
        root = Path(root)
        spec = spec.validate()
        if root.exists() and any(root.iterdir()):
            raise ConfigError(f"synth output directory {root} is not empty")
        (root / "commitlog").mkdir(parents=True)
        (root / "consumequeue").mkdir()
        (root / "config").mkdir()
        names = spec.topic_names()
        topics = {n: TopicConfig(n, spec.queues, spec.queues) for n in names}
        (root / "config" / "topics.json").write_bytes(encode_topics(topics))
        store = cls(root, spec, 0)
        for name in names:
            for q in range(spec.queues):
                store._next_offset[(name, q)] = spec.queue_start
        store._ensure_cl_file(0)
        store._write_checkpoint()
        store._save_state()
        return store

    @classmethod
    def open(cls, root: Path | str) -> SyntheticStore:
        """Reopen a store made by :meth:`create` to append more messages to it."""
        root = Path(root)
        try:
            state = json.loads((root / _SPEC_FILE).read_text())
            store = cls(root, SynthSpec(**state["spec"]), int(state["written"]))
            store._cl_pos = int(state["commitlog_end"])
            store._last_store_ts = int(state["last_store_timestamp"])
            for key, offset in state["next_offsets"]:
                store._next_offset[(str(key[0]), int(key[1]))] = int(offset)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StoreNotFoundError(
                f"not a synthetic store (no valid {_SPEC_FILE}): {exc}", where=str(root)
            ) from exc
        return store

    def _save_state(self) -> None:
        state = {
            "spec": asdict(self.spec),
            "written": self.written,
            "commitlog_end": self._cl_pos,
            "last_store_timestamp": self._last_store_ts,
            "next_offsets": [[list(k), v] for k, v in sorted(self._next_offset.items())],
        }
        tmp = self.root / f".{_SPEC_FILE}.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, self.root / _SPEC_FILE)

    @property
    def last_store_time(self) -> int:
        """The store time of the last message written (the spec's start before any)."""
        return self._last_store_ts

    # -- writing -------------------------------------------------------------------
    def append(
        self,
        count: int | None = None,
        *,
        store_time: int | None = None,
        interval_ms: int | None = None,
        queues: Sequence[tuple[str, int]] | None = None,
    ) -> int:
        """Append the next ``count`` messages of the spec (default: ``spec.messages``).

        ``queues`` (``(topic, queue id)`` pairs) places the batch's messages one each on
        the queues named, in order (a queue named twice gets two; ``count`` defaults to
        their number and must match it), instead of the spec's round robin.

        ``store_time`` (epoch ms) places this batch in time, as a live broker would
        stamp it: its messages get store timestamps ``store_time + j * interval_ms``
        (``j`` counted within the batch; born timestamps keep their offset) instead of
        the spec's ``start_time + index * interval_ms``. Everything else about the
        messages is unchanged. A store time before the last one written raises
        ConfigError (a broker's clock does not run backwards here). ``interval_ms``
        spaces this batch only (default: the spec's).

        Commitlog bytes are written first, then the consume-queue units, then the
        checkpoint. Returns the number of messages appended.
        """
        if count is None:
            count = self.spec.messages if queues is None else len(queues)
        n = count
        if queues is not None and n != len(queues):
            raise ConfigError(f"{n} messages for {len(queues)} queues", where=str(self.root))
        plans = list(generate_messages(replace(self.spec, messages=n), first_index=self.written))
        if queues is not None:
            plans = [
                replace(p, topic=t, queue_id=q) for p, (t, q) in zip(plans, queues, strict=True)
            ]
        if store_time is not None:
            step = self.spec.interval_ms if interval_ms is None else interval_ms
            plans = self._restamp(plans, store_time, step)
        placed = self._write_commitlog(plans)
        _write_units(self.root, self.spec, placed)
        self.written += n
        self._write_checkpoint()
        self._save_state()
        return n

    def _restamp(self, plans: list[MessagePlan], store_time: int, step: int) -> list[MessagePlan]:
        if store_time < self._last_store_ts:
            raise ConfigError(
                f"store time {store_time} is before the last store time {self._last_store_ts}",
                where=str(self.root),
            )
        return [
            replace(
                p,
                store_timestamp=store_time + j * step,
                born_timestamp=store_time + j * step - (p.store_timestamp - p.born_timestamp),
            )
            for j, p in enumerate(plans)
        ]

    def _write_commitlog(self, plans: list[MessagePlan]) -> list[Written]:
        size = self.spec.commitlog_file_size
        placed: list[Written] = []
        chunk = bytearray()
        chunk_pos = self._cl_pos
        for plan in plans:
            key = (plan.topic, plan.queue_id)
            qoff = self._next_offset.setdefault(key, self.spec.queue_start)
            record = MessageRecord.build(
                topic=plan.topic,
                body=plan.body,
                queue_id=plan.queue_id,
                queue_offset=qoff if plan.has_cq_unit else 0,
                physical_offset=self._cl_pos,
                store_timestamp=plan.store_timestamp,
                born_timestamp=plan.born_timestamp,
                properties=plan.properties,
                sys_flag=plan.sys_flag,
                born_host=plan.born_host,
                store_host=plan.store_host,
            )
            total = record.total_size
            remaining = size - self._cl_pos % size
            if total + END_FILE_MIN_BLANK_LENGTH > remaining:
                chunk += struct.pack(">ii", remaining, BLANK_MAGIC_CODE)
                self._flush_cl(chunk_pos, chunk)
                self._cl_pos += remaining
                chunk, chunk_pos = bytearray(), self._cl_pos
                record = record.with_offsets(
                    queue_offset=record.queue_offset, physical_offset=self._cl_pos
                )
            chunk += record.encode()
            if plan.has_cq_unit:
                code = tags_code(plan.properties.get("TAGS"))
                placed.append(
                    Written(
                        plan.topic,
                        plan.queue_id,
                        qoff,
                        self._cl_pos,
                        total,
                        plan.store_timestamp,
                        code,
                    )
                )
                self._next_offset[key] = qoff + 1
            self._cl_pos += total
            self._last_store_ts = plan.store_timestamp
        self._flush_cl(chunk_pos, chunk)
        return placed

    def _ensure_cl_file(self, base: int) -> Path:
        # The broker keeps the next file pre-created (all zeros) ahead of the writer.
        size = self.spec.commitlog_file_size
        for b in (base, base + size):
            path = self.root / "commitlog" / f"{b:020d}"
            if not path.exists():
                with path.open("wb") as fh:
                    fh.truncate(size)
        return self.root / "commitlog" / f"{base:020d}"

    def _flush_cl(self, pos: int, data: bytearray) -> None:
        if not data:
            return
        size = self.spec.commitlog_file_size
        base = pos - pos % size
        path = self._ensure_cl_file(base)
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, data, pos - base)
        finally:
            os.close(fd)

    def _write_checkpoint(self) -> None:
        cp = Checkpoint(
            physic_msg_timestamp=self._last_store_ts,
            logics_msg_timestamp=self._last_store_ts,
            index_msg_timestamp=self._last_store_ts,
            master_flushed_offset=0,
            confirm_phy_offset=self._cl_pos,
        )
        path = self.root / "checkpoint"
        with path.open("r+b" if path.exists() else "wb") as fh:
            fh.write(cp.encode())
            fh.truncate(4096)

    def set_checkpoint(self, physic_msg_timestamp: int) -> None:
        """Overwrite the flushed timestamp (to test the durability guard)."""
        path = self.root / "checkpoint"
        with path.open("r+b") as fh:
            fh.write(struct.pack(">q", physic_msg_timestamp))

    def write_torn_tail(self, nbytes: int = 40) -> None:
        """Write the first ``nbytes`` of a record after the end, with no CQ unit."""
        plan = next(generate_messages(replace(self.spec, messages=1), first_index=self.written))
        record = MessageRecord.build(
            topic=plan.topic,
            body=plan.body,
            queue_id=plan.queue_id,
            queue_offset=0,
            physical_offset=self._cl_pos,
            store_timestamp=plan.store_timestamp,
        )
        data = record.encode()
        size = self.spec.commitlog_file_size
        if self._cl_pos % size + len(data) + END_FILE_MIN_BLANK_LENGTH <= size:
            self._flush_cl(self._cl_pos, bytearray(data[:nbytes]))


def synthesize(root: Path | str, spec: SynthSpec) -> SyntheticStore:
    """Create a store at ``root`` and write ``spec.messages`` messages into it."""
    store = SyntheticStore.create(root, spec)
    store.append()
    return store
