"""Segment uploads through a whole runtime: paced by ``tiering.max_bytes_per_second`` on a
virtual clock, and every cold request and byte counted in the sidecar's metrics."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.sidecar.settings import settings_for
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.cli.sidecar.reload import apply_reload
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.hot.synth import SynthSpec, synthesize

RATE = 64 << 10


def _sample(rt: object, name: str, **labels: str) -> float:
    from tieredstore.cli.sidecar.runtime import Runtime

    assert isinstance(rt, Runtime)
    value = rt.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_uploads_are_paced_and_counted(tmp_path: Path) -> None:
    spec = SynthSpec(topics=1, queues=2, messages=800, body_min=200, body_max=600)
    store = synthesize(tmp_path / "store", spec)
    reset_memory_stores()
    clock = VirtualClock(start_ms=0)
    settings = settings_for(
        store.root,
        "memory://paced",
        tmp_path / "state",
        tiering__max_bytes_per_second=RATE,
        tiering__concurrency=2,
        tiering__guard="none",
    )
    async with open_runtime(settings, clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        catch_up = asyncio.create_task(rt.dispatcher.catch_up())
        while not catch_up.done():
            # Time moves only while an upload waits for tokens (the lease renewal loop
            # is the one other sleeper); otherwise hot reads in threads get to finish.
            if clock.sleepers > 1:
                await clock.advance(0.01)
            else:
                await asyncio.sleep(0)
        report = await catch_up
        elapsed_s = clock.now_ms() / 1000
        objects = await MemoryBackend("paced").list()
        paced = sum(o.size for o in objects if not o.key.endswith("_lease.json"))
        assert report.segments >= 4 and not report.errors
        # One second's worth went at once, the rest at RATE (to the clock's 10 ms steps).
        assert elapsed_s == pytest.approx((paced - RATE) / RATE, abs=0.05)
        assert _sample(rt, "tieredstore_upload_throttled_seconds_total") > 0
        assert _sample(rt, "tieredstore_upload_rate_limit_bytes_per_second") == RATE
        # Every object in cold took at least one write request.
        writes = _sample(rt, "tieredstore_backend_requests_total", operation="write")
        assert writes >= len(objects)  # the segment objects, manifests and the lease
        written = _sample(rt, "tieredstore_backend_bytes_total", operation="write")
        assert written >= sum(o.size for o in objects)
        assert _sample(rt, "tieredstore_backend_requests_total", operation="list") >= 1

        new = settings_for(
            store.root,
            "memory://paced",
            tmp_path / "state",
            tiering__max_bytes_per_second="1M",
            tiering__concurrency=2,
            tiering__guard="none",
        )
        plan = apply_reload(rt, new)
        assert plan.applied == ("tiering.max_bytes_per_second",)
        assert rt.upload_limit.rate == 1 << 20
        assert _sample(rt, "tieredstore_upload_rate_limit_bytes_per_second") == 1 << 20
