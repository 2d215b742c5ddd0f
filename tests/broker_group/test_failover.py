"""A real classic RocketMQ 5.3.3 group: a master, a slave, a sidecar beside each.

One name server, an ``ASYNC_MASTER`` broker and its ``SLAVE`` (``brokerId=1``, its own
store and ports, :mod:`tests.support.broker.group`), the same broker name; a real
``tieredstore run`` beside each replica (``group.replicas = 2``), one shared cold
directory. The master's sidecar holds the lease and tiers; the slave's stands by and
reports what its store holds (:mod:`tieredstore.dispatcher.replicas`).

The failover: the slave is frozen (SIGSTOP) while the master takes more writes, so it is
behind when the master host dies (``kill -9`` of the broker and its sidecar, then the
unflushed tail of the master's store is cut as a power loss would). The slave resumes,
is promoted by hand (a classic group's failover: restarted on its store as the master,
with the read plugin), and its sidecar takes the lease and goes on from cold's commit
point on its own store: no queue DIVERGED, no repair, cold exact against the survivor,
``verify`` CLEAN, and a stock consumer from the first offset reads cold, then hot, each
offset once. Last, the old master's sidecar comes back beside its old store and stands by.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.broker.group import promote, start_slave
from tests.support.broker.plugin import PLUGIN_CLASS, build_plugin
from tests.support.broker.powercut import cut_power
from tests.support.broker.rocketmq import (
    BrokerSettings,
    HarnessError,
    LocalCluster,
    missing_tools,
    prepare_toolchain,
    wait_until,
)
from tests.support.broker.serving import (
    QUEUES,
    TOPIC,
    all_tiered,
    by_queue,
    free_port,
    old_files_deleted,
    parse_deliveries,
    plan_messages,
)
from tests.support.broker.sidecar import LiveSidecar
from tests.support.broker.traffic import ExpectedMessage, read_results, write_plan
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.backends import open_backend
from tieredstore.hot.store import HotStore
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueState

pytestmark = [pytest.mark.broker, pytest.mark.slow]

REPLICA_TIMEOUT_S = 15


def _overrides(replica: str, **more: str) -> dict[str, str]:
    return {
        "TIEREDSTORE_GROUP_REPLICA": replica,
        "TIEREDSTORE_GROUP_REPLICAS": "2",
        "TIEREDSTORE_GROUP_REPLICA_TIMEOUT": f"{REPLICA_TIMEOUT_S}s",
        "TIEREDSTORE_LEASE_RENEW_INTERVAL": "1s",
        "TIEREDSTORE_TIERING_SEGMENT_MAX_AGE": "1s",
        "TIEREDSTORE_HTTP_ENABLED": "true",
        "TIEREDSTORE_HTTP_PORT": "0",
        "TIEREDSTORE_READS_ENABLED": "true",
        "TIEREDSTORE_TIERING_BATCHING": "true",
        **more,
    }


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _metric(sidecar: LiveSidecar, name: str) -> float:
    url = sidecar.http_url()
    assert url is not None, sidecar.log_tail()
    found = re.search(rf"^{name} (\S+)$", _get(f"{url}/metrics")[1], re.M)
    return float(found.group(1)) if found else float("nan")


def _healthz(sidecar: LiveSidecar) -> tuple[int, dict[str, str]]:
    url = sidecar.http_url()
    assert url is not None, sidecar.log_tail()
    status, body = _get(f"{url}/healthz")
    return status, json.loads(body)


def _hot_max(store: Path) -> dict[int, int]:
    hot = HotStore(store)
    return {q: hot.queue_range(TOPIC, q).max for q in range(QUEUES)}


def _states(sidecar: LiveSidecar) -> dict[tuple[str, int], QueueState]:
    with Catalogue.open(
        sidecar.state, cluster=sidecar.cluster, broker=sidecar.broker, read_only=True
    ) as cat:
        return {(r.topic, r.queue_id): r.state for r in cat.queues.all()}


def _produce(
    cluster: LocalCluster, workdir: Path, name: str, n: int, seed: int
) -> list[ExpectedMessage]:
    plan = plan_messages(n, seed)
    write_plan(plan, workdir / f"{name}.plan.tsv")
    cluster.run_tool("produce", cluster.namesrv_addr, str(workdir / f"{name}.plan.tsv"),
                     str(workdir / f"{name}.results.tsv"))  # fmt: skip
    results = read_results(plan, workdir / f"{name}.results.tsv")
    assert all(m.send_status == "SEND_OK" for m in results), name
    return results


@dataclass
class Failover:
    """What the failover left: the promoted slave, its sidecar, the messages it holds."""

    slave: LocalCluster
    sidecar: LiveSidecar
    old_master: LocalCluster
    workdir: Path
    cold: Path
    expected: dict[tuple[int, int], ExpectedMessage]
    promoted_at: dict[int, int]  # the slave's queue max when it was promoted
    master_max: dict[int, int]  # the master's, before its power cut


@pytest.fixture(scope="module")
def failover(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Failover]:
    missing = missing_tools()
    if missing:
        pytest.skip(f"real-broker tests need {', '.join(missing)} on PATH")
    jar = build_plugin()
    toolchain = prepare_toolchain()
    toolchain = type(toolchain)(toolchain.version, toolchain.lib_dir, toolchain.classes_dir, (jar,))
    work = tmp_path_factory.mktemp("group")
    cold = work / "cold"
    for sub in ("m", "s"):
        (work / sub).mkdir()
    reads_port = free_port()
    # The HA link's socket buffers fixed at 64 KiB each: what the master pushed into them
    # while the slave was frozen (the slave reads it once it resumes) stays far below the
    # second batch's ~1.7 MiB, so the slave is behind when the master dies. Left to the
    # kernel, loopback buffers grow to several MiB, and a slave can get the whole batch.
    buffers = str(64 << 10)
    settings = BrokerSettings(
        commitlog_file_size=256 << 10, max_message_size=64 << 10, flush_disk_type="ASYNC_FLUSH",
        jvm_properties=(("com.rocketmq.remoting.socket.sndbuf.size", buffers),
                        ("com.rocketmq.remoting.socket.rcvbuf.size", buffers)),
    )  # fmt: skip
    master = LocalCluster(toolchain, work / "master", settings)
    with master:
        master.create_topics({TOPIC: QUEUES})
        slave = start_slave(master, work / "slave")
        try:
            with (
                LiveSidecar.start(master, work / "m", cold=cold,
                                  overrides=_overrides("master")) as m_side,
                LiveSidecar.start(slave, work / "s", cold=cold, started="replica slave reports",
                                  overrides=_overrides("slave", TIEREDSTORE_READS_PORT=str(
                                      reads_port))) as s_side,
            ):  # fmt: skip
                yield _run_failover(master, slave, m_side, s_side, work, cold, reads_port)
        finally:
            slave.stop()


def _run_failover(
    master: LocalCluster,
    slave: LocalCluster,
    m_side: LiveSidecar,
    s_side: LiveSidecar,
    work: Path,
    cold: Path,
    reads_port: int,
) -> Failover:
    # The standby is healthy while it waits on the lease; the master's sidecar tiers.
    status, doc = _healthz(s_side)
    assert status == 200 and doc["detail"].startswith("standby: waiting on the writer lease")
    assert "lease acquired" not in s_side.log.read_text()
    assert _healthz(m_side)[0] == 200

    first = _produce(master, work, "first", 900, seed=3)
    wait_until(lambda: _hot_max(slave.store_root) == _hot_max(master.store_root), timeout=120,
               what="the slave to replicate the first batch")  # fmt: skip
    wait_until(lambda: all_tiered(m_side, master.store_root), timeout=120,
               what="the master's sidecar to tier the first batch")  # fmt: skip

    # The slave falls behind: frozen while the master takes more writes.
    slave.freeze_broker()
    frozen_at = _hot_max(slave.store_root)
    second = _produce(master, work, "second", 900, seed=5)
    master_max = _hot_max(master.store_root)
    assert all(master_max[q] > frozen_at[q] for q in range(QUEUES))
    ticks = _metric(m_side, "tieredstore_ticks_total")
    wait_until(lambda: _metric(m_side, "tieredstore_group_unconfirmed_bytes") > 0
               and _metric(m_side, "tieredstore_ticks_total") > ticks + 10, timeout=120,
               what="the master's sidecar to hold back what the slave lacks")  # fmt: skip

    # The master host dies: broker and sidecar killed, the unflushed tail lost.
    m_side.proc.kill()
    m_side.proc.wait()
    master.kill_broker()
    cut_power(master.store_root)

    # The slave resumes and is promoted (with the read plugin serving cold).
    slave.thaw_broker()
    plugin = (
        ("messageStorePlugIn", PLUGIN_CLASS),
        ("tieredstoreReadAddress", f"127.0.0.1:{reads_port}"),
        ("tieredstoreBackoffMinMillis", "200"),
        ("tieredstoreBackoffMaxMillis", "2000"),
    )
    promote(slave, plugin)
    # What the slave holds now: what it had when frozen, and what the master had already
    # pushed into its socket (read once it resumed) — still behind the dead master.
    promoted_at = _hot_max(slave.store_root)
    held = f"frozen at {frozen_at}, promoted at {promoted_at}, the master had {master_max}"
    assert all(frozen_at[q] <= promoted_at[q] for q in range(QUEUES)), held
    assert any(promoted_at[q] < master_max[q] for q in range(QUEUES)), held
    s_side.wait_started("lease acquired")
    slave.create_topics({TOPIC: QUEUES})
    third = _produce(slave, work, "third", 600, seed=7)

    expected = {(m.queue_id, m.queue_offset): m for m in first}
    expected.update(
        {(m.queue_id, m.queue_offset): m for m in second
         if m.queue_offset < promoted_at[m.queue_id]}
    )  # fmt: skip
    expected.update({(m.queue_id, m.queue_offset): m for m in third})
    wait_until(lambda: all_tiered(s_side, slave.store_root), timeout=180,
               what="the promoted slave's sidecar to tier everything")  # fmt: skip
    return Failover(slave, s_side, master, work, cold, expected, promoted_at, master_max)


def test_the_promoted_slave_goes_on_from_cold_with_no_divergence(failover: Failover) -> None:
    states = _states(failover.sidecar)
    assert states and all(s is QueueState.ACTIVE for s in states.values()), states
    assert "DIVERGED" not in failover.sidecar.log.read_text()
    hot = HotStore(failover.slave.store_root)

    async def check() -> None:
        async with open_backend(str(failover.cold)) as backend:
            await assert_cold_matches_hot(
                backend, hot, failover.sidecar.cluster, failover.sidecar.broker
            )

    asyncio.run(check())
    # Offsets the lost tail had are taken by new messages, and cold has those.
    assert all(_hot_max(failover.slave.store_root)[q] > failover.promoted_at[q]
               for q in range(QUEUES))  # fmt: skip


def test_verify_is_clean_against_the_survivor(failover: Failover) -> None:
    report = failover.workdir / "verify"
    done = subprocess.run(
        [sys.executable, "-m", "tieredstore.cli", "verify",
         "--hot", str(failover.slave.store_root), "--cold", str(failover.cold),
         "--cluster", failover.sidecar.cluster, "--broker", failover.sidecar.broker,
         "--out", str(report), "--level", "content", "--lag-allowance", "30s",
         "--metadata", str(failover.sidecar.state)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert json.loads((report / "report.json").read_text())["verdict"] == "CLEAN"


def test_a_stock_consumer_reads_from_0_through_cold_into_hot_once(failover: Failover) -> None:
    slave = failover.slave
    slave.run_tool("expire", slave.namesrv_addr, slave.broker_addr)
    wait_until(lambda: old_files_deleted(slave.store_root), timeout=120,
               what="the promoted broker to delete its old files")  # fmt: skip
    out = failover.workdir / "consume.tsv"
    try:
        slave.run_tool("consume", slave.namesrv_addr, "push", "GID_group_failover", TOPIC,
                       "first", "*", str(len(failover.expected)), "0", "240000", str(out),
                       timeout=300)  # fmt: skip
    except HarnessError as exc:  # what the plugin and the read service said, first
        sidecar = failover.sidecar.log_tail(1500)
        raise HarnessError(f"{_plugin_said(slave)}\n--- sidecar log\n{sidecar}\n{exc}") from exc
    deliveries = parse_deliveries(out)
    got = by_queue(deliveries)
    hot_max = _hot_max(slave.store_root)
    for q in range(QUEUES):
        assert got[q] == list(range(hot_max[q])), q  # from 0, in order, each once
    for d in deliveries:
        assert d.body_sha256 == failover.expected[(d.queue_id, d.queue_offset)].body_sha256


def _plugin_said(broker: LocalCluster) -> str:
    """The read plugin's last lines in the broker's store log (for a failure report)."""
    log = broker.home / "logs" / "rocketmqlogs" / "store.log"
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"--- no store log: {exc}"
    said = [t for t in lines if "tieredstore" in t]
    return "--- the plugin's last lines in store.log\n" + "\n".join(said[-15:])


def test_the_old_master_coming_back_stands_by(failover: Failover) -> None:
    old = failover.old_master
    log = failover.workdir / "m" / "sidecar.log"
    log.rename(log.with_name("sidecar.before-the-crash.log"))  # the same state dir, a new log
    overrides = _overrides("master", TIEREDSTORE_READS_PORT="0")
    with LiveSidecar.start(
        old, failover.workdir / "m", cold=failover.cold, started="replica master reports",
        overrides=overrides,
    ) as back:  # fmt: skip
        status, doc = _healthz(back)
        assert status == 200 and doc["detail"].startswith("standby"), doc
        assert "lease acquired" not in back.log.read_text()
