"""A diverged store, for the repair tests: the broker lost its tail after it was tiered
and wrote those offsets again, differently.

:data:`SPEC` is written and tiered with :func:`divergence_settings` (small segments, so
the lost tail spans several); then :func:`rewrite_tail` replaces the store with its first
:data:`KEPT` messages and new ones at the same offsets with a later store time. Tiering
again finds both queues of :data:`TOPIC` DIVERGED. (Running the sidecar is the test's
part: the ``diverge`` fixture, ``tests/fixtures_sidecar.py``.)"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from tests.support.sidecar.settings import settings_for
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize
from tieredstore.settings.loader import Settings

__all__ = ["KEPT", "SPEC", "T0", "TOPIC", "divergence_settings", "rewrite_tail"]

T0 = 1_800_000_000_000
SPEC = SynthSpec(
    topics=1,
    queues=2,
    messages=1200,
    body_min=100,
    body_max=500,
    start_time=T0,
    interval_ms=1,
    seed=3,
    commitlog_file_size=64 << 10,
)
KEPT = 900  # the broker keeps this many messages; the rest is re-written differently
TOPIC = "SynthTopic0"


def divergence_settings(tmp_path: Path) -> Settings:
    """The sidecar's settings for the store at ``tmp_path / "store"`` (cold and state
    dirs beside it): 24 KiB segments, no durability guard."""
    return settings_for(
        tmp_path / "store",
        str(tmp_path / "cold"),
        tmp_path / "state",
        tiering__segment_max_bytes="24K",
        tiering__guard="none",
    )


def rewrite_tail(store: Path) -> None:
    """The broker loses all but its first :data:`KEPT` messages and writes the lost
    offsets again: same offsets, other bytes, a later store time."""
    shutil.rmtree(store)
    synthesize(store, replace(SPEC, messages=KEPT))
    SyntheticStore.open(store).append(SPEC.messages - KEPT + 200, store_time=T0 + 10_000_000)
