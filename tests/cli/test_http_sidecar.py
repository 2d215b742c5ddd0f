"""The sidecar as it runs in production: ``tieredstore run`` with its HTTP API.

The first test starts the real command as a subprocess (port 0, its log names the port),
uses every endpoint, reloads its config with SIGHUP, stops it with SIGTERM and checks
what it left behind. The others drive the same aiohttp app in process, where the clock
and the dispatcher's state can be set exactly.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.backends import open_backend
from tieredstore.backends.memory import reset_memory_stores
from tieredstore.cli.sidecar.http import build_app
from tieredstore.cli.sidecar.read_api import build_read_app
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.cold.history import EntryKind
from tieredstore.cold.layout import SegmentKind, broker_prefix, lease_key, parse_object_key
from tieredstore.cold.reader import ColdReader
from tieredstore.dispatcher.lease.lease import LeaseRecord
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize

SPEC = SynthSpec(topics=2, queues=2, messages=800, body_max=900, compress_over=600, seed=31)
#: How long any one thing the sidecar does may take on a loaded CI machine.
PATIENCE = 60.0

WAITING = "starting: the writer lease is not held yet (another sidecar may hold it; this one waits)"


class LogWatcher:
    """Collects a subprocess's output lines (in a thread) and waits for one to appear."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for(self, pattern: str, *, after: int = 0) -> re.Match[str]:
        """Block until a line (index >= ``after``) matches ``pattern``; fail on exit/timeout."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + PATIENCE
        with self._cond:
            while True:
                for line in self.lines[after:]:
                    if m := regex.search(line):
                        return m
                if self.proc.poll() is not None and not self._thread.is_alive():
                    raise AssertionError(f"sidecar exited; no {pattern!r} in:\n{self.text}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {pattern!r} within {PATIENCE}s in:\n{self.text}")
                self._cond.wait(left)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=PATIENCE) as reply:
            return int(reply.status), bytes(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _get_json(url: str) -> tuple[int, Any]:
    status, body = _get(url)
    return status, json.loads(body)


def _until_tiered(base: str, hot: HotStore) -> list[dict[str, Any]]:
    """Wait (bounded) until /v1/queues shows every hot queue fully in cold."""
    want = {(q.topic, q.queue_id): hot.queue_range(q.topic, q.queue_id).max for q in hot.queues()}
    deadline = time.monotonic() + PATIENCE
    while True:
        _, doc = _get_json(f"{base}/v1/queues")
        got = {(q["topic"], q["queue"]): q["cold_commit"] for q in doc["queues"]}
        if got == want:
            return list(doc["queues"])
        assert time.monotonic() < deadline, f"not tiered in time: {got} vs {want}"
        # The sidecar ticks every 50 ms; ask again after one tick, not in a hot loop.
        threading.Event().wait(0.05)


Sidecar = tuple[subprocess.Popen[str], LogWatcher, Path]


@pytest.fixture
def start_sidecar(tmp_path: Path) -> Iterator[Callable[[], Sidecar]]:
    """Start ``tieredstore run`` on a synthetic store (the test may prepare cold first)."""
    synthesize(tmp_path / "store", SPEC)
    config = tmp_path / "sidecar.toml"
    config.write_text('[tiering]\ntick_interval = "50ms"\n')
    cmd = [
        sys.executable, "-m", "tieredstore.cli", "run",
        "--config", str(config),
        "--store", str(tmp_path / "store"),
        "--cold", str(tmp_path / "cold"),
        "--cluster", CLUSTER,
        "--broker", BROKER,
        "--state-dir", str(tmp_path / "state"),
        "--progress", "off",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIEREDSTORE_")}
    env.update(
        TIEREDSTORE_HTTP_ENABLED="true",
        TIEREDSTORE_HTTP_PORT="0",
        TIEREDSTORE_READS_PORT="0",
        TIEREDSTORE_TIERING_GUARD="none",
        TIEREDSTORE_TIERING_SEGMENT_MAX_AGE="10ms",
        TIEREDSTORE_TIERING_SEGMENT_MAX_BYTES="32K",
        # Synthetic messages are from 2023: keep them, whatever today's date.
        TIEREDSTORE_RETENTION_DEFAULT="36500d",
    )
    procs: list[subprocess.Popen[str]] = []

    def start() -> Sidecar:
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        procs.append(proc)
        return proc, LogWatcher(proc), tmp_path

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=PATIENCE)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.mark.slow
def test_the_sidecar_serves_its_api_reloads_and_stops_cleanly(
    start_sidecar: Callable[[], Sidecar],
) -> None:
    proc, log, root = start_sidecar()
    base = log.wait_for(r"HTTP API listening on (http://127\.0\.0\.1:\d+)").group(1)
    reads = log.wait_for(r"read API listening on (http://127\.0\.0\.1:\d+)").group(1)
    assert reads != base, "message contents never share the health/metrics listener"
    assert _get(f"{base}/v1/messages?topic=T&queue=0&offset=0")[0] == 404
    hot = HotStore(root / "store")
    queues = _until_tiered(base, hot)

    # /healthz: running and holding the lease.
    status, health = _get_json(f"{base}/healthz")
    assert (status, health["status"]) == (200, "ok")

    # /metrics: Prometheus text, parsed by prometheus-client's own parser.
    status, text = _get(f"{base}/metrics")
    assert status == 200
    families = {f.name: f for f in text_string_to_metric_families(text.decode())}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in families.values() for s in f.samples}  # fmt: skip
    assert families["tieredstore_segment_upload_seconds"].type == "histogram"
    assert samples[("tieredstore_messages_tiered_total", ())] == sum(
        hot.queue_range(q.topic, q.queue_id).count for q in hot.queues()
    )
    assert samples[("tieredstore_lease_held", ())] == 1
    for q in hot.queues():
        labels = (("queue", str(q.queue_id)), ("topic", q.topic))
        assert samples[("tieredstore_queue_lag_messages", labels)] == 0
        assert samples[("tieredstore_queue_state", (*labels[:1], ("state", "ACTIVE"),
                                                     labels[1]))] == 1  # fmt: skip
    for name in ("tieredstore_bytes_tiered", "tieredstore_backend_retries",
                 "tieredstore_errors", "tieredstore_expired_segments"):  # fmt: skip
        assert name in families

    # /v1/queues: the status view.
    assert {(q["topic"], q["queue"]) for q in queues} == {
        (k.topic, k.queue_id) for k in hot.queues()
    }
    assert all(q["state"] == "ACTIVE" and q["lag_messages"] == 0 for q in queues)

    # /v1/messages: what `read` returns, checked against the hot store.
    q = hot.queues()[1]
    status, doc = _get_json(f"{reads}/v1/messages?topic={q.topic}&queue={q.queue_id}"
                            "&offset=4&count=3")  # fmt: skip
    assert status == 200
    assert (doc["offset"], doc["nextOffset"], doc["coldMin"]) == (4, 7, 0)
    for m in doc["messages"]:
        record = hot.read_message(q.topic, q.queue_id, m["queueOffset"])
        assert m["msgId"] == record.properties["UNIQ_KEY"]
        assert m["body"] == record.decompressed_body().decode()
        assert m["storeTimestamp"] == record.store_timestamp
    ts = hot.read_message(q.topic, q.queue_id, 9).store_timestamp
    status, doc = _get_json(f"{reads}/v1/messages?topic={q.topic}&queue={q.queue_id}"
                            f"&timestamp={ts}&boundary=upper")  # fmt: skip
    assert (status, [m["queueOffset"] for m in doc["messages"]]) == (200, [9])
    status, doc = _get_json(f"{reads}/v1/messages?topic={q.topic}&queue={q.queue_id}"
                            "&offset=99999")  # fmt: skip
    assert status == 404 and "outside what cold holds" in doc["error"]
    status, doc = _get_json(f"{reads}/v1/messages?topic={q.topic}&queue=x&offset=1")
    assert status == 400 and "'queue' is not an integer" in doc["error"]

    # More data while running: it is tiered and readable.
    SyntheticStore.open(root / "store").append(200)
    _until_tiered(base, hot)

    # SIGHUP: what can change live is applied, the rest is reported.
    mark = len(log.lines)
    (root / "sidecar.toml").write_text(
        '[tiering]\ntick_interval = "60ms"\nconcurrency = 2\n[log]\nlevel = "debug"\n'
    )
    proc.send_signal(signal.SIGHUP)
    log.wait_for(r"config reload: tiering\.tick_interval = 0\.06 applied", after=mark)
    log.wait_for(r"config reload: log\.level = 'debug' applied", after=mark)
    log.wait_for(r"config reload: tiering\.concurrency changed to 2 but needs a restart; "
                 r"still 4", after=mark)  # fmt: skip
    assert _get_json(f"{base}/healthz")[0] == 200  # still serving on the old port

    # SIGTERM: exit 0, lease released, nothing half-written.
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=PATIENCE) == 0, log.text
    log.wait_for(r"lease released")
    asyncio.run(_check_left_behind(root))


@pytest.mark.slow
def test_sigterm_while_waiting_for_the_lease_exits_0_and_takes_nothing(
    start_sidecar: Callable[[], Sidecar], tmp_path: Path
) -> None:
    # Another sidecar holds the lease for ten more minutes.
    lease = tmp_path / "cold" / lease_key(CLUSTER, BROKER)
    lease.parent.mkdir(parents=True)
    now = time.time_ns() // 1_000_000
    held = LeaseRecord("other-sidecar@elsewhere", 7, now + 600_000, now)
    lease.write_bytes(held.to_json())
    proc, log, _ = start_sidecar()
    base = log.wait_for(r"HTTP API listening on (http://127\.0\.0\.1:\d+)").group(1)
    log.wait_for(r"the writer lease is held by other-sidecar@elsewhere \(epoch 7\)")
    status, doc = _get_json(f"{base}/healthz")
    assert (status, doc["reason"]) == (
        503,
        WAITING,
    )
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=PATIENCE) == 0, log.text
    log.wait_for("stopped before the writer lease was acquired")
    assert LeaseRecord.from_json(lease.read_bytes(), where="") == held, "lease untouched"
    assert not [p for p in (tmp_path / "cold").rglob("*") if p.is_file() and p != lease]


async def _check_left_behind(root: Path) -> None:
    cold = root / "cold"
    assert not [p for p in cold.rglob("*") if ".tmp-" in p.name], "temp files left"
    async with open_backend(str(cold)) as backend:
        lease = LeaseRecord.from_json(await backend.read(lease_key(CLUSTER, BROKER)), where="")
        assert lease.owner == "", "the lease must be released"
        keys = [i.key for i in await backend.list(broker_prefix(CLUSTER, BROKER) + "/")]
        ours = broker_prefix(CLUSTER, BROKER) + "/_"  # lease, config copies: not segments
        parsed = [parse_object_key(k) for k in keys if not k.startswith(ours)]
        # Every data object belongs to a committed segment (no orphan from the stop); the
        # batch objects (tiering.batching) are commit points of their own.
        cold_view = await assert_cold_matches_hot(
            backend, HotStore(root / "store"), CLUSTER, BROKER
        )
        links = [m for q in cold_view.values() for m in q.manifests]
        assert links
        segments = [m for m in links if m.kind is EntryKind.SEGMENT]
        committed = {m.commit_log_key for m in segments} | {m.consume_queue_key for m in segments}
        data = {o.key for o in parsed if o.kind is not SegmentKind.MANIFEST}
        assert data == committed, f"uncommitted objects: {sorted(data - committed)}"
        reader = ColdReader(backend, CLUSTER, BROKER)
        hot = HotStore(root / "store")
        for q in hot.queues():
            rng = await reader.range(q.topic, q.queue_id)
            assert (rng.min, rng.commit) == (0, hot.queue_range(q.topic, q.queue_id).max)


# -- in process: /healthz states, parameters, errors -------------------------------------
async def test_healthz_follows_the_dispatcher_and_the_lease(tmp_path: Path) -> None:
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=1, messages=50))
    reset_memory_stores()
    clock = VirtualClock()
    settings = settings_for(tmp_path / "store", "memory://health", tmp_path / "state")
    async with (
        open_runtime(settings, clock=clock) as rt,
        TestClient(TestServer(build_app(rt, clock=clock))) as client,
    ):

        async def health() -> tuple[int, str]:
            reply = await client.get("/healthz")
            doc = await reply.json()
            return reply.status, str(doc.get("reason", doc["status"]))

        assert await health() == (
            503,
            WAITING,
        )
        await rt.dispatcher.start(wait_for_lease=False)
        assert await health() == (200, "ok")
        await clock.advance(31)  # 3 x renew_interval without renewal
        status, reason = await health()
        assert status == 503 and reason.startswith("writer lease expired 1.0s ago")
        clock.set_ms(rt.dispatcher.lease.expires_at_ms - 1)
        assert (await health())[0] == 200
        rt.dispatcher.stop()
        assert await health() == (503, "dispatcher is stopping")
        await rt.dispatcher.close()
        assert await health() == (503, "dispatcher is stopped")


async def test_messages_endpoint_parameters(tmp_path: Path) -> None:
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=1, messages=120, seed=3))
    reset_memory_stores()
    settings = settings_for(
        tmp_path / "store", "memory://params", tmp_path / "state", tiering__guard="none"
    )
    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.catch_up()
        app = build_read_app(rt, max_count=50)
        async with TestClient(TestServer(app)) as client:

            async def get(query: str) -> tuple[int, Any]:
                reply = await client.get(f"/v1/messages?{query}")
                return reply.status, await reply.json()

            status, doc = await get("topic=SynthTopic0&queue=0&offset=110&count=50")
            assert status == 200
            assert [m["queueOffset"] for m in doc["messages"]] == list(range(110, 120))
            assert (doc["nextOffset"], doc["coldCommit"]) == (120, 120)
            bad = {
                "queue=0&offset=1": "missing parameter 'topic'",
                "topic=SynthTopic0&offset=1": "missing parameter 'queue'",
                "topic=SynthTopic0&queue=0": "exactly one of 'offset' and 'timestamp'",
                "topic=SynthTopic0&queue=0&offset=1&timestamp=1": "exactly one of",
                "topic=SynthTopic0&queue=0&offset=-1": "'offset' must be >= 0",
                "topic=SynthTopic0&queue=0&offset=1&count=51": "'count' must be in 1..50",
                "topic=SynthTopic0&queue=0&timestamp=1&boundary=middle": "lower or upper",
                "topic=a/b&queue=0&offset=1": "contains '/'",
            }
            for query, words in bad.items():
                status, doc = await get(query)
                assert status == 400, query
                assert words in doc["error"], (query, doc)
            status, doc = await get("topic=NoSuchTopic&queue=0&offset=0")
            assert status == 404 and "nothing tiered yet" in doc["error"]
            reply = await client.post("/v1/messages?topic=SynthTopic0&queue=0&offset=0")
            assert reply.status == 405  # read-only
        # A reply stops at max_bytes of records, however many were asked for.
        async with TestClient(TestServer(build_read_app(rt, max_bytes=1))) as client:
            reply = await client.get("/v1/messages?topic=SynthTopic0&queue=0&offset=7&count=5")
            doc = await reply.json()
            assert [m["queueOffset"] for m in doc["messages"]] == [7]
            assert doc["nextOffset"] == 8
