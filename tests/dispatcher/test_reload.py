"""SIGHUP reloads: what changes live, what waits for a restart."""

from __future__ import annotations

from pathlib import Path

from tests.support.sidecar.settings import settings_for
from tieredstore.backends.memory import reset_memory_stores
from tieredstore.cli.sidecar.reload import LIVE_KEYS, apply_reload, plan_reload
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.dispatcher.topic_filter import TopicFilter
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.settings.loader import SETTINGS


def test_live_keys_are_settings() -> None:
    assert {s.key for s in SETTINGS} >= LIVE_KEYS


def test_plan_splits_live_changes_from_restart_ones(tmp_path: Path) -> None:
    running = settings_for(tmp_path, "memory://a", tmp_path / "s")
    same = plan_reload(running, running)
    assert not same.changed
    new = settings_for(
        tmp_path,
        "memory://b",
        tmp_path / "s",
        tiering__segment_max_bytes="1M",
        tiering__concurrency=9,
        log__level="debug",
    )
    plan = plan_reload(running, new)
    assert plan.applied == ("tiering.segment_max_bytes", "log.level")
    assert plan.needs_restart == ("cold.url", "tiering.concurrency")
    # Applied keys take the new value; the others keep the running one.
    assert plan.settings.tiering.segment_max_bytes == 1 << 20
    assert plan.settings.log.level == "debug"
    assert plan.settings.cold.url == "memory://a"
    assert plan.settings.tiering.concurrency == 4


async def test_apply_swaps_the_tiering_settings_and_retention_policy(tmp_path: Path) -> None:
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=1, messages=10))
    reset_memory_stores()
    running = settings_for(tmp_path / "store", "memory://reload", tmp_path / "state")
    async with open_runtime(running) as rt:
        new = settings_for(
            tmp_path / "store",
            "memory://reload",
            tmp_path / "state",
            tiering__tick_interval="250ms",
            tiering__exclude_topics="Secret*",
            tiering__concurrency=1,
            retention__default="1h",
        )
        plan = apply_reload(rt, new)
        assert plan.needs_restart == ("tiering.concurrency",)
        assert rt.dispatcher.tiering.tick_interval == 0.25
        assert not TopicFilter.of(rt.dispatcher.discovery.tiering).accepts("SecretTopic")
        assert rt.dispatcher.tiering.concurrency == 4  # its semaphore was built with 4
        assert rt.retention.policy.default_ms == 3_600_000
        assert rt.settings is plan.settings
