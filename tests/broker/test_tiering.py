"""Tier a live RocketMQ broker while it receives traffic; cold covers every message."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from tests.support.broker.rocketmq import wait_until
from tests.support.broker.scenario import BrokerRun
from tests.support.broker.traffic import Kind
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.backends import open_backend
from tieredstore.cold.history import EntryKind
from tieredstore.dispatcher.topic_filter import TopicFilter
from tieredstore.hot.store import HotStore
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.settings.loader import SETTINGS

pytestmark = pytest.mark.broker

_DEFAULT_SYSTEM = next(s.default for s in SETTINGS if s.key == "tiering.system_topics")
FILTER = TopicFilter(system=_DEFAULT_SYSTEM, include_retry=True)


def _caught_up(run: BrokerRun) -> bool:
    hot = HotStore(run.cluster.store_root)
    if not run.sidecar.state.exists() or not (run.sidecar.state / "catalogue.sqlite3").exists():
        return False
    with Catalogue.open(
        run.sidecar.state, cluster=run.sidecar.cluster, broker=run.sidecar.broker, read_only=True
    ) as cat:
        rows = {(r.topic, r.queue_id): r.cold_commit for r in cat.queues.all()}
    wanted = [q for q in hot.queues() if FILTER.accepts(q.topic)]
    return bool(wanted) and all(
        rows.get((q.topic, q.queue_id)) == hot.queue_range(q.topic, q.queue_id).max for q in wanted
    )


def test_live_broker_is_tiered_while_receiving_traffic(broker_run: BrokerRun) -> None:
    sidecar = broker_run.sidecar
    assert sidecar.proc.poll() is None, sidecar.log_tail()
    wait_until(lambda: _caught_up(broker_run), timeout=120, what="the sidecar to catch up")
    hot = HotStore(broker_run.cluster.store_root)

    async def check() -> dict[tuple[str, int], tuple[int, int]]:
        async with open_backend(str(sidecar.cold)) as backend:
            cold = await assert_cold_matches_hot(
                backend, hot, sidecar.cluster, sidecar.broker, expect_full=False
            )
        links = [link for c in cold.values() for link in c.manifests]
        slices = [link for link in links if link.kind is EntryKind.SLICE]
        assert slices, "batching is on: ticks wrote batch objects"
        # cold.compression is on (tests/broker/conftest.py): the batches the slices were
        # read from above are zstd frames (batch format 2), decoded and checked against hot.
        plain = [link.key for link in slices if link.commit_log.framed is None]
        assert not plain, f"batches stored plain with compression on: {sorted(set(plain))}"
        return {(q.topic, q.queue_id): (c.start, c.end) for q, c in cold.items()}

    ranges = asyncio.run(check())
    # Every message the producer got a SendResult for, in a tiered topic, is in cold at
    # the queue offset the broker assigned.
    counted: Counter[str] = Counter()
    for m in broker_run.manifest.messages:
        # Delayed/timer/transactional results name the system-topic record, not the final one.
        if m.kind is not Kind.NORMAL or not FILTER.accepts(m.topic):
            continue
        lo, hi = ranges[(m.topic, m.queue_id)]
        assert lo <= m.queue_offset < hi, f"{m.topic}/{m.queue_id}@{m.queue_offset} not in cold"
        counted[m.topic] += 1
    assert sum(counted.values()) >= 5000
    assert any(len(t) > 127 for t, _ in ranges)  # the v2 retry topic was tiered too
    assert "Traceback" not in sidecar.log.read_text(errors="replace")
