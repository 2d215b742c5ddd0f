"""``tiering.init_policy``: where a queue seen for the first time starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.sidecar.settings import settings_for
from tieredstore.backends.memory import reset_memory_stores
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.settings.loader import InitPolicy, InitStart

SPEC = SynthSpec(topics=1, queues=1, messages=200, interval_ms=10)
TOPIC = f"{SPEC.topic_prefix}0"


@pytest.mark.parametrize(
    ("text", "policy"),
    [
        ("earliest", InitPolicy(InitStart.EARLIEST)),
        ("latest", InitPolicy(InitStart.LATEST)),
        ("timestamp:1700000000500", InitPolicy(InitStart.TIMESTAMP, 1_700_000_000_500)),
    ],
)
def test_the_setting_parses_into_a_policy_and_prints_back(text: str, policy: InitPolicy) -> None:
    assert InitPolicy.parse(text) == policy
    assert str(policy) == text


@pytest.mark.parametrize("text", ["oldest", "timestamp:", "timestamp:-5", "Latest", "timestamp:1x"])
def test_other_texts_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not earliest, latest or timestamp"):
        InitPolicy.parse(text)


@pytest.mark.parametrize("policy", ["earliest", "latest", "timestamp"])
async def test_a_new_queue_starts_where_the_policy_says(tmp_path: Path, policy: str) -> None:
    synthesize(tmp_path / "store", SPEC)
    hot = HotStore(tmp_path / "store")
    rng = hot.queue_range(TOPIC, 0)
    assert rng.min < rng.max
    # A time between two messages: the first stored at or after it is offset min + 80.
    middle = hot.read_message(TOPIC, 0, rng.min + 80).store_timestamp - SPEC.interval_ms // 2
    setting = f"timestamp:{middle}" if policy == "timestamp" else policy
    expected = {"earliest": rng.min, "latest": rng.max, "timestamp": rng.min + 80}[policy]
    reset_memory_stores()
    settings = settings_for(
        tmp_path / "store", "memory://init", tmp_path / "state", tiering__init_policy=setting
    )
    async with open_runtime(settings) as rt:
        assert str(rt.dispatcher.tiering.init_policy) == setting
        await rt.dispatcher.discover()
        row = rt.catalogue.queues.get(TOPIC, 0)
        assert row is not None
        assert row.init_offset == expected
