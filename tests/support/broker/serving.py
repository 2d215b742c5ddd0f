"""The read plugin tests' traffic (``tests/broker/test_serving_plugin*.py``) and what
the stock consumers received: one topic of plain messages, the sidecar's cold commit
through its read API, and the consumers' "M" lines parsed back.
"""

from __future__ import annotations

import base64
import random
import socket
import struct
import urllib.request
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from tests.support.broker.sidecar import LiveSidecar
from tests.support.broker.traffic import Kind, PlannedMessage
from tieredstore.hot.store import HotStore

TOPIC = "TieredStoreServed"
QUEUES = 2
BATCHES = 10


@dataclass(frozen=True)
class Delivery:
    queue_id: int
    queue_offset: int
    msg_id: str
    store_timestamp: int
    tags: str
    keys: str
    properties: dict[str, str]
    body_sha256: str


def _text(b64: str) -> str:
    return base64.b64decode(b64).decode() if b64 else ""


def parse_deliveries(path: Path) -> list[Delivery]:
    """BrokerTool's "M" lines (see its ``dump`` and ``consume`` commands), in order."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        _m, _topic, qid, off, msg_id, _omid, ts, tags, keys, props, sha, _len = line.split("\t")
        pairs = [p.split("\x01", 1) for p in _text(props).split("\x02") if p]
        out.append(Delivery(int(qid), int(off), msg_id, int(ts), _text(tags), _text(keys),
                            dict(pairs), sha))  # fmt: skip
    return out


def plan_messages(n: int, seed: int) -> list[PlannedMessage]:
    """Plain messages: tags TagA/TagB/none, keys, user properties, 1 in 12 bodies over the
    client's 4 KiB compression threshold (compressible text: stored zlib-compressed), the
    first ``BATCHES`` x 8 sent as batches."""
    rng = random.Random(seed)
    plan = []
    for i in range(n):
        if i % 12 == 5:
            body = (" ".join(f"word{rng.randrange(50)}" for _ in range(1500))).encode()[:7000]
        else:
            body = rng.randbytes(rng.randint(300, 2600))
        tags = rng.choice(("TagA", "TagB", None))
        keys = (f"key-{i}",) + ((f"order#{i % 7}",) if i % 3 == 0 else ())
        props = {"i": str(i), **({"note": "ünïcødé"} if i % 5 == 0 else {})}
        # The first BATCHES x 8 go out as batches (send(Collection)), so cold holds some.
        kind, batch = (Kind.BATCH, i // 8) if i < BATCHES * 8 else (Kind.NORMAL, 0)
        plan.append(PlannedMessage(i, kind, TOPIC, tags, keys, props, body, batch))
    return plan


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def all_tiered(sidecar: LiveSidecar, store: Path) -> bool:
    """The sidecar's cold commit has reached hot max for every queue of TOPIC."""
    hot = HotStore(store)
    maxes = [hot.queue_range(TOPIC, q).max for q in range(QUEUES)]
    return all(maxes) and all(cold_commit(sidecar, q) == m for q, m in enumerate(maxes))


def cold_commit(sidecar: LiveSidecar, queue: int) -> int:
    url = f"{sidecar.reads_url()}/v1/cold/range?topic={TOPIC}&queue={queue}"
    with urllib.request.urlopen(url, timeout=10) as reply:
        _magic, _lo, hi, _ts = struct.unpack(">4sqqq", reply.read())
    return int(hi)


def old_files_deleted(store: Path) -> bool:
    hot = HotStore(store)
    return all(
        hot.cq_files(TOPIC, q).files
        and hot.cq_files(TOPIC, q).files[0].base > 0
        and hot.queue_range(TOPIC, q).min > 0
        for q in range(QUEUES)
    )


def by_queue(deliveries: list[Delivery]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for d in deliveries:
        out[d.queue_id].append(d.queue_offset)
    return out
