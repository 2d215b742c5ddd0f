"""Property: any interleaving of produce / tick / retention pass / crash+restart on a
virtual clock never loses a message younger than retention and never leaves a hole.

A crash is a runtime closed and a new one opened on the same state directory and cold
store — sometimes with the catalogue deleted (so the restart rebuilds it from the
manifests), sometimes in the middle of a retention pass, after any deletion step.
After every operation:

* each queue's committed cold segments are contiguous (the bucket and the catalogue
  agree on ``[cold_min, cold_commit)``), every queue row is ACTIVE and none has a
  segment left DELETING;
* every offset below a queue's cold range is older than retention (it expired
  legitimately), and a queue that was ever tiered still has a segment.

At the end a flushing catch-up tiers the rest: each queue's cold range ends at its hot
max, every segment equals the hot records, and the segments ever tiered tile each
queue from offset 0 — every message reached cold.
"""

from __future__ import annotations

import asyncio
import itertools
import tempfile
import uuid
from collections import defaultdict
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.sidecar.lease_time import advance
from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot, read_cold
from tieredstore.cli.sidecar.runtime import Runtime, open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.dispatcher.maintenance.retention import DeletionStep
from tieredstore.dispatcher.tiering.planner import SegmentPlan
from tieredstore.hot.store import QueueKey
from tieredstore.hot.synth import SyntheticStore, SynthSpec
from tieredstore.metadata.catalogue import DB_NAME
from tieredstore.metadata.rows import QueueState, SegmentRow, SegmentStatus
from tieredstore.settings.loader import Settings

T0 = 1_800_000_000_000
RETENTION_S = 30
SPEC = SynthSpec(
    topics=1,
    queues=2,
    messages=1,
    body_min=16,
    body_max=64,
    start_time=T0,
    interval_ms=0,
    seed=77,
    topic_prefix="Prop",
)

Op = tuple[str, int]
# Sampled, not uniform: the boundaries of group commit (30 s) and retention matter most.
COUNTS = st.sampled_from([60, 25, 7, 1])
SECONDS = st.sampled_from([45, 31, 100, 30, 29, 10, 1])
OPS = st.one_of(
    st.tuples(st.just("produce"), COUNTS),
    st.tuples(st.just("advance"), SECONDS),
    st.tuples(st.just("tick"), st.just(0)),
    st.tuples(st.just("retention"), st.just(0)),
    st.tuples(st.just("crash"), st.integers(0, 1)),  # 1: the catalogue is lost too
    st.tuples(st.just("crash_in_retention"), st.integers(1, 12)),  # after the n-th step
)


@st.composite
def rounds(draw: st.DrawFn) -> list[Op]:
    """A round: produce, advance, tick and a retention pass (and maybe a crash) in a
    random order, so that even short examples reach expiry and crash often."""
    ops: list[Op] = [
        ("produce", draw(COUNTS)),
        ("advance", draw(SECONDS)),
        ("tick", 0),
        ("retention", 0),
    ]
    crash = draw(st.sampled_from(["none", "crash", "lose-catalogue", "in-retention"]))
    if crash == "crash":
        ops.append(("crash", 0))
    elif crash == "lose-catalogue":
        ops.append(("crash", 1))
    elif crash == "in-retention":
        ops.append(("crash_in_retention", draw(st.integers(1, 12))))
    return draw(st.permutations(ops))


#: Rounds, with free-form operations between them.
INTERLEAVINGS = st.lists(
    st.tuples(rounds(), st.lists(OPS, max_size=2)).map(lambda r: [*r[0], *r[1]]),
    min_size=2,
    max_size=6,
)


class CrashError(Exception):
    """Stands for the process dying."""


@dataclass
class World:
    root: Path
    store: SyntheticStore
    clock: VirtualClock
    settings: Settings
    crash_after: list[int] = field(default_factory=list)  # countdown of deletion steps
    dropped: int = 0  # segments whose deletion completed
    crashed_in_retention: int = 0
    tiered: dict[QueueKey, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))

    def on_segment(self, plan: SegmentPlan, _sliced: bool) -> None:
        self.tiered[plan.queue].append((plan.start, plan.end))

    def on_step(self, _seg: SegmentRow, step: DeletionStep) -> None:
        self.dropped += step is DeletionStep.DROPPED
        if self.crash_after:
            self.crash_after[0] -= 1
            if self.crash_after[0] == 0:
                self.crash_after.clear()
                self.crashed_in_retention += 1
                raise CrashError


async def _open(world: World, stack: AsyncExitStack) -> Runtime:
    rt = await stack.enter_async_context(
        open_runtime(
            world.settings,
            clock=world.clock,
            on_segment=world.on_segment,
            on_deletion_step=world.on_step,
        )
    )
    await rt.dispatcher.start(wait_for_lease=False)
    return rt


async def _check(rt: Runtime, world: World) -> None:
    cold = await read_cold(rt.backend, CLUSTER, BROKER)  # asserts contiguity per queue
    cutoff = world.clock.now_ms() - RETENTION_S * 1000
    for key in rt.hot.queues():
        rng = rt.hot.queue_range(key.topic, key.queue_id)
        row = rt.catalogue.queues.get(key.topic, key.queue_id)
        q = cold.get(key)
        if q is None:
            assert not world.tiered[key], f"{key}: tiered once, now has no segment at all"
            assert row is None or row.cold_min == row.cold_commit
            continue
        assert row is not None and row.state is QueueState.ACTIVE
        assert (row.cold_min, row.cold_commit) == (q.start, q.end), f"{key}: catalogue drift"
        segs = rt.catalogue.segments.of(key.topic, key.queue_id)
        assert all(s.status is SegmentStatus.COMMITTED for s in segs)
        assert q.end <= rng.max
        if q.start > 0:  # what is gone from cold was older than retention
            units = rt.hot.read_units(key.topic, key.queue_id, q.start - 1, q.start)
            newest_gone = rt.hot.read_store_timestamp(int(units["commitlog_offset"][0]))
            assert newest_gone < cutoff, f"{key}: offset {q.start - 1} lost before retention"


async def _play(ops: list[Op], root: Path) -> World:
    store = SyntheticStore.create(root / "store", SPEC)
    clock = VirtualClock(start_ms=T0)
    world = World(
        root,
        store,
        clock,
        settings_for(
            store.root,
            f"memory://prop-{uuid.uuid4().hex}",
            root / "state",
            tiering__segment_max_age="30s",
            tiering__segment_max_bytes="2K",
            tiering__compact_after="30s",
            retention__default=f"{RETENTION_S}s",
            lease__renew_interval="10s",
        ),
    )
    stack = AsyncExitStack()
    try:
        rt = await _open(world, stack)
        for kind, arg in ops:
            if kind == "produce":
                store.append(arg, store_time=clock.now_ms())
            elif kind == "advance":
                await advance(rt.dispatcher.lease, clock, arg)
            elif kind == "tick":
                report = await rt.dispatcher.tick()
                assert not (report.errors or report.diverged or report.lost), report
            elif kind == "retention":
                await rt.retention.run_pass()
            elif kind == "compact":  # batch slices (TS_TEST_BATCHING) rewritten as segments
                assert not (await rt.compactor.run_pass()).problems
            else:
                if kind == "crash_in_retention":
                    world.crash_after[:] = [arg]
                    with suppress(CrashError):
                        await rt.retention.run_pass()
                    world.crash_after.clear()
                await stack.aclose()
                if kind == "crash" and arg:
                    for f in (root / "state").glob(DB_NAME + "*"):
                        f.unlink()
                stack = AsyncExitStack()
                rt = await _open(world, stack)
            await _check(rt, world)
        # The end: a flushing catch-up tiers whatever is left; cold is exact.
        await rt.dispatcher.catch_up()
        await _check(rt, world)
        cold = await assert_cold_matches_hot(rt.backend, rt.hot, CLUSTER, BROKER, expect_full=False)
        for key in rt.hot.queues():
            hot_max = rt.hot.queue_range(key.topic, key.queue_id).max
            assert cold[key].end == hot_max
            ranges = world.tiered[key]
            assert ranges[0][0] == 0 and ranges[-1][1] == hot_max
            assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges)), ranges
    finally:
        await stack.aclose()
    return world


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(INTERLEAVINGS)
def test_no_interleaving_loses_young_messages_or_leaves_a_hole(groups: list[list[Op]]) -> None:
    ops = [op for group in groups for op in group]
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_play([("produce", 5), *ops, ("produce", 3)], Path(tmp)))


@pytest.mark.slow
def test_a_long_fixed_interleaving() -> None:
    """One deterministic long run that surely expires, crashes mid-pass and rebuilds."""
    ops: list[Op] = []
    for i in range(6):
        # Compaction before retention: a batch slice (TS_TEST_BATCHING) never expires.
        ops += [("produce", 30), ("advance", 35), ("tick", 0), ("advance", 60), ("compact", 0)]
        ops += [("crash_in_retention", 1 + i) if i % 2 else ("retention", 0)]
        ops += [("crash", i % 2), ("advance", 40), ("tick", 0), ("retention", 0)]
    with tempfile.TemporaryDirectory() as tmp:
        world = asyncio.run(_play(ops, Path(tmp)))
    assert world.dropped >= 6 and world.crashed_in_retention >= 2
