"""The broker read plugin on the newest RocketMQ 5.x that Maven Central serves whole.

The jar users build (against 5.3.3, ``broker-plugin/pom.xml``) is loaded by a broker of
that release; one consumer from the first offset reads every offset from 0 through cold
into hot, as ``test_serving_plugin.py`` checks on 5.3.3 (the release every other broker
test runs). The plugin does not *compile* against 5.4.0 and later (``MessageStore`` gained
``getMessageRocksDBStorage()``, which ``AbstractPluginMessageStore`` does not implement),
but the 5.3.3 build loads and serves there: docs/serving.md, "Supported RocketMQ
versions". A module of its own, so its broker starts after the 5.3.3 one has stopped;
small traffic and small commitlog files keep it short.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker.plugin import PLUGIN_CLASS, build_plugin
from tests.support.broker.rocketmq import (
    BrokerSettings,
    LocalCluster,
    Toolchain,
    missing_tools,
    prepare_toolchain,
    wait_until,
)
from tests.support.broker.serving import (
    BATCHES,
    QUEUES,
    TOPIC,
    all_tiered,
    by_queue,
    free_port,
    old_files_deleted,
    parse_deliveries,
    plan_messages,
)
from tests.support.broker.sidecar import COMPRESSED, LiveSidecar
from tests.support.broker.traffic import ExpectedMessage, Kind, read_results, write_plan
from tieredstore.hot.store import HotStore

pytestmark = pytest.mark.broker

#: The newest 5.x release Maven Central serves whole (5.5.1 lacks rocketmq-client,
#: -srvutil, -filter and -auth there); docs/serving.md, "Supported RocketMQ versions".
NEWEST = "5.5.0"
MESSAGES = 800


@pytest.fixture(scope="module")
def newest(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalCluster, Path, list[ExpectedMessage]]]:
    missing = missing_tools()
    if missing:
        pytest.skip(f"real-broker tests need {', '.join(missing)} on PATH")
    jar = build_plugin()  # as users build it: against the POM's 5.3.3
    base = prepare_toolchain(NEWEST)
    toolchain = Toolchain(base.version, base.lib_dir, base.classes_dir, (jar,))
    reads_port = free_port()
    settings = BrokerSettings(
        commitlog_file_size=256 << 10,
        max_message_size=64 << 10,
        extra_conf=(
            ("messageStorePlugIn", PLUGIN_CLASS),
            ("tieredstoreReadAddress", f"127.0.0.1:{reads_port}"),
        ),
    )
    workdir = tmp_path_factory.mktemp("newest")
    cluster = LocalCluster(toolchain, workdir / "rocketmq", settings)
    (workdir / "tiering").mkdir()
    overrides = {
        "TIEREDSTORE_READS_PORT": str(reads_port),
        "TIEREDSTORE_READS_ENABLED": "true",
        **COMPRESSED,
    }
    with cluster, LiveSidecar.start(cluster, workdir / "tiering", overrides=overrides) as sidecar:
        cluster.create_topics({TOPIC: QUEUES})
        plan = plan_messages(MESSAGES, seed=551)
        write_plan(plan, workdir / "plan.tsv")
        cluster.run_tool("produce", cluster.namesrv_addr, str(workdir / "plan.tsv"),
                         str(workdir / "results.tsv"))  # fmt: skip
        results = read_results(plan, workdir / "results.tsv")
        assert all(m.send_status == "SEND_OK" for m in results)
        store = cluster.store_root
        wait_until(lambda: all_tiered(sidecar, store), timeout=180, what="the sidecar to tier")
        cluster.run_tool("expire", cluster.namesrv_addr, cluster.broker_addr)
        wait_until(lambda: old_files_deleted(store), timeout=120,
                   what="the broker to delete its old commitlog and CQ files")  # fmt: skip
        yield cluster, workdir, results


def test_a_new_group_from_the_first_offset_reads_cold_then_hot_on_the_newest_5x(
    newest: tuple[LocalCluster, Path, list[ExpectedMessage]],
) -> None:
    cluster, workdir, results = newest
    assert cluster.toolchain.version == NEWEST
    hot = HotStore(cluster.store_root)
    ranges = {q: hot.queue_range(TOPIC, q) for q in range(QUEUES)}
    assert all(r.min > 0 for r in ranges.values()), "hot min must be above 0"
    out = workdir / "push-first.tsv"
    total = sum(r.max for r in ranges.values())
    cluster.run_tool("consume", cluster.namesrv_addr, "push", "GID_newest_first", TOPIC,
                     "first", "*", str(total), "0", "240000", str(out), timeout=300)  # fmt: skip
    got = parse_deliveries(out)
    assert by_queue(got) == {q: list(range(r.max)) for q, r in ranges.items()}
    messages = {(m.queue_id, m.queue_offset): m for m in results}
    for d in got:
        m = messages[(d.queue_id, d.queue_offset)]
        assert d.body_sha256 == m.body_sha256, (d.queue_id, d.queue_offset)
        assert (d.tags, d.keys) == (m.tags or "", " ".join(m.keys))
        if m.kind is not Kind.BATCH:
            assert d.msg_id == m.msg_id
    assert sum(m.kind is Kind.BATCH for m in results) == BATCHES * 8
