"""Damage to committed cold data is loud, and a lost tail heals from hot (issue 34, row 7).

A queue is tiered; then its newest committed manifest is deleted, emptied, or rewritten
to a format no version writes. Before, the sidecar's next start logged it inside an INFO
summary, ``status`` said OK, ``gc`` counted 0 problems (deleted), and the lost tail was
never tiered again although hot still held it. Now, on POSIX and S3:

* each finding is an ERROR line naming the key; ``status`` shows the queue DEGRADED
  with the reason (health CRITICAL); ``tieredstore_queue_cold_damaged`` is 1;
  ``gc --dry-run`` reports the problem (exit 1);
* a **deleted** manifest whose offsets hot still holds: the range is recorded in cold
  (``_retiered``), counted, and tiered again under new attempt names, the manifest
  *created* where the lost one was;
* an **emptied** or **rewritten** manifest: its key is never replaced; the queue stays
  DEGRADED and says why it is not healed.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER, location_args, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.cli.main import main
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.cold.layout import broker_prefix, parse_object_key
from tieredstore.cold.manifest import read_manifest
from tieredstore.hot.synth import SynthSpec
from tieredstore.settings.loader import Settings

from .conftest import Cold

pytestmark = pytest.mark.slow  # two sidecar starts and a gc: over a second

SPEC = SynthSpec(topics=1, queues=2, messages=400, body_min=100, body_max=400, seed=9)
TOPIC = "SynthTopic0"
DAMAGE = {
    "deleted": None,
    "emptied": b"",
    "rewritten": json.dumps({"format_version": 99, "segment": {"start": 0}}).encode(),
}


def _settings(store: Path, cold: Cold, state: Path) -> Settings:
    endpoint = cold.bucket.endpoint_url if cold.bucket is not None else ""
    return settings_for(store, cold.url, state, tiering__segment_max_bytes="16K",
                        tiering__guard="none", cold__endpoint_url=endpoint)  # fmt: skip


def _newest_manifest(cold: Cold) -> str:
    """The key of queue 0's segment with the highest start (names are hashed)."""
    root = f"{broker_prefix(CLUSTER, BROKER)}/{TOPIC}/0/MANIFEST/"
    keys = [k for k in cold.listing() if k.startswith(root)]
    return max(keys, key=lambda k: parse_object_key(k).base_offset)


def _status(
    store: Path, cold: Cold, state: Path, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["status", "--json", *location_args(store, cold.url, state)]) == 0
    return dict(json.loads(capsys.readouterr().out))


@pytest.mark.parametrize("damage", sorted(DAMAGE))
async def test_damage_is_loud_and_a_lost_tail_heals_from_hot(
    damage: str,
    store: Path,
    cold: Cold,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = tmp_path / "state"
    settings = _settings(store, cold, state)
    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.catch_up()
    key = _newest_manifest(cold)
    lost = read_manifest(cold.read(key), key)
    cold.put(key, DAMAGE[damage])
    caplog.clear()
    async with open_runtime(settings) as rt:
        with caplog.at_level(logging.ERROR):
            await rt.dispatcher.start(wait_for_lease=False)
            errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
            assert any(key in line and "cold damage" in line for line in errors), errors
            (metric,) = rt.dispatcher.metrics.queue_damaged.collect()
            samples = metric.samples
            assert [(s.labels["queue"], s.value) for s in samples] == [("0", 1)]
            shown = {
                (q["topic"], q["queue"]): q for q in _status(store, cold, state, capsys)["queues"]
            }
            assert shown[(TOPIC, 0)]["state"] == "DEGRADED"
            assert key in shown[(TOPIC, 0)]["note"]
            assert shown[(TOPIC, 1)]["state"] == "ACTIVE"
            assert _status(store, cold, state, capsys)["health"] == "CRITICAL"
            await rt.dispatcher.catch_up()
        retiered = rt.dispatcher.metrics.cold_ranges_retiered.labels(TOPIC, "0")._value.get()
        if damage == "deleted":  # every committed record is its hot original again
            await assert_cold_matches_hot(rt.backend, rt.hot, CLUSTER, BROKER)
        row = rt.catalogue.queues.get(TOPIC, 0)
        assert row is not None and row.cold_commit == rt.hot.queue_range(TOPIC, 0).max
    records = [k for k in cold.listing() if "/_retiered/" in k]
    if damage == "deleted":  # hot holds the offsets, the key is free: tiered again
        assert retiered == 1 and len(records) == 1
        record = json.loads(cold.read(records[0]))
        assert (record["lost_start_offset"], record["lost_end_offset"]) == (
            lost.start_offset, lost.end_offset,
        )  # fmt: skip
        assert record["lost_manifests"] == [key]
        again = read_manifest(cold.read(key), key)
        assert again.start_offset == lost.start_offset
        assert again.commit_log_key != lost.commit_log_key  # a new attempt's objects
    else:  # the key still holds the damaged bytes: never replaced, not healed
        assert retiered == 0 and records == []
        assert cold.read(key) == DAMAGE[damage]
        assert "never replaced" in shown[(TOPIC, 0)]["note"]


def test_gc_and_run_once_report_a_deleted_committed_manifest(
    store: Path,
    cold: Cold,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TIEREDSTORE_TIERING_BATCHING", "false")  # the damage: a manifest
    state = tmp_path / "state"
    assert main(["run", "--once", *location_args(store, cold.url, state)]) == 0
    key = _newest_manifest(cold)
    cold.put(key, None)
    capsys.readouterr()
    assert main(["gc", "--dry-run", *location_args(store, cold.url, state)]) == 1
    out = capsys.readouterr().out
    assert (
        f"DAMAGED missing_object: the catalogue commits it; the cold store lacks it ({key})" in out
    )
    assert "1 problems" in out
    # The sidecar heals the tail, and `run --once` still says the data was damaged.
    assert main(["run", "--once", "--progress", "off", *location_args(store, cold.url, state)]) == 1
    assert "is DEGRADED: cold damage: missing_object" in capsys.readouterr().err
