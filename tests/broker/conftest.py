"""Fixtures for the real-broker tests: one broker for the whole ``tests/broker`` package.

Package-scoped rather than session-scoped so the broker JVM and its sidecar stop as soon
as the broker tests are done instead of idling through the rest of the suite.

``broker_run`` resolves RocketMQ (cached), starts a name server and broker, sends the
traffic and yields; the cluster is stopped after the last broker test (and by ``atexit``
should the finaliser not run). Skipped only when ``java``, ``javac`` or ``mvn`` is
missing; any other failure to start is an error, with the broker's log tail.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from tests.support.broker.conformance import index_store
from tests.support.broker.rocketmq import (
    BrokerSettings,
    LocalCluster,
    missing_tools,
    prepare_toolchain,
)
from tests.support.broker.scenario import BrokerRun, now_ms, run_scenario, wait_for_clean_stop
from tests.support.broker.sidecar import COMPRESSED, LiveSidecar
from tests.support.broker.suite import StoreView
from tieredstore.hot.store import HotStore

#: ~5,200 plain messages over 3 topics x 4 queues: ~8 MiB, 8+ commitlog files of 1 MiB.
LIVE_NORMAL_MESSAGES = 5200
LIVE_SEED = 20240611


@pytest.fixture(scope="package")
def broker_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerRun]:
    missing = missing_tools()
    if missing:
        pytest.skip(f"real-broker tests need {', '.join(missing)} on PATH")
    toolchain = prepare_toolchain()
    cluster = LocalCluster(toolchain, tmp_path_factory.mktemp("rocketmq"), BrokerSettings())
    # The sidecar (entered after the cluster is up) tiers the store while the
    # scenario's traffic is being produced.
    # Batching on: the small segments of each tick go into batch objects (issue 37), so
    # the tiering and conformance checks read batch slices beside per-queue segments.
    # Compression on (COMPRESSED): segments and batch objects are stored as zstd frames
    # (the live traffic is cut by age into batch slices, which compaction leaves alone
    # for as long as the tests read them: its default age).
    batching = {"TIEREDSTORE_TIERING_BATCHING": "true", **COMPRESSED}
    work = tmp_path_factory.mktemp("tiering")
    with cluster, LiveSidecar.start(cluster, work, overrides=batching) as sidecar:
        manifest = run_scenario(cluster, normal=LIVE_NORMAL_MESSAGES, seed=LIVE_SEED)
        yield BrokerRun(cluster, manifest, sidecar)


@pytest.fixture(scope="package")
def live_view(broker_run: BrokerRun) -> StoreView:
    """The store read while the broker runs."""
    store = HotStore(broker_run.cluster.store_root)
    index = index_store(store, broker_run.manifest)
    return StoreView(store, broker_run.manifest, index, clean=False, min_messages=5000)


@pytest.fixture(scope="package")
def stopped_view(broker_run: BrokerRun, live_view: StoreView) -> StoreView:
    """The same store after a clean broker stop (requested after ``live_view``)."""
    wait_for_clean_stop(broker_run.cluster)
    manifest = dataclasses.replace(broker_run.manifest, window_end_ms=now_ms())
    store = HotStore(broker_run.cluster.store_root)
    return StoreView(store, manifest, index_store(store, manifest), clean=True, min_messages=5000)
