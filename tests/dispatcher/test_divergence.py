"""Hot regression: the queue goes DIVERGED, others go on, committed cold is untouched."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.sidecar.settings import settings_for
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.cold.batch import BatchFence, read_batch_head
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize
from tieredstore.metadata.rows import QueueState


def _snapshot(cold: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(cold)): p.read_bytes()
        for p in sorted(cold.rglob("*"))
        if p.is_file() and p.name != "_lease.json"
    }


def _assert_untouched(cold: Path, before: dict[str, bytes]) -> None:
    """Every object that was in cold is byte for byte as it was; a new object can only be a
    batch fence (a writer with batching on fences the next batch key when it starts), which
    commits nothing."""
    after = _snapshot(cold)
    assert {k: after.get(k) for k in before} == before
    for key in after.keys() - before.keys():
        data = after[key]
        found = read_batch_head(data, key=key, object_size=len(data))
        assert isinstance(found, BatchFence), f"new object {key} in cold"


async def _once(
    store: Path, cold: Path, state: Path
) -> tuple[int, list[str], dict[str, QueueState]]:
    async with open_runtime(settings_for(store, str(cold), state)) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        report = await rt.dispatcher.catch_up()
        states = {str(q): q.state for q in rt.catalogue.queues.all()}
        return report.messages, [str(q) for q in report.diverged], states


async def test_truncated_hot_store_diverges_and_leaves_cold_untouched(tmp_path: Path) -> None:
    spec = SynthSpec(topics=2, queues=2, messages=2000, seed=3)
    store, cold, state = tmp_path / "store", tmp_path / "cold", tmp_path / "state"
    synthesize(store, spec)
    await _once(store, cold, state)
    before = _snapshot(cold)
    # The broker restarts having lost its unflushed tail: the same history, shorter.
    shutil.rmtree(store)
    synthesize(store, SynthSpec(topics=2, queues=2, messages=1500, seed=3))
    tiered, diverged, states = await _once(store, cold, state)
    assert tiered == 0
    assert sorted(diverged) == sorted(states)  # every queue lost offsets cold holds
    assert set(states.values()) == {QueueState.DIVERGED}
    _assert_untouched(cold, before)


async def test_rewritten_hot_record_diverges_only_that_queue(tmp_path: Path) -> None:
    spec = SynthSpec(topics=1, queues=2, messages=600, seed=4)
    store, cold, state = tmp_path / "store", tmp_path / "cold", tmp_path / "state"
    synthesize(store, spec)
    await _once(store, cold, state)
    before = _snapshot(cold)
    # Re-written offsets: the broker re-assigned the same offsets to other bytes.
    shutil.rmtree(store)
    other = synthesize(store, SynthSpec(topics=1, queues=2, messages=600, seed=99))
    other.append(400)
    tiered, diverged, states = await _once(store, cold, state)
    # Hot max still covers cold, but the bytes at the last tiered offsets differ.
    assert sorted(diverged) == sorted(states)
    assert set(states.values()) == {QueueState.DIVERGED}
    assert tiered == 0
    _assert_untouched(cold, before)


async def test_other_queues_go_on(tmp_path: Path) -> None:
    spec = SynthSpec(topics=2, queues=1, messages=800, seed=8)
    store, cold, state = tmp_path / "store", tmp_path / "cold", tmp_path / "state"
    synthesize(store, spec)
    await _once(store, cold, state)
    # Truncate one queue's consume queue below what cold holds (a lost CQ tail).
    cq = store / "consumequeue" / "SynthTopic0" / "0"
    f = sorted(cq.iterdir())[0]
    data = bytearray(f.read_bytes())
    data[20 * 10 :] = bytes(len(data) - 200)
    f.write_bytes(bytes(data))
    live = SyntheticStore.open(store)
    live.append(300)
    tiered, diverged, states = await _once(store, cold, state)
    assert diverged == ["SynthTopic0/0"]
    assert states["SynthTopic1/0"] is QueueState.ACTIVE
    assert tiered > 0
