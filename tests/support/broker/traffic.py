"""The traffic the broker tests send, and what the broker answered for each message.

:func:`make_plan` builds a deterministic list of :class:`PlannedMessage` (seeded); the
Java ``BrokerTool produce`` sends it and writes one SendResult line per message, which
:func:`read_results` pairs back into :class:`ExpectedMessage` — the per-message facts
the conformance checks (and the golden manifest) hold the store to.

What the traffic covers: three plain topics with four queues each (one named with the
longest topic a 5.x broker accepts from a producer, 127 characters), tags (none, ASCII,
non-ASCII, outside the BMP, long), keys, user properties, bodies from 1 byte (the client
refuses empty bodies) to ~100 KB, bodies at and around the client's 4 KiB compression
threshold, delay-level messages, timer (``TIMER_DELAY_MS``) messages, committed and
rolled-back transactional messages, and messages a consumer fails once so the broker
writes them to a retry topic longer than 127 characters (magic v2).
"""

from __future__ import annotations

import base64
import enum
import hashlib
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "COMPRESS_THRESHOLD",
    "DELAY_LEVEL_MS",
    "LONG_TOPIC",
    "QUEUES_PER_TOPIC",
    "RETRY_GROUP",
    "RETRY_SOURCE_TOPIC",
    "RETRY_TAG",
    "RETRY_TOPIC",
    "USER_TOPICS",
    "ExpectedMessage",
    "Kind",
    "PlannedMessage",
    "make_plan",
    "read_results",
    "write_plan",
]

ORDERS_TOPIC = "TieredStoreOrders"
PAYMENTS_TOPIC = "TieredStorePayments"
#: 127 characters: the longest topic a producer may use (TopicValidator), v1 record.
LONG_TOPIC = ("TieredStore_Long_Topic_" + "x" * 127)[:127]
RETRY_SOURCE_TOPIC = "TieredStoreRetrySource"
#: A consumer group this long gives a retry topic over 127 characters (a v2 record).
RETRY_GROUP = ("GID_tieredstore_conformance_" + "g" * 150)[:150]
RETRY_TOPIC = "%RETRY%" + RETRY_GROUP
RETRY_TAG = "retry"
QUEUES_PER_TOPIC = 4
USER_TOPICS: Mapping[str, int] = {
    ORDERS_TOPIC: QUEUES_PER_TOPIC,
    PAYMENTS_TOPIC: QUEUES_PER_TOPIC,
    LONG_TOPIC: QUEUES_PER_TOPIC,
    RETRY_SOURCE_TOPIC: QUEUES_PER_TOPIC,
}
#: The Java client compresses bodies of at least this many bytes (compressMsgBodyOverHowmuch).
COMPRESS_THRESHOLD = 4096
#: The broker's default messageDelayLevel "1s 5s 10s 30s 1m ..." (first levels).
DELAY_LEVEL_MS: Mapping[int, int] = {1: 1000, 2: 5000, 3: 10000}
TIMER_DELAY_MS = 1500

_TAGS = ("TagA", "TagB", "order-created", "支付成功", "tag😀", "t" * 200)
_PROP_NAMES = ("userId", "region", "trace_tag", "prop-ü", "p_long")
_WORDS = ("alpha", "beta", "gamma", "delta", "order", "payment", "ключ", "数据", "queue")


class Kind(enum.Enum):
    """How a message is sent (BrokerTool's ``kind`` column)."""

    NORMAL = "normal"
    DELAY = "delay"
    TIMER = "timer"
    TX_COMMIT = "tx_commit"
    TX_ROLLBACK = "tx_rollback"
    #: Sent with ``send(Collection)``; ``delay`` holds the batch id (BrokerTool produce).
    BATCH = "batch"


@dataclass(frozen=True, slots=True)
class PlannedMessage:
    """One message to send. ``delay`` is the level for DELAY, milliseconds for TIMER."""

    index: int
    kind: Kind
    topic: str
    tags: str | None
    keys: tuple[str, ...]
    properties: Mapping[str, str]
    body: bytes
    delay: int = 0

    @property
    def fails_once(self) -> bool:
        """Whether the retry consumer fails this message once (see BrokerTool fail-once)."""
        return self.topic == RETRY_SOURCE_TOPIC and self.tags == RETRY_TAG


@dataclass(frozen=True, slots=True)
class ExpectedMessage:
    """A sent message and the broker's SendResult for it (a golden-manifest entry).

    ``offset_msg_id`` is empty for transactional sends (the client does not report it).
    For DELAY, TIMER and transactional messages ``queue_offset`` and ``offset_msg_id``
    describe the record the broker wrote first (in SCHEDULE_TOPIC_XXXX,
    rmq_sys_wheel_timer or RMQ_SYS_TRANS_HALF_TOPIC), while ``queue_id`` is the queue
    of ``topic`` the message is finally delivered to.
    """

    # In the order of the golden manifest's entries (:meth:`to_json`): where the broker
    # put the message first, then what was sent.
    index: int
    kind: Kind
    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    offset_msg_id: str
    tags: str | None
    keys: tuple[str, ...]
    properties: Mapping[str, str]
    body_sha256: str
    body_length: int
    delay: int
    fails_once: bool
    send_status: str = field(default="SEND_OK")

    def to_json(self) -> dict[str, object]:
        return {
            "index": self.index,
            "kind": self.kind.value,
            "topic": self.topic,
            "queueId": self.queue_id,
            "queueOffset": self.queue_offset,
            "msgId": self.msg_id,
            "offsetMsgId": self.offset_msg_id,
            "sendStatus": self.send_status,
            "tags": self.tags,
            "keys": list(self.keys),
            "properties": dict(self.properties),
            "bodySha256": self.body_sha256,
            "bodyLength": self.body_length,
            "delay": self.delay,
            "failsOnce": self.fails_once,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, object]) -> ExpectedMessage:
        def s(key: str) -> str:
            value = raw[key]
            assert isinstance(value, str), key
            return value

        def i(key: str) -> int:
            value = raw[key]
            assert isinstance(value, int), key
            return value

        tags = raw["tags"]
        keys = raw["keys"]
        props = raw["properties"]
        assert tags is None or isinstance(tags, str)
        assert isinstance(keys, list)
        assert isinstance(props, dict)
        return cls(
            index=i("index"),
            kind=Kind(s("kind")),
            topic=s("topic"),
            tags=tags,
            keys=tuple(str(k) for k in keys),
            properties={str(k): str(v) for k, v in props.items()},
            body_sha256=s("bodySha256"),
            body_length=i("bodyLength"),
            delay=i("delay"),
            fails_once=bool(raw["failsOnce"]),
            msg_id=s("msgId"),
            offset_msg_id=s("offsetMsgId"),
            queue_id=i("queueId"),
            queue_offset=i("queueOffset"),
            send_status=s("sendStatus"),
        )


# -- plan ------------------------------------------------------------------------------
def _body(rng: random.Random, size: int, compressible: bool) -> bytes:
    if not compressible:
        return rng.randbytes(size)
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word.encode()) + 1
    return " ".join(words).encode()[:size]


def _size(rng: random.Random, large_fraction: float) -> tuple[int, bool]:
    roll = rng.random()
    if roll < 0.03:
        return 1, False
    if roll < 0.03 + large_fraction:
        return rng.randint(COMPRESS_THRESHOLD + 1, 24_000), rng.random() < 0.5
    return rng.randint(16, 1500), rng.random() < 0.3


def _decorations(rng: random.Random) -> tuple[str | None, tuple[str, ...], dict[str, str]]:
    tags = rng.choice((None, None, *_TAGS))
    keys = tuple(
        rng.choice((f"k{rng.randrange(10**6)}", "ключ-1", "order#42"))
        for _ in range(rng.randint(0, 3))
    )
    props = {
        name: rng.choice(("v", "value with spaces", "ünïcødé", "12345", "x" * 300))
        for name in rng.sample(_PROP_NAMES, rng.randint(0, 3))
    }
    return tags, keys, props


def make_plan(*, normal: int, seed: int, large_fraction: float = 0.10) -> list[PlannedMessage]:
    """Return the messages to send: ``normal`` plain ones plus a fixed set of specials.

    Deterministic for a given ``(normal, seed, large_fraction)``.
    """
    rng = random.Random(seed)
    plan: list[PlannedMessage] = []

    def add(
        kind: Kind,
        topic: str,
        body: bytes,
        *,
        tags: str | None = None,
        keys: tuple[str, ...] = (),
        props: Mapping[str, str] | None = None,
        delay: int = 0,
    ) -> None:
        plan.append(
            PlannedMessage(len(plan), kind, topic, tags, keys, dict(props or {}), body, delay)
        )

    plain_topics = (ORDERS_TOPIC, PAYMENTS_TOPIC, LONG_TOPIC)
    # Edge sizes first: smallest body, either side of the compression threshold, biggest.
    for size, compressible in (
        (1, False),
        (2, True),
        (COMPRESS_THRESHOLD - 1, False),
        (COMPRESS_THRESHOLD, False),
        (COMPRESS_THRESHOLD + 1, True),
        (100_000, True),
        (60_000, False),
    ):
        add(Kind.NORMAL, ORDERS_TOPIC, _body(rng, size, compressible), tags="edge")
    for _ in range(normal):
        size, compressible = _size(rng, large_fraction)
        tags, keys, props = _decorations(rng)
        topic = rng.choice(plain_topics)
        add(Kind.NORMAL, topic, _body(rng, size, compressible), tags=tags, keys=keys, props=props)
    for n in range(6):
        level = 1 if n < 4 else 2
        add(Kind.DELAY, plain_topics[n % 2], _body(rng, 64, True), tags="delayed",
            keys=(f"delay-{n}",), props={"n": str(n)}, delay=level)  # fmt: skip
    for n in range(3):
        add(Kind.TIMER, plain_topics[n % 2], _body(rng, 80, True), tags="timer",
            keys=(f"timer-{n}",), props={"n": str(n)}, delay=TIMER_DELAY_MS)  # fmt: skip
    for n, kind in enumerate((Kind.TX_COMMIT,) * 3 + (Kind.TX_ROLLBACK,) * 2):
        outcome = "commit" if kind is Kind.TX_COMMIT else "rollback"
        add(kind, PAYMENTS_TOPIC, _body(rng, 5000 if n == 0 else 100, True), tags="tx",
            keys=(f"tx-{n}",), props={"tx_outcome": outcome})  # fmt: skip
    for n in range(30):
        tags = RETRY_TAG if n % 5 == 0 else "ok"
        add(Kind.NORMAL, RETRY_SOURCE_TOPIC, _body(rng, 200, True), tags=tags,
            keys=(f"retry-{n}",), props={"n": str(n)})  # fmt: skip
    return plan


def _b64(text: str | None) -> str:
    return base64.b64encode(text.encode()).decode() if text else ""


def write_plan(plan: Iterable[PlannedMessage], path: Path) -> None:
    """Write the plan in BrokerTool's format (see java/BrokerTool.java)."""
    lines = []
    for m in plan:
        props = "".join(f"{k}\x01{v}\x02" for k, v in m.properties.items())
        lines.append(
            "\t".join(
                (
                    str(m.index),
                    m.kind.value,
                    m.topic,
                    _b64(m.tags),
                    _b64(" ".join(m.keys)),
                    _b64(props),
                    base64.b64encode(m.body).decode(),
                    str(m.delay),
                )
            )
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_results(plan: list[PlannedMessage], path: Path) -> list[ExpectedMessage]:
    """Pair BrokerTool's result lines with the plan."""
    out: list[ExpectedMessage] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        index, status, msg_id, offset_msg_id, _broker, queue_id, queue_offset = line.split("\t")
        m = plan[int(index)]
        out.append(
            ExpectedMessage(
                index=m.index,
                kind=m.kind,
                topic=m.topic,
                tags=m.tags,
                keys=m.keys,
                properties=m.properties,
                body_sha256=hashlib.sha256(m.body).hexdigest(),
                body_length=len(m.body),
                delay=m.delay,
                fails_once=m.fails_once,
                msg_id=msg_id,
                offset_msg_id="" if offset_msg_id == "null" else offset_msg_id,
                queue_id=int(queue_id),
                queue_offset=int(queue_offset),
                send_status=status,
            )
        )
    if [e.index for e in out] != [m.index for m in plan]:
        raise ValueError(f"{path}: results do not cover the plan one to one")
    return out
