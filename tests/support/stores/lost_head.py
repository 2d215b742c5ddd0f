"""A store that loses messages before they are tiered: the reproduction of a PAUSED
queue (``resume --accept-loss``). The test writes :data:`SPEC`, tiers it completely
(``run --once``), then calls :func:`lose_untiered_head`: the broker deletes untiered head
files and goes on, so the queue's next tiering finds the exact lost range."""

from __future__ import annotations

import os
from pathlib import Path

from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SyntheticStore, SynthSpec

__all__ = ["SPEC", "TOPIC", "lose_untiered_head"]

SPEC = SynthSpec(
    topics=1,
    queues=1,
    messages=300,
    body_min=500,
    body_max=500,
    commitlog_file_size=64 << 10,
    compress_over=0,
    seed=5,
)
TOPIC = SPEC.topic_names()[0]


def lose_untiered_head(store: Path) -> tuple[int, int]:
    """Once ``store`` is tiered completely: append 400 untiered messages, delete the
    commitlog files that hold the first of them, append 1000 more. Returns the lost range
    ``[tiered, hot min)``."""
    tiered = HotStore(store).queue_range(TOPIC, 0).max
    live = SyntheticStore.open(store)
    live.append(400)
    hot = HotStore(store)
    first_new = int(hot.read_units(TOPIC, 0, tiered, tiered + 1)["commitlog_offset"][0])
    for f in hot.commitlog_files().files:
        if f.base <= first_new + 2 * SPEC.commitlog_file_size:
            os.remove(f.path)
    live.append(1000)
    hot_min = HotStore(store).queue_range(TOPIC, 0).min
    assert hot_min > tiered
    return tiered, hot_min
