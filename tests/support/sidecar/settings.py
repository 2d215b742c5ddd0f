"""A sidecar under test: the names its broker goes by, its location flags, its settings.

``CLUSTER`` / ``BROKER`` are the names every synthetic test store is tiered under.

``tiering.batching`` is on by default, so the suite's readers run their tests over batch
objects. ``TS_TEST_BATCHING=0`` in the environment turns it off in every
:func:`settings_for` that does not set it (``TS_TEST_BATCHING=0 make pytest``: the same
tests over per-queue segments only); ``TS_TEST_BATCHING=1`` turns it on.
"""

from __future__ import annotations

import os
from pathlib import Path

from tieredstore.settings.in_force import SettingsInForce
from tieredstore.settings.loader import Settings, load_settings

CLUSTER = "DefaultCluster"
BROKER = "broker-a"


def location_args(store: Path, cold: Path | str, state: Path) -> list[str]:
    """The command-line flags naming the hot store, cold store, state dir and broker."""
    return [
        "--store", str(store), "--cold", str(cold), "--state-dir", str(state),
        "--cluster", CLUSTER, "--broker", BROKER,
    ]  # fmt: skip


def settings_for(store: Path, cold: str, state: Path, **overrides: object) -> Settings:
    """Settings with small segments so every test cuts several per queue.

    The config backup is off unless a test turns it on (``config_backup__enabled=True``):
    most tests count the objects under the broker prefix.
    """
    values: dict[str, object] = {
        "store.path": str(store),
        "cold.url": cold,
        "cold.cluster": CLUSTER,
        "cold.broker": BROKER,
        "state.dir": str(state),
        "tiering.segment_max_bytes": "64K",
        "tiering.read_batch_bytes": "16K",
        "http.enabled": False,
        "config_backup.enabled": False,
    }
    mode = os.environ.get("TS_TEST_BATCHING")
    if mode in ("0", "1"):
        values["tiering.batching"] = mode == "1"
    values.update({k.replace("__", "."): v for k, v in overrides.items()})
    return load_settings(env={}, overrides=values)


def put_in_force(in_force: SettingsInForce, **overrides: object) -> Settings:
    """Put in force the settings ``in_force`` holds but for ``overrides``
    (``section__name=value``, the value as parsed: seconds as a float, sizes in bytes), as
    a reload would, for every part of the sidecar at once; return them."""
    now = in_force.settings
    values = {**now.values, **{k.replace("__", "."): v for k, v in overrides.items()}}
    new = Settings(values, now.sources)
    in_force.replace(new)
    return new
