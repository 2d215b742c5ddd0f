"""The disaster-recovery scenario of ``test_restore.py``: traffic, tiering, what to expect.

One broker receives two batches of varied traffic (tags, keys, user properties, bodies
the Java client compresses) on three topics; a consumer group consumes the first batch
of one topic; the sidecar tiers after each batch (``run --once``), backing up the
broker's ``config/`` as it does; then the broker stops and its store is deleted.
:class:`Source` keeps what was sent, what the broker answered and when, and gives the
``tieredstore`` arguments that tier and restore it (the test runs the command: the CLI
is on top of every layer, and test support never imports it).
"""

from __future__ import annotations

import base64
import random
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.broker.rocketmq import LocalCluster, wait_until
from tests.support.broker.traffic import (
    COMPRESS_THRESHOLD,
    ExpectedMessage,
    Kind,
    PlannedMessage,
    read_results,
    write_plan,
)

ORDERS = "RestoreOrders"
PAYMENTS = "RestorePayments"
EVENTS = "RestoreEvents"
TOPICS: Mapping[str, int] = {ORDERS: 2, PAYMENTS: 2, EVENTS: 2}
GROUP = "GID_restore_orders"
CLUSTER = "RestoreTestCluster"
BROKER = "broker-r"

_TAGS = (None, "TagA", "order-created", "支付成功", "tag😀")
_PROPS = ("userId", "region", "prop-ü")


def plan_batch(seed: int, first_index: int, count: int) -> list[PlannedMessage]:
    """``count`` messages over the three topics: tags, keys, properties, big bodies."""
    rng = random.Random(seed)
    plan: list[PlannedMessage] = []
    topics = list(TOPICS)
    for i in range(count):
        index = first_index + i
        roll = rng.random()
        if roll < 0.08:  # compressed by the client (ZLIB): well over the threshold
            body = (
                " ".join(rng.choice(("alpha", "beta", "ключ", "数据")) for _ in range(3000))
            ).encode()[: rng.randint(COMPRESS_THRESHOLD + 1, 20_000)]
        elif roll < 0.1:
            body = b"x"
        else:
            body = rng.randbytes(rng.randint(10, 1500))
        keys = tuple(f"key-{index}-{k}" for k in range(rng.randint(0, 2)))
        props = {p: f"v{rng.randrange(1000)}" for p in rng.sample(_PROPS, rng.randint(0, 2))}
        plan.append(
            PlannedMessage(index, Kind.NORMAL, topics[i % 3], rng.choice(_TAGS), keys, props, body)
        )
    return plan


def produce(
    cluster: LocalCluster, plan: Sequence[PlannedMessage], name: str
) -> list[ExpectedMessage]:
    """Send ``plan`` (indexes from 0 within it) and return the broker's answers."""
    local = [
        PlannedMessage(i, m.kind, m.topic, m.tags, m.keys, m.properties, m.body)
        for i, m in enumerate(plan)
    ]
    plan_path, results = cluster.workdir / f"{name}.tsv", cluster.workdir / f"{name}-results.tsv"
    write_plan(local, plan_path)
    cluster.run_tool("produce", cluster.namesrv_addr, str(plan_path), str(results))
    return read_results(local, results)


def queue_counts(
    messages: Sequence[ExpectedMessage], topic: str | None = None
) -> Counter[tuple[str, int]]:
    return Counter((m.topic, m.queue_id) for m in messages if topic in (None, m.topic))


def wait_dispatched(cluster: LocalCluster, expected: Mapping[tuple[str, int], int]) -> None:
    """Wait until the broker's max offsets reach ``expected`` (its reput thread lags)."""

    def done() -> bool:
        got = {(o.topic, o.queue_id): o.max for o in cluster.broker_offsets(list(TOPICS))}
        return all(got.get(q, 0) >= n for q, n in expected.items())

    wait_until(done, timeout=60, what=f"consume queues to reach {dict(expected)}")


def consume_group(
    cluster: LocalCluster, topic: str, expected: int, name: str
) -> set[tuple[int, int]]:
    """Consume ``expected`` messages of ``topic`` as :data:`GROUP`; (queue id, offset) each."""
    out = cluster.workdir / f"{name}.tsv"
    cluster.run_tool(
        "consume-group", cluster.namesrv_addr, GROUP, topic, str(expected), "90000", str(out)
    )
    pairs = (line.split("\t") for line in out.read_text().splitlines() if line)
    return {(int(q), int(o)) for q, o in pairs}


@dataclass(frozen=True, slots=True)
class Dumped:
    """One message as the stock pull consumer got it from a (restored) broker."""

    topic: str
    queue_id: int
    offset: int
    msg_id: str
    offset_msg_id: str
    store_timestamp: int
    tags: str | None
    keys: str
    properties: Mapping[str, str]
    body_sha256: str
    body_length: int


@dataclass(frozen=True, slots=True)
class Dump:
    """Per-queue (min, max) as the broker reports them, and every message between."""

    ranges: Mapping[tuple[str, int], tuple[int, int]]
    messages: Mapping[tuple[str, int, int], Dumped]


def _text(b64: str) -> str:
    return base64.b64decode(b64).decode() if b64 else ""


def dump(cluster: LocalCluster, topics: Sequence[str], name: str) -> Dump:
    out = cluster.workdir / f"{name}.tsv"
    cluster.run_tool("dump", cluster.namesrv_addr, cluster.broker_addr, str(out), *topics)
    ranges: dict[tuple[str, int], tuple[int, int]] = {}
    messages: dict[tuple[str, int, int], Dumped] = {}
    for line in out.read_text(encoding="utf-8").splitlines():
        f = line.split("\t")
        if f[0] == "S":
            ranges[(f[1], int(f[2]))] = (int(f[3]), int(f[4]))
            continue
        props = dict(p.split("\x01", 1) for p in _text(f[9]).split("\x02") if p)
        d = Dumped(
            f[1],
            int(f[2]),
            int(f[3]),
            f[4],
            f[5],
            int(f[6]),
            _text(f[7]) or None,
            _text(f[8]),
            props,
            f[10],
            int(f[11]),
        )
        messages[(d.topic, d.queue_id, d.offset)] = d
    return Dump(ranges, messages)


def query_keys(
    cluster: LocalCluster, topic: str, keys: Sequence[str], name: str
) -> dict[str, set[tuple[str, int, int]]]:
    out = cluster.workdir / f"{name}.tsv"
    cluster.run_tool("query-keys", cluster.namesrv_addr, str(out), topic, *keys)
    found: dict[str, set[tuple[str, int, int]]] = defaultdict(set)
    for line in out.read_text(encoding="utf-8").splitlines():
        key, t, q, o = line.split("\t")
        if t != "-":
            found[key].add((t, int(q), int(o)))
    return found


@dataclass(frozen=True, slots=True)
class Source:
    """The lost broker: what it received, where its cold copy is, when batch 2 ran."""

    cluster: LocalCluster
    cold: Path
    state: Path
    batch1: tuple[ExpectedMessage, ...]
    batch2: tuple[ExpectedMessage, ...]
    consumed: frozenset[tuple[int, int]]
    batch2_start_ms: int
    batch2_end_ms: int
    #: The same two runs tiered with ``tiering.batching`` on, into their own cold copy.
    batched: Path | None = None

    @property
    def messages(self) -> tuple[ExpectedMessage, ...]:
        return self.batch1 + self.batch2

    def sidecar_args(self, store: Path, *extra: str, cold: Path | None = None) -> list[str]:
        """The ``tieredstore`` arguments that tier ``store`` once into the cold copy (or
        into ``cold``, with a state dir beside it)."""
        state = self.state if cold is None else cold.with_name(cold.name + "-state")
        return [
            "run",
            "--once",
            "--store",
            str(store),
            "--cold",
            str(cold or self.cold),
            "--state-dir",
            str(state),
            "--cluster",
            CLUSTER,
            "--broker",
            BROKER,
            "--no-wait",
            *extra,
        ]

    def restore_args(self, out: Path, *extra: str, cold: Path | None = None) -> list[str]:
        """The ``tieredstore`` arguments that restore the lost broker into ``out`` (from
        the cold copy, or from ``cold``)."""
        s = self.cluster.settings
        return [
            "restore",
            "--cold",
            str(cold or self.cold),
            "--cluster",
            CLUSTER,
            "--broker",
            BROKER,
            "--out",
            str(out),
            "--commitlog-file-size",
            str(s.commitlog_file_size),
            "--consume-queue-file-size",
            str(s.cq_file_size),
            "--index-hash-slots",
            "1000",
            "--index-max-entries",
            "4000",
            "--progress",
            "off",
            *extra,
        ]
