"""A damaged batch object is damage to every queue it held: loud, and healed (issue 46).

With batching on, one batch object holds the slices of many queues. It is deleted, cut
short, or has a byte flipped in its head or in one slice, while the broker still holds
those offsets; more messages arrive; the sidecar runs. Before, every queue with a slice
in it stopped tiering for good (or tiered on past its unreadable slice) while ``status``
said ACTIVE, the start logged ``cold damage (no queue) ... nothing is DEGRADED`` and each
tick said ``cold store ... unreachable ... short read``. Now, on POSIX and S3, whether the
damage is there at start (reconcile finds it) or appears after (the tick that reads it
finds it):

* each queue with a slice in the batch is DEGRADED in ``status``, its note and an ERROR
  line naming the batch key and its offsets, ``tieredstore_queue_cold_damaged`` set;
* its slices from the lost one on are withdrawn, a ``_retiered`` record names the batch,
  and the offsets are tiered again from hot: cold covers hot again; a deleted batch's
  key is never taken again (no fence or batch reuses its sequence);
* the queues not in the batch go on tiering; no tick says "unreachable".

``gc`` names the damaged batch; so does ``verify``: a deleted one, which leaves nothing in
cold naming its queues, is ``missing_object`` per queue from the catalogue's slice rows.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.support.sidecar.settings import BROKER, CLUSTER, location_args, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.backends.factory import open_cold
from tieredstore.cli.main import main
from tieredstore.cli.sidecar.runtime import Runtime, open_runtime
from tieredstore.cold.batch import BatchHead
from tieredstore.cold.history import Committed, read_batch
from tieredstore.cold.layout import batch_prefix, parse_batch_key
from tieredstore.findings import FindingKind
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize
from tieredstore.settings.loader import Settings
from tieredstore.verifier.job import verify
from tieredstore.verifier.outcome import Anomaly
from tieredstore.verifier.vocabulary import Verdict, VerifyOptions

from .conftest import Cold

pytestmark = pytest.mark.slow  # two sidecar runs per case: over a second

SPEC = SynthSpec(topics=1, queues=6, messages=300, body_min=20, body_max=200, seed=46)
TOPIC = "SynthTopic0"
HIT = (0, 1, 2, 3)  # the queues with a slice in the damaged batch
SPARED = (4, 5)  # the others: their newest slice is in an older, intact batch
DAMAGES = ("deleted", "truncated", "head_byte", "slice_byte")


def _settings(store: Path, cold: Cold, state: Path) -> Settings:
    endpoint = cold.bucket.endpoint_url if cold.bucket is not None else ""
    return settings_for(store, cold.url, state, tiering__guard="none",
                        tiering__batching=True, cold__endpoint_url=endpoint)  # fmt: skip


async def _newest_batch(settings: Settings) -> tuple[str, BatchHead]:
    """The key and head of the batch object of the highest sequence."""
    prefix = batch_prefix(CLUSTER, BROKER) + "/"
    async with open_cold(settings.cold) as b:
        listed = {parse_batch_key(i.key, prefix): i for i in await b.list(prefix)}
        info = listed[max(s for s in listed if s is not None)]
        head = await read_batch(b, info.key, info.size)
    assert isinstance(head, BatchHead)
    return info.key, head


def _damage(cold: Cold, key: str, head: BatchHead, damage: str) -> None:
    """Damage the batch object at ``key`` around tieredstore."""
    if damage == "deleted":
        cold.put(key, None)
        return
    data = bytearray(cold.read(key))
    if damage == "truncated":
        cold.put(key, bytes(data[: len(data) - 100]))
        return
    if damage == "head_byte":
        at = head.data_offset // 2  # inside the index
    else:  # a byte of queue 0's slice, inside its commit log bytes
        (part,) = [p for p in head.index.slices if p.queue_id == 0]
        at = Committed.of_slice(head, part).commit_log.at + 10
    data[at] ^= 0xFF
    cold.put(key, bytes(data))


def _status(
    store: Path, cold: Cold, state: Path, capsys: pytest.CaptureFixture[str]
) -> dict[Any, Any]:
    capsys.readouterr()
    args = location_args(store, cold.url, state)
    assert main(["status", "--json", *args]) == 0
    shown = json.loads(capsys.readouterr().out)
    return {(q["topic"], q["queue"]): q for q in shown["queues"]}


async def _tier(settings: Settings) -> None:
    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        assert not (await rt.dispatcher.catch_up()).errors


def _damaged_gauges(rt: Runtime) -> dict[str, str]:
    (metric,) = rt.dispatcher.metrics.queue_damaged.collect()
    return {s.labels["queue"]: s.labels["kind"] for s in metric.samples if s.value == 1}


@pytest.mark.parametrize("when", ["start", "tick"])
@pytest.mark.parametrize("damage", DAMAGES)
async def test_a_damaged_batch_degrades_and_heals_every_queue_it_held(
    damage: str,
    when: str,
    store: Path,
    cold: Cold,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = _settings(store, cold, tmp_path / "state")
    await _tier(settings)  # batch 1: every queue's slice
    synth = SyntheticStore.open(store)
    synth.append(queues=[(TOPIC, q) for q in HIT] * 10)
    await _tier(settings)  # batch 2 (the one damaged): the slices of HIT only
    key, head = await _newest_batch(settings)
    assert sorted(p.queue_id for p in head.index.slices) == list(HIT)
    if when == "start":
        _damage(cold, key, head, damage)
    synth.append(queues=[(TOPIC, q) for q in (*HIT, *SPARED)] * 10)  # more messages arrive
    caplog.clear()
    async with open_runtime(settings) as rt:
        with caplog.at_level(logging.WARNING):
            await rt.dispatcher.start(wait_for_lease=False)
            if when == "tick":
                _damage(cold, key, head, damage)
            report = await rt.dispatcher.catch_up()
        lines = [r.getMessage() for r in caplog.records]
        assert not [line for line in lines if "unreachable" in line], lines
        assert not report.errors and not report.diverged
        for q in HIT:  # one ERROR line per queue naming the key and the queue
            said = [line for line in lines if "cold damage" in line and f"{TOPIC}/{q}" in line]
            assert said and all(key in line for line in said), lines
        assert sorted(_damaged_gauges(rt)) == [str(q) for q in HIT]
        retiered = rt.dispatcher.metrics.cold_ranges_retiered
        assert [retiered.labels(TOPIC, str(q))._value.get() for q in HIT] == [1] * len(HIT)
        assert [retiered.labels(TOPIC, str(q))._value.get() for q in SPARED] == [0, 0]
        hot = HotStore(store)
        for q in (*HIT, *SPARED):  # every queue tiered to the broker's end
            row = rt.catalogue.queues.get(TOPIC, q)
            assert row is not None and row.cold_commit == hot.queue_range(TOPIC, q).max
            links = rt.catalogue.slices.of(TOPIC, q)
            assert key not in {c.key for c in links}  # no slice of the damaged batch is read
        if damage in ("deleted", "slice_byte"):  # its head parses (or is gone): read it all
            await assert_cold_matches_hot(rt.backend, hot, CLUSTER, BROKER)
    shown = _status(store, cold, tmp_path / "state", capsys)
    for q in HIT:
        assert shown[(TOPIC, q)]["state"] == "DEGRADED"
        assert key in shown[(TOPIC, q)]["note"]
    for q in SPARED:
        assert shown[(TOPIC, q)]["state"] == "ACTIVE"
    records = [k for k in cold.listing() if "/_retiered/" in k]
    assert len(records) == len(HIT)
    if damage == "deleted":  # its key is never taken again: the records name nothing else
        assert key not in cold.listing()
    for record in map(json.loads, map(cold.read, records)):
        assert record["lost_batches"] == [key]
        assert record["queue_id"] in HIT
        (part,) = [p for p in head.index.slices if p.queue_id == record["queue_id"]]
        assert record["lost_start_offset"] == part.start_offset


def _tier_then_damage(store: Path, cold: Cold, state: Path, damage: str) -> tuple[str, BatchHead]:
    """Tier the store, append to the HIT queues, tier again (a batch holding them), then
    damage that newest batch object; return its key and its head as written."""
    settings = _settings(store, cold, state)
    asyncio.run(_tier(settings))
    SyntheticStore.open(store).append(queues=[(TOPIC, q) for q in HIT] * 10)
    asyncio.run(_tier(settings))
    key, head = asyncio.run(_newest_batch(settings))
    _damage(cold, key, head, damage)
    return key, head


@pytest.mark.parametrize("damage", ["deleted", "truncated", "head_byte"])
def test_gc_names_a_damaged_batch_object(
    damage: str, store: Path, cold: Cold, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    key, _ = _tier_then_damage(store, cold, state, damage)
    capsys.readouterr()
    assert main(["gc", "--dry-run", *location_args(store, cold.url, state)]) == 1
    out = capsys.readouterr().out
    kind = {"deleted": "missing_object", "truncated": "size_mismatch"}.get(
        damage, "corrupt_manifest"
    )
    assert f"DAMAGED {kind}: the catalogue's batch slices are in it" in out
    assert f"({key})" in out
    assert "1 problems" in out


def _verify(spark: SparkSession, store: Path, cold: Cold, state: Path | None) -> list[Anomaly]:
    """``verify`` of the store (the catalogue of ``state`` when given): its anomalies."""
    options = cold.bucket.fsspec_options() if cold.bucket is not None else {}
    opts = VerifyOptions(
        hot=store, cold_url=cold.url, cluster=CLUSTER, broker=BROKER,
        now_ms=time.time_ns() // 1_000_000, metadata_dir=state, storage_options=options,
    )  # fmt: skip
    result = verify(spark, opts)
    assert result.verdict is Verdict.CORRUPT
    return list(result.anomalies)


@pytest.mark.spark
def test_verify_names_a_deleted_batch_object_from_the_catalogue(
    store: Path, cold: Cold, tmp_path: Path, spark: SparkSession
) -> None:
    # Before, a deleted batch showed only as its slices' offsets missing, with no key.
    state = tmp_path / "state"
    key, head = _tier_then_damage(store, cold, state, "deleted")
    missing = [
        a for a in _verify(spark, store, cold, state) if a.anomaly is FindingKind.MISSING_OBJECT
    ]
    assert {a.object_key for a in missing} == {key}  # the intact older batch is no finding
    named = [(a.topic, a.queue_id, a.start, a.end) for a in missing]
    held = [(p.topic, p.queue_id, p.start_offset, p.end_offset) for p in head.index.slices]
    assert sorted(named) == sorted(held) and {q for _, q, _, _ in named} == set(HIT)
    # Without the catalogue, the report says the gap as before: no anomaly names the key.
    assert all(a.object_key != key for a in _verify(spark, store, cold, None))


async def test_a_damaged_tail_the_broker_no_longer_holds_stops_its_queue_once(
    cold: Cold, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Queue 0's newest slice is in a batch deleted after the start, and the broker's
    # retention has deleted its first consume-queue files past that slice's start: the
    # tail cannot be tiered again. The tick that reads it says so once and stops the
    # queue; the next ticks leave it alone (before, each re-read and re-reported it).
    # Queue 1 goes on.
    spec = SynthSpec(topics=1, queues=2, messages=0, body_min=20, body_max=200, seed=8,
                     cq_file_size=20 * CQ_UNIT_SIZE)  # fmt: skip
    store = synthesize(tmp_path / "store", spec).root
    synth = SyntheticStore.open(store)
    synth.append(queues=[(TOPIC, q) for q in (0, 1)] * 20)
    settings = _settings(store, cold, tmp_path / "state")
    await _tier(settings)  # batch 1: both queues' [0, 20)
    synth.append(queues=[(TOPIC, 0)] * 30)
    await _tier(settings)  # batch 2 (the one lost): queue 0's [20, 50)
    key, head = await _newest_batch(settings)
    assert [(p.queue_id, p.start_offset) for p in head.index.slices] == [(0, 20)]
    synth.append(queues=[(TOPIC, q) for q in (0, 1)] * 10)  # more messages arrive
    caplog.clear()
    async with open_runtime(settings) as rt:
        with caplog.at_level(logging.WARNING):
            await rt.dispatcher.start(wait_for_lease=False)
            _damage(cold, key, head, "deleted")
            for f in sorted((store / "consumequeue" / TOPIC / "0").iterdir())[:2]:
                f.unlink()  # retention: queue 0's offsets [0, 40) are gone from hot
            assert HotStore(store).queue_range(TOPIC, 0).min == 40
            first = await rt.dispatcher.catch_up()
            said = [r.getMessage() for r in caplog.records]
            caplog.clear()
            again = await rt.dispatcher.catch_up()
            again_said = [r.getMessage() for r in caplog.records]
        assert not first.errors and not again.errors
        stopped = [line for line in said if f"{TOPIC}/0 STOPPED" in line]
        assert len(stopped) == 1 and key in stopped[0], said
        assert "no longer holds" in stopped[0]
        assert not [line for line in again_said if f"{TOPIC}/0" in line], again_said
        assert rt.dispatcher.states.is_stopped(QueueKey(TOPIC, 0))
        (metric,) = rt.dispatcher.metrics.queue_state.collect()
        states = {s.labels["queue"]: s.labels["state"] for s in metric.samples if s.value}
        assert states == {"0": "STOPPED", "1": "ACTIVE"}
        row = rt.catalogue.queues.get(TOPIC, 1)
        assert row is not None and row.cold_commit == HotStore(store).queue_range(TOPIC, 1).max
