"""Fixtures of the archive tests: cold stores tiered by the real dispatcher.

``archive`` (package-scoped) holds two brokers of one cluster in one POSIX cold root:
``broker-a`` (two topics, one longer than 127 bytes, IPv6 hosts, ZLIB bodies, PREPARED
half messages, store times 50 ms apart) and ``broker-b`` (one more topic). ``golden``
tiers the store a real RocketMQ broker wrote. Expected rows come from
:class:`~tieredstore.cold.reader.ColdReader`, the code behind ``tieredstore read``.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_sidecar import Tier
from tests.support.broker.make_golden import GOLDEN_STORE
from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.compressed import compress_every_other
from tieredstore.backends import open_backend
from tieredstore.cold.history import Committed, load_history
from tieredstore.cold.reader import ColdReader
from tieredstore.hot.synth import SynthSpec, synthesize

BROKER_B = "broker-b"
SPECS = {
    BROKER: SynthSpec(topics=2, queues=2, messages=900, body_max=3000, compress_over=1500,
                      long_topic=True, ipv6=True, prepared_every=50, interval_ms=50, seed=5),
    BROKER_B: SynthSpec(topics=1, queues=2, messages=300, topic_prefix="Other", seed=6),
}  # fmt: skip
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

Row = dict[str, Any]


@dataclass(frozen=True)
class Archive:
    """A cold root and, per broker, the hot store tiered into it."""

    cold: Path
    stores: dict[str, Path]

    def links(self, broker: str = BROKER) -> list[Committed]:
        return asyncio.run(links(str(self.cold), broker))

    def rows(self, broker: str = BROKER) -> list[Row]:
        return asyncio.run(expected_rows(str(self.cold), broker))


def when(ms: int) -> dt.datetime:
    """Epoch milliseconds as the aware UTC datetime Arrow gives back."""
    return EPOCH + dt.timedelta(milliseconds=ms)


async def links(cold: str, broker: str, cluster: str = CLUSTER) -> list[Committed]:
    """Every committed link of ``broker`` that readers read: its segments and, with
    batching on (``TS_TEST_BATCHING``), batch slices; read with the core (not the data
    source). A link's name in traces and export records is its ``history_key``."""
    async with open_backend(cold) as backend:
        return (await load_history(backend, cluster, broker)).links()


async def expected_rows(cold: str, broker: str, cluster: str = CLUSTER) -> list[Row]:
    """What ``tieredstore read`` returns for every queue of ``broker``, as archive rows."""
    queues = sorted({(m.topic, m.queue_id) for m in await links(cold, broker, cluster)})
    rows: list[Row] = []
    async with open_backend(cold) as backend:
        reader = ColdReader(backend, cluster, broker)
        for topic, queue_id in queues:
            rng = await reader.range(topic, queue_id)
            for m in await reader.read(topic, queue_id, rng.min, rng.count):
                rows.append(archive_row(m.to_json(), cluster=cluster, broker=broker))
    return rows


def archive_row(doc: dict[str, Any], *, cluster: str, broker: str) -> Row:
    """One ``read`` JSON document as the archive row it must equal."""
    body = doc["body"].encode() if doc["bodyEncoding"] == "utf-8" else base64.b64decode(doc["body"])
    return {
        "topic": doc["topic"],
        "queue_id": doc["queueId"],
        "queue_offset": doc["queueOffset"],
        "store_timestamp": when(doc["storeTimestamp"]),
        "born_timestamp": when(doc["bornTimestamp"]),
        "msg_id": doc["msgId"],
        "offset_msg_id": doc["offsetMsgId"],
        "keys": doc["keys"],
        "tags": doc["tags"],
        "properties": doc["properties"],
        "body": body,
        "body_size": doc["bodyLength"],
        "sys_flag": doc["sysFlag"],
        "reconsume_times": doc["reconsumeTimes"],
        "broker": broker,
        "cluster": cluster,
    }


def normalise(rows: list[Row]) -> list[Row]:
    """Arrow rows (maps as pair lists) in a stable order, comparable with expected ones."""
    out = [r | {"properties": dict(r["properties"])} for r in rows]
    return sorted(out, key=lambda r: (r["broker"], r["topic"], r["queue_id"], r["queue_offset"]))


@pytest.fixture(scope="package")
def archive(tmp_path_factory: pytest.TempPathFactory, tier: Tier) -> Archive:
    root = tmp_path_factory.mktemp("archive")
    stores = {}
    for broker, spec in SPECS.items():
        synthesize(root / broker, spec)
        state = root / f"state-{broker}"
        asyncio.run(tier(root / broker, str(root / "cold"), state, cold__broker=broker))
        stores[broker] = root / broker
    return Archive(root / "cold", stores)


@pytest.fixture(scope="package")
def golden(tmp_path_factory: pytest.TempPathFactory, tier: Tier) -> Archive:
    root = tmp_path_factory.mktemp("golden-archive")
    # %RETRY% topics too: their names need escaping in exported partition directories.
    asyncio.run(tier(GOLDEN_STORE, str(root / "cold"), root / "state", tiering__include_retry=True))
    return Archive(root / "cold", {BROKER: GOLDEN_STORE})


@pytest.fixture(scope="package")
def compressed_archive(archive: Archive, tmp_path_factory: pytest.TempPathFactory) -> Archive:
    """A copy of ``archive`` with every other segment compressed (manifest format 3)."""
    root = tmp_path_factory.mktemp("compressed-archive")
    shutil.copytree(archive.cold, root / "cold")
    assert compress_every_other(root / "cold")
    return Archive(root / "cold", archive.stores)
