"""One broker run: create topics, send the traffic, fail some messages once, settle.

Shared by the live tests (``conftest.py``) and ``make_golden``.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tests.support.broker.conformance import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    op_half_offsets,
)
from tests.support.broker.manifest import Manifest
from tests.support.broker.rocketmq import LocalCluster, wait_until
from tests.support.broker.sidecar import LiveSidecar
from tests.support.broker.traffic import (
    RETRY_GROUP,
    RETRY_SOURCE_TOPIC,
    RETRY_TAG,
    RETRY_TOPIC,
    USER_TOPICS,
    ExpectedMessage,
    Kind,
    make_plan,
    read_results,
    write_plan,
)
from tieredstore.hot.store import HotStore

__all__ = ["BrokerRun", "now_ms", "run_scenario", "wait_for_clean_stop"]


@dataclass(frozen=True, slots=True)
class BrokerRun:
    """A running (or stopped) cluster and what the scenario produced on it."""

    cluster: LocalCluster
    manifest: Manifest
    sidecar: LiveSidecar


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _expected_counts(messages: list[ExpectedMessage]) -> Counter[str]:
    """How many records each topic must finally hold."""
    counts: Counter[str] = Counter()
    for m in messages:
        if m.kind is Kind.DELAY:
            counts[SCHEDULE_TOPIC] += 1
        elif m.kind is Kind.TIMER:
            counts[TIMER_TOPIC] += 1
        elif m.kind in (Kind.TX_COMMIT, Kind.TX_ROLLBACK):
            counts[HALF_TOPIC] += 1
        if m.kind is not Kind.TX_ROLLBACK:
            counts[m.topic] += 1
        if m.fails_once:
            counts[SCHEDULE_TOPIC] += 1
            counts[RETRY_TOPIC] += 1
    return counts


def _settled(store_root: Path, expected: Counter[str], half_offsets: set[int]) -> bool:
    store = HotStore(store_root)
    have: Counter[str] = Counter()
    for q in store.queues():
        have[q.topic] += store.queue_range(q.topic, q.queue_id).count
    if any(have[topic] != n for topic, n in expected.items()):
        return False
    # Op records are batched and written a few seconds after the end of a transaction.
    ops = store.queue_range(OP_HALF_TOPIC, 0)
    records = (store.read_message(OP_HALF_TOPIC, 0, q) for q in range(ops.min, ops.max))
    return op_half_offsets(records) == half_offsets


def run_scenario(cluster: LocalCluster, *, normal: int, seed: int) -> Manifest:
    """Drive ``cluster`` through the whole traffic and return what it produced.

    Returns once every delayed, timer, transactional and retried message has reached
    its final topic and the consume queues hold them all (the reput thread lags the
    commitlog), and after asking the broker for its per-queue offsets. The manifest's
    window ends now; callers that stop the broker later extend it.
    """
    cluster.create_topics(dict(USER_TOPICS))
    start = now_ms()
    plan = make_plan(normal=normal, seed=seed)
    plan_path, results_path = cluster.workdir / "plan.tsv", cluster.workdir / "results.tsv"
    write_plan(plan, plan_path)
    cluster.run_tool("produce", cluster.namesrv_addr, str(plan_path), str(results_path))
    messages = read_results(plan, results_path)
    failing = sum(m.fails_once for m in messages)
    cluster.run_tool(
        "fail-once", cluster.namesrv_addr, cluster.broker_addr, RETRY_GROUP,
        RETRY_SOURCE_TOPIC, RETRY_TAG, str(failing), "60000",
    )  # fmt: skip
    expected = _expected_counts(messages)
    half = {m.queue_offset for m in messages if m.kind in (Kind.TX_COMMIT, Kind.TX_ROLLBACK)}
    wait_until(
        lambda: _settled(cluster.store_root, expected, half),
        timeout=60,
        what=f"every record to reach its consume queue ({dict(expected)})",
    )
    topics = sorted({q.topic for q in HotStore(cluster.store_root).queues()} | set(USER_TOPICS))
    offsets = cluster.broker_offsets(topics)
    return Manifest(
        rocketmq_version=cluster.toolchain.version,
        store_host=cluster.broker_addr,
        commitlog_file_size=cluster.settings.commitlog_file_size,
        cq_file_size=cluster.settings.cq_file_size,
        retry_group=RETRY_GROUP,
        window_start_ms=start,
        window_end_ms=now_ms(),
        messages=tuple(messages),
        broker_offsets=tuple(offsets),
    )


def wait_for_clean_stop(cluster: LocalCluster) -> None:
    """Stop the broker with SIGTERM and check it shut down cleanly (no ``abort`` file)."""
    cluster.stop_broker()
    abort = cluster.store_root / "abort"
    if abort.exists():
        raise AssertionError(
            f"broker left {abort} behind (exit {cluster.broker_exit_code()}): not a clean "
            f"shutdown\n{cluster.log_tail()}"
        )
