"""Stock RocketMQ consumers read tiered messages through the broker read plugin.

One name server and broker (module-scoped) with the plugin jar, built by Maven from
``broker-plugin/``, on its classpath (``enablePropertyFilter=true`` for SQL92); a real
``tieredstore run`` sidecar tiers its store and serves the read API on loopback. Traffic
with tags, keys, user properties and bodies the client compresses is produced and
tiered while the broker runs without ``messageStorePlugIn`` (``produced``); the first
test compares it with the plugin at hot min 0. Then (``served``) the broker runs with
the plugin and deletes its old commitlog files (its own expiry, ``fileReservedTime=0`` +
``deleteExpiredCommitLog``) so that hot min moves above 0. Every consumer below is the
stock Java client (``BrokerTool consume``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.broker.plugin import PLUGIN_CLASS, build_plugin
from tests.support.broker.rocketmq import (
    BrokerSettings,
    LocalCluster,
    missing_tools,
    prepare_toolchain,
    wait_until,
)
from tests.support.broker.serving import (
    BATCHES,
    QUEUES,
    TOPIC,
    Delivery,
    all_tiered,
    by_queue,
    cold_commit,
    free_port,
    old_files_deleted,
    parse_deliveries,
    plan_messages,
)
from tests.support.broker.sidecar import COMPRESSED, LiveSidecar
from tests.support.broker.traffic import (
    ExpectedMessage,
    Kind,
    read_results,
    write_plan,
)
from tieredstore.hot.store import HotStore

pytestmark = pytest.mark.broker

MESSAGES = 2400


@dataclass
class Produced:
    """The module's broker, its traffic tiered, its store still whole (hot min 0)."""

    cluster: LocalCluster
    sidecar: LiveSidecar
    workdir: Path
    results: list[ExpectedMessage]
    plugin_conf: tuple[tuple[str, str], ...]
    overrides: dict[str, str]
    plugin_on: bool = False

    def set_plugin(self, on: bool) -> None:
        """Restart the broker (same store, ports, name server) with or without the plugin's
        ``broker.conf`` lines; nothing when it already runs that way."""
        if on == self.plugin_on:
            return
        self.cluster.stop_broker()
        conf = self.cluster.workdir / "broker.conf"
        kept = [line for line in conf.read_text().splitlines()
                if not line.startswith(("messageStorePlugIn=", "tieredstore"))]  # fmt: skip
        kept += [f"{k}={v}" for k, v in self.plugin_conf] if on else []
        conf.write_text("".join(line + "\n" for line in kept))
        self.cluster.restart_broker()
        self.plugin_on = on

    def consume(self, name: str, *args: str, timeout_ms: int = 240_000) -> list[Delivery]:
        """Run ``BrokerTool consume`` (MODE GROUP TOPIC FROM SUB EXPECTED FRESH)."""
        out = self.workdir / f"{name}.tsv"
        self.cluster.run_tool("consume", self.cluster.namesrv_addr, *args, str(timeout_ms),
                              str(out), timeout=timeout_ms / 1000 + 60)  # fmt: skip
        return parse_deliveries(out)


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Produced]:
    """The broker starts *without* the plugin (its jar on the classpath all the same):
    the first test compares a stock broker with the plugin's at hot min 0, one restart."""
    missing = missing_tools()
    if missing:
        pytest.skip(f"real-broker tests need {', '.join(missing)} on PATH")
    jar = build_plugin()
    toolchain = prepare_toolchain()
    toolchain = type(toolchain)(toolchain.version, toolchain.lib_dir, toolchain.classes_dir, (jar,))
    reads_port = free_port()
    plugin_conf = (
        ("messageStorePlugIn", PLUGIN_CLASS),
        ("tieredstoreReadAddress", f"127.0.0.1:{reads_port}"),
        ("tieredstoreBackoffMinMillis", "200"),
        ("tieredstoreBackoffMaxMillis", "2000"),
        ("tieredstoreRangeCacheMillis", "300"),
    )
    # SQL92 subscriptions (MessageSelector.bySql) need the broker's property filter.
    settings = BrokerSettings(extra_conf=(("enablePropertyFilter", "true"),))
    workdir = tmp_path_factory.mktemp("served")
    cluster = LocalCluster(toolchain, workdir / "rocketmq", settings)
    (workdir / "tiering").mkdir()
    overrides = {
        "TIEREDSTORE_READS_PORT": str(reads_port),
        "TIEREDSTORE_READS_ENABLED": "true",
        "TIEREDSTORE_TIERING_BATCHING": "true",  # the plugin reads batch slices too
        **COMPRESSED,  # and decoded frames of compressed segments
    }
    with cluster, LiveSidecar.start(cluster, workdir / "tiering", overrides=overrides) as sidecar:
        cluster.create_topics({TOPIC: QUEUES})
        plan = plan_messages(MESSAGES, seed=29)
        write_plan(plan, workdir / "plan.tsv")
        cluster.run_tool("produce", cluster.namesrv_addr, str(workdir / "plan.tsv"),
                         str(workdir / "results.tsv"))  # fmt: skip
        results = read_results(plan, workdir / "results.tsv")
        assert all(m.send_status == "SEND_OK" for m in results)
        wait_until(lambda: all_tiered(sidecar, cluster.store_root), timeout=180,
                   what="the sidecar to tier")  # fmt: skip
        yield Produced(cluster, sidecar, workdir, results, plugin_conf, overrides)


@dataclass
class Served:
    cluster: LocalCluster
    sidecar: LiveSidecar
    workdir: Path
    messages: dict[tuple[int, int], ExpectedMessage]
    hot_min: dict[int, int]
    hot_max: dict[int, int]
    overrides: dict[str, str]
    produced: Produced

    def consume(self, name: str, *args: str, timeout_ms: int = 240_000) -> list[Delivery]:
        """Run ``BrokerTool consume`` (MODE GROUP TOPIC FROM SUB EXPECTED FRESH)."""
        return self.produced.consume(name, *args, timeout_ms=timeout_ms)


@pytest.fixture(scope="module")
def served(produced: Produced) -> Served:
    """The plugin on, and the broker's own expiry has deleted its old files: hot min > 0."""
    produced.set_plugin(True)
    cluster, store = produced.cluster, produced.cluster.store_root
    cluster.run_tool("expire", cluster.namesrv_addr, cluster.broker_addr)
    wait_until(lambda: old_files_deleted(store), timeout=120,
               what="the broker to delete its old commitlog and CQ files")  # fmt: skip
    hot = HotStore(store)
    ranges = {q: hot.queue_range(TOPIC, q) for q in range(QUEUES)}
    return Served(
        cluster, produced.sidecar, produced.workdir,
        {(m.queue_id, m.queue_offset): m for m in produced.results},
        {q: r.min for q, r in ranges.items()}, {q: r.max for q, r in ranges.items()},
        produced.overrides, produced,
    )  # fmt: skip


def _check_as_produced(served: Served, deliveries: list[Delivery]) -> None:
    for d in deliveries:
        m = served.messages[(d.queue_id, d.queue_offset)]
        assert d.body_sha256 == m.body_sha256, (d.queue_id, d.queue_offset)
        # A 5.x broker appends the batch's own properties, its UNIQ_KEY included, after
        # each batched message's: consumers see the batch's id (hot or cold alike), not
        # the per-message ids the producer's SendResult lists.
        if m.kind is not Kind.BATCH:
            assert d.msg_id == m.msg_id, (d.queue_id, d.queue_offset)
        assert (d.tags, d.keys) == (m.tags or "", " ".join(m.keys))
        assert {k: d.properties.get(k) for k in m.properties} == dict(m.properties)


def test_while_hot_starts_at_0_a_default_group_starts_where_it_would_without_the_plugin(
    produced: Produced,
) -> None:
    """First in the module (before ``served`` deletes anything): every message is tiered
    and the broker still holds them all. A new group with default settings
    (CONSUME_FROM_LAST_OFFSET) starts at the same offsets on the stock broker and with the
    plugin: cold holding offset 0 too must not change the broker's answer (seed 002)."""
    hot = HotStore(produced.cluster.store_root)
    maxes = {q: hot.queue_range(TOPIC, q).max for q in range(QUEUES)}
    assert all(hot.queue_range(TOPIC, q).min == 0 for q in range(QUEUES)), "hot must start at 0"
    assert all(cold_commit(produced.sidecar, q) == maxes[q] for q in range(QUEUES))
    every = {q: list(range(maxes[q])) for q in range(QUEUES)}
    starts = {}
    for on in (False, True):
        produced.set_plugin(on)
        name = "plugin" if on else "stock"
        got = produced.consume(f"default-hot0-{name}", "push-concurrent", f"GID_hot0_{name}",
                               TOPIC, "default", "*", str(sum(maxes.values())), "0")  # fmt: skip
        lists = by_queue(got)
        starts[on] = {q: min(offsets) for q, offsets in lists.items()}
        assert {q: sorted(set(offsets)) for q, offsets in lists.items()} == every, name
    assert starts[True] == starts[False]
    # Seed 002: a queue whose min offset is 0 (offset 0 in memory) starts the group at 0.
    assert starts[True] == dict.fromkeys(range(QUEUES), 0)


def test_a_new_group_from_the_first_offset_reads_cold_then_hot(served: Served) -> None:
    assert all(served.hot_min[q] > 0 for q in range(QUEUES)), "hot min must be above 0"
    total = sum(served.hot_max.values())
    got = served.consume("push-first", "push", "GID_served_first", TOPIC, "first", "*",
                         str(total), "0")  # fmt: skip
    # Exactly once per queue offset, in order per queue, from 0 through cold into hot.
    assert by_queue(got) == {q: list(range(served.hot_max[q])) for q in range(QUEUES)}
    _check_as_produced(served, got)
    compressed = [m for m in served.messages.values() if m.body_length > 4096]
    assert any(m.queue_offset < served.hot_min[m.queue_id] for m in compressed)
    batched = [m for m in served.messages.values() if m.kind is Kind.BATCH]
    assert len(batched) == BATCHES * 8
    assert all(m.queue_offset < served.hot_min[m.queue_id] for m in batched)


def test_the_cold_segments_the_consumers_read_are_compressed(served: Served) -> None:
    """cold.compression is on (COMPRESSED): the plugin's cold reads above and below
    decode zstd frames (through the read service's read-ahead) for every full segment."""
    logs = served.sidecar.commit_logs()
    assert any(stored is not None for _, stored in logs), logs


def test_a_new_group_with_default_settings_starts_where_it_would_without_the_plugin(
    served: Served,
) -> None:
    # Hot min > 0: a stock broker answers the new group's offset query "not found", and
    # the client's default CONSUME_FROM_LAST_OFFSET starts at the max offset: only
    # messages sent after the consumer started arrive, nothing from cold.
    before = HotStore(served.cluster.store_root)
    maxes = {q: before.queue_range(TOPIC, q).max for q in range(QUEUES)}
    got = served.consume("push-default", "push-concurrent", "GID_served_default", TOPIC,
                         "default", "*", "8", "8")  # fmt: skip
    assert len(got) == 8 and all(d.tags == "fresh" for d in got), got
    assert all(d.queue_offset >= maxes[d.queue_id] for d in got)


def test_a_lite_pull_consumer_and_a_tag_filter(served: Served) -> None:
    total = sum(served.hot_max.values())
    got = served.consume("lite-first", "lite", "GID_served_lite", TOPIC, "first", "*",
                         str(total), "0")  # fmt: skip
    lists = by_queue(got)
    for q in range(QUEUES):  # fresh messages from the test before may follow
        assert lists[q][: served.hot_max[q]] == list(range(served.hot_max[q]))
        assert len(set(lists[q])) == len(lists[q])
    _check_as_produced(served, [d for d in got if (d.queue_id, d.queue_offset) in served.messages])

    tagged = sorted(k for k, m in served.messages.items() if m.tags == "TagA")
    got = served.consume("push-taga", "push", "GID_served_taga", TOPIC, "first", "TagA",
                         str(len(tagged)), "0")  # fmt: skip
    assert sorted((d.queue_id, d.queue_offset) for d in got) == tagged
    assert all(b > a for q in by_queue(got).values() for a, b in itertools.pairwise(q))
    _check_as_produced(served, got)


#: SQL92 on user properties and the tag: matches on both sides of the hot min, and in
#: the batches and compressed bodies cold holds. How much of the store the broker's
#: expiry leaves is the broker's choice (a CI run kept 3 messages a queue, all above a
#: bound of "newest - 5"), so the hot side is pinned: the second clause names the oldest
#: hot message, and the upper bound leaves out the newest, which is hot too.
SQL = (
    "(i BETWEEN 40 AND {upper} AND (note IS NOT NULL OR TAGS = 'TagB'))"
    " OR i BETWEEN {pin} AND {pin}"
)


def _sql_matches(m: ExpectedMessage, upper: int, pin: int) -> bool:
    i = int(m.properties["i"])
    return (40 <= i <= upper and ("note" in m.properties or m.tags == "TagB")) or i == pin


def test_a_sql92_filter_reads_exactly_the_matching_messages_through_cold(served: Served) -> None:
    # The plugin applies the consumer's MessageFilter to each cold record
    # (isMatchedByCommitLog decodes its properties), as the broker does to hot records.
    def hot(m: ExpectedMessage) -> bool:
        return m.queue_offset >= served.hot_min[m.queue_id]

    upper = max(int(m.properties["i"]) for m in served.messages.values()) - 1
    pin = min(int(m.properties["i"]) for m in served.messages.values() if hot(m))
    assert pin <= upper, ("hot must hold two messages at least", served.hot_min, served.hot_max)
    expected = sorted(k for k, m in served.messages.items() if _sql_matches(m, upper, pin))
    cold = [k for k in expected if k[1] < served.hot_min[k[0]]]
    assert cold and len(cold) < len(expected), ("matches must lie in cold and in hot",
                                                served.hot_min, served.hot_max)  # fmt: skip
    assert any(not _sql_matches(m, upper, pin) and not hot(m)
               for m in served.messages.values())  # fmt: skip
    assert any(not _sql_matches(m, upper, pin) and hot(m) for m in served.messages.values())
    sql = "sql:" + SQL.format(upper=upper, pin=pin)
    got = served.consume("push-sql", "push", "GID_served_sql", TOPIC, "first", sql,
                         str(len(expected)), "0")  # fmt: skip
    assert sorted((d.queue_id, d.queue_offset) for d in got) == expected
    assert all(b > a for q in by_queue(got).values() for a, b in itertools.pairwise(q))
    _check_as_produced(served, got)


def test_reset_offset_by_time_to_a_time_only_cold_holds(served: Served) -> None:
    group = "GID_served_default"  # has offsets on the broker (the default-settings test)
    target = {q: served.hot_min[q] // 3 for q in range(QUEUES)}
    # The store time of a message is what the broker searches by: take it from a pull.
    first = parse_deliveries(served.workdir / "push-first.tsv")
    times = {(d.queue_id, d.queue_offset): d.store_timestamp for d in first}
    ts = times[(0, target[0])]
    served.cluster.run_tool("reset-by-time", served.cluster.namesrv_addr, group, TOPIC, str(ts))
    expected_start = {
        q: min(o for (qq, o), t in times.items() if qq == q and t >= ts) for q in range(QUEUES)
    }
    assert all(expected_start[q] < served.hot_min[q] for q in range(QUEUES))
    remaining = sum(served.hot_max[q] - expected_start[q] for q in range(QUEUES))
    got = served.consume("push-reset", "push", group, TOPIC, "default", "*",
                         str(remaining), "0")  # fmt: skip
    lists = by_queue(got)
    for q in range(QUEUES):
        assert lists[q][0] == expected_start[q], (q, lists[q][:3])
        assert lists[q][: served.hot_max[q] - expected_start[q]] == list(
            range(expected_start[q], served.hot_max[q])
        )


def test_the_sidecar_stopped_mid_read_pauses_the_consumer_and_skips_nothing(
    served: Served,
) -> None:
    """Last in the module: it replaces the module's sidecar with a new process."""
    total = sum(served.hot_max.values())
    out, log = served.workdir / "push-outage.tsv", served.workdir / "push-outage.log"
    tool = served.cluster.spawn_tool(
        "consume", served.cluster.namesrv_addr, "push-slow", "GID_served_outage", TOPIC,
        "first", "*", str(total), "0", "600000", str(out), log=log,
    )  # fmt: skip
    store_log = served.cluster.home / "logs" / "rocketmqlogs" / "store.log"
    try:
        wait_until(lambda: out.is_file() and len(out.read_text().splitlines()) >= 40,
                   timeout=120, what="the first cold deliveries")  # fmt: skip
        assert served.sidecar.stop() == 0
        stopped_at = len(out.read_text().splitlines())
        wait_until(lambda: "tieredstore: cold read of" in store_log.read_text(errors="replace"),
                   timeout=60, what="the plugin to find the sidecar gone")  # fmt: skip
        cold_total = sum(served.hot_min.values())
        assert stopped_at < cold_total, "the consumer finished the cold part too early"
        with LiveSidecar.start(served.cluster, served.workdir / "tiering",
                               overrides=served.overrides):  # fmt: skip
            assert tool.wait(timeout=300) == 0, log.read_text(errors="replace")[-3000:]
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.wait()
    got = parse_deliveries(out)
    lists = by_queue(got)
    for q in range(QUEUES):  # fresh messages from an earlier test may follow
        assert lists[q][: served.hot_max[q]] == list(range(served.hot_max[q]))
        assert len(set(lists[q])) == len(lists[q])
    _check_as_produced(served, [d for d in got if (d.queue_id, d.queue_offset) in served.messages])


def test_control_without_the_plugin_the_broker_answers_as_stock(served: Served) -> None:
    """The same broker and store, restarted without ``messageStorePlugIn``: a new group
    from the first offset starts at the hot min (the broker's OFFSET_TOO_SMALL) — what
    the plugin exists to change — and a new group with default settings starts at the max
    offset, as it did with the plugin. Last: it restarts the module's broker."""
    cluster = served.cluster
    served.produced.set_plugin(False)
    hot = HotStore(cluster.store_root)
    ranges = {q: hot.queue_range(TOPIC, q) for q in range(QUEUES)}
    assert all(r.min > 0 for r in ranges.values())
    expected = sum(r.max - r.min for r in ranges.values())
    got = served.consume("push-control", "push", "GID_served_control", TOPIC, "first", "*",
                         str(expected), "0")  # fmt: skip
    assert by_queue(got) == {q: list(range(r.min, r.max)) for q, r in ranges.items()}

    got = served.consume("push-control-default", "push-concurrent", "GID_control_default",
                         TOPIC, "default", "*", "8", "8")  # fmt: skip
    assert len(got) == 8 and all(d.tags == "fresh" for d in got), got
    assert all(d.queue_offset >= ranges[d.queue_id].max for d in got)
