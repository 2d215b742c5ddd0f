"""Retention pressure: how much the broker holds before a queue's oldest untiered message,
in bytes and in seconds of traffic — the same numbers in ``status`` and the metrics."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from tests.support.sidecar.settings import location_args, settings_for
from tieredstore.cli.main import main
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.dispatcher.retention_pressure import hot_oldest
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize

SPEC = SynthSpec(
    topics=2,
    queues=1,
    messages=400,
    body_min=400,
    body_max=400,
    commitlog_file_size=64 << 10,
    compress_over=0,
    interval_ms=10,
    seed=9,
)


def _pending(store: Path, topic: str, start: int) -> tuple[int, int]:
    """Commitlog offset and store time of the message at queue offset ``start``."""
    hot = HotStore(store)
    cl = int(hot.read_units(topic, 0, start, start + 1)["commitlog_offset"][0])
    return cl, hot.read_store_timestamp(cl)


async def _gauges(store: Path, cold: str, state: Path) -> dict[str, tuple[float, float]]:
    """One tick (no catch-up flush; segments far from any limit): the headroom gauges."""
    settings = settings_for(
        store, cold, state, tiering__segment_max_age="1h", tiering__segment_max_bytes="64M"
    )
    clock = VirtualClock(start_ms=SPEC.start_time + 1000)
    async with open_runtime(settings, clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        report = await rt.dispatcher.tick()
        assert report.segments == report.slices == 0
        m = rt.metrics
        return {
            t: (
                m.retention_headroom_bytes.labels(t, "0")._value.get(),
                m.retention_headroom_seconds.labels(t, "0")._value.get(),
            )
            for t in SPEC.topic_names()
        }


def test_headroom_is_what_retention_deletes_before_the_oldest_untiered_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, cold, state = tmp_path / "store", str(tmp_path / "cold"), tmp_path / "state"
    synthesize(store, SPEC)
    assert main(["run", "--once", *location_args(store, cold, state)]) == 0
    tiered = {t: HotStore(store).queue_range(t, 0).max for t in SPEC.topic_names()}
    SyntheticStore.open(store).append(400)
    os.remove(HotStore(store).commitlog_files().files[0].path)  # retention at work
    oldest = hot_oldest(HotStore(store))
    assert oldest is not None and oldest.base == SPEC.commitlog_file_size
    expected = {}
    for topic, start in tiered.items():
        cl, ts = _pending(store, topic, start)
        expected[topic] = (cl - oldest.base, (ts - oldest.store_ms) / 1000)
    assert all(b > 0 and s > 0 for b, s in expected.values())

    capsys.readouterr()
    assert main(["status", "--json", *location_args(store, cold, state)]) == 0
    queues = json.loads(capsys.readouterr().out)["queues"]
    shown = {
        q["topic"]: (q["retention_headroom_bytes"], q["retention_headroom_seconds"]) for q in queues
    }
    assert shown == expected
    assert main(["status", *location_args(store, cold, state)]) == 0
    table = capsys.readouterr().out
    assert "room MiB" in table and "room s" in table

    assert asyncio.run(_gauges(store, cold, state)) == expected

    # Tiered up: nothing at risk (status shows none; the gauge says +Inf).
    assert main(["run", "--once", *location_args(store, cold, state)]) == 0
    capsys.readouterr()
    assert main(["status", "--json", *location_args(store, cold, state)]) == 0
    for q in json.loads(capsys.readouterr().out)["queues"]:
        assert q["retention_headroom_bytes"] is None and q["retention_headroom_seconds"] is None
    inf = float("inf")
    assert asyncio.run(_gauges(store, cold, state)) == dict.fromkeys(tiered, (inf, inf))
