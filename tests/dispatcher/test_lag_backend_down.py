"""Lag metrics keep moving while the cold store is down (they need only hot + catalogue)."""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterable
from pathlib import Path

from prometheus_client import CollectorRegistry

from tests.support.sidecar.settings import settings_for
from tieredstore.backends.base import Backend, ObjectInfo
from tieredstore.backends.forwarding import ForwardingBackend
from tieredstore.backends.memory import MemoryBackend
from tieredstore.backends.retry import RetryPolicy
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.dispatcher.tiering.batch.writer import BATCH_EVERY
from tieredstore.errors import BackendUnavailableError
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize

START = 1_700_000_000_000
TOPIC = "SynthTopic0"


class OutageBackend(ForwardingBackend):
    """A real backend that, while ``down``, fails every call as an unreachable store does."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.down = False
        self.refused = 0

    def _check(self, op: str, key: str) -> None:
        if self.down:
            self.refused += 1
            raise BackendUnavailableError(f"{op} refused: connection refused", where=key)

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        self._check("read", key)
        return await super().read(key, start, end)

    async def write(self, key: str, data: bytes) -> None:
        self._check("write", key)
        await super().write(key, data)

    async def write_chunks(self, key: str, chunks: AsyncIterable[bytes]) -> int:
        self._check("write", key)
        return await super().write_chunks(key, chunks)

    async def create(self, key: str, data: bytes) -> str:
        self._check("create", key)
        return await super().create(key, data)

    async def size(self, key: str) -> int:
        self._check("size", key)
        return await super().size(key)

    async def exists(self, key: str) -> bool:
        self._check("exists", key)
        return await super().exists(key)

    async def delete(self, key: str) -> None:
        self._check("delete", key)
        await super().delete(key)

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        self._check("list", prefix)
        return await super().list(prefix)


def _gauge(registry: CollectorRegistry, name: str, queue: int) -> float:
    value = registry.get_sample_value(name, {"topic": TOPIC, "queue": str(queue)})
    assert value is not None, name
    return value


def _expected_lag(
    hot: HotStore, queue: int, cold_commit: int, now_ms: int
) -> tuple[int, int, float]:
    rng = hot.queue_range(TOPIC, queue)
    units = hot.read_units(TOPIC, queue, cold_commit, rng.max)
    oldest = hot.read_store_timestamp(int(units["commitlog_offset"][0]))
    return rng.max - cold_commit, int(units["size"].sum()), (now_ms - oldest) / 1000


async def test_lag_gauges_rise_with_the_store_while_every_backend_call_fails(
    tmp_path: Path,
) -> None:
    spec = SynthSpec(topics=1, queues=2, messages=200, body_min=200, body_max=400, seed=5)
    synth = synthesize(tmp_path / "store", spec)
    backend = OutageBackend(MemoryBackend.from_url("memory://lag-outage"))
    clock = VirtualClock(START + 1_000_000)
    settings = settings_for(
        synth.root,
        "memory://unused",
        tmp_path / "state",
        tiering__guard="none",
        tiering__segment_max_age="30s",
        # Ticks are driven by hand here, with no renewal loop: keep the lease valid
        # across the outage so tiering resumes after it.
        lease__renew_interval="1h",
    )
    async with open_runtime(
        settings, clock=clock, backend=backend, retry=RetryPolicy(max_attempts=1)
    ) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.catch_up()
        registry = rt.metrics.registry
        assert _gauge(registry, "tieredstore_queue_lag_messages", 0) == 0
        commits = {row.queue_id: row.cold_commit for row in rt.catalogue.queues.all()}
        assert sorted(commits) == [0, 1]

        backend.down = True
        hot = HotStore(synth.root)
        store = SyntheticStore.open(synth.root)
        seen: list[float] = []
        for round_ in range(3):
            store.append(100, store_time=clock.now_ms())
            # Older than segment_max_age: every queue has a segment ready to upload, so
            # each tick that cuts by age really calls the (failing) backend: every tick with
            # batching off, every BATCH_EVERY-th with it on (TS_TEST_BATCHING).
            await clock.advance(45)
            reports = [await rt.dispatcher.tick() for _ in range(BATCH_EVERY)]
            assert any(r.errors for r in reports), "the outage must surface as tick errors"
            assert sum(r.segments for r in reports) == 0
            for q in (0, 1):
                messages, nbytes, age = _expected_lag(hot, q, commits[q], clock.now_ms())
                assert _gauge(registry, "tieredstore_queue_lag_messages", q) == messages
                assert _gauge(registry, "tieredstore_queue_lag_bytes", q) == nbytes
                assert _gauge(registry, "tieredstore_queue_lag_seconds", q) == age
            seen.append(_gauge(registry, "tieredstore_queue_lag_messages", 0))
            assert round_ == 0 or seen[-1] > seen[-2]
        assert backend.refused > 0
        errors = registry.get_sample_value(
            "tieredstore_errors_total", {"error_class": "BackendUnavailableError"}
        )
        assert errors is not None and errors >= 3

        backend.down = False
        await rt.dispatcher.catch_up()
        assert _gauge(registry, "tieredstore_queue_lag_messages", 0) == 0
        assert _gauge(registry, "tieredstore_queue_lag_bytes", 0) == 0
