"""RocketMQ issue #8065, replayed deterministically on a virtual clock.

Upstream, a new topic's cold consume queue is created only on the dispatcher's first
cycle after the queue appears while its empty cold commitlog segment exists at once; an
empty segment has max timestamp ``Long.MAX_VALUE``, which the 60 s expiry job destroys.
With dispatch every 20 s and a 30 s group-commit wait, batches that land in the wrong
window are never tiered.

Here the same timeline runs against our dispatcher: a dispatch tick every 20 s, a
retention pass every 60 s, a 30 s group-commit wait (``tiering.segment_max_age``), the
lease renewed every 10 s, and a topic that does not exist until its first of three
batches of 1,000 messages. The batches land in each of the three 20 s windows between
two retention passes — strictly inside them, and exactly on their boundaries — and
events at the same instant run in every order. Every message reaches cold, no queue or
segment is destroyed, and cold covers hot exactly. With a retention of a few seconds,
segments do expire, but only after their messages reached cold, never the newest of
a queue, never leaving a hole.
"""

from __future__ import annotations

import itertools
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot, read_cold
from tieredstore.cli.sidecar.runtime import Runtime, open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.dispatcher.maintenance.retention import DestroyQueue, ExpireSegment
from tieredstore.dispatcher.tiering.planner import SegmentPlan
from tieredstore.errors import ConfigError
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.hot.synth import SyntheticStore, SynthSpec
from tieredstore.metadata.rows import QueueState

T0 = 1_800_000_000_000
TICK_S, RETENTION_PASS_S, GROUP_COMMIT_S, RENEW_S = 20, 60, 30, 10
BATCH = 1000
SPEC = SynthSpec(
    topics=1,
    queues=4,
    messages=BATCH,
    body_min=16,
    body_max=96,
    start_time=T0,
    interval_ms=0,  # a batch lands at one instant
    seed=8065,
    topic_prefix="NewTopic",
)

#: Batch moments (seconds after the start). A retention pass runs at 60, 120, 180, ...;
#: ticks at every multiple of 20, so the passes at 60 and 120 bound three windows:
#: (60, 80), (80, 100), (100, 120). One batch per window, then the same on the exact
#: boundaries, and a topic born before the very first pass.
SCHEDULES = {
    "on-boundaries": (60.0, 80.0, 100.0),
    "1ms-after-boundaries": (60.001, 80.001, 100.001),
    "mid-windows": (70.0, 90.0, 110.0),
    "1ms-before-next": (79.999, 99.999, 119.999),
    "on-closing-boundaries": (80.0, 100.0, 120.0),
    "before-first-pass": (5.0, 25.0, 45.0),
    "first-boundaries": (0.0, 20.0, 40.0),
}

#: Order of events that fall on the same instant.
ORDERS = {
    "produce-tick-retention": ("produce", "tick", "retention"),
    "tick-retention-produce": ("tick", "retention", "produce"),
    "retention-produce-tick": ("retention", "produce", "tick"),
    "tick-produce-retention": ("tick", "produce", "retention"),
}


@dataclass
class Outcome:
    tiered: dict[QueueKey, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    expired: list[tuple[int, ExpireSegment]] = field(default_factory=list)
    destroyed: list[DestroyQueue] = field(default_factory=list)
    #: Each queue's segments and batch slices in the catalogue at the end, by offset.
    final: dict[QueueKey, list[tuple[int, int]]] = field(default_factory=dict)


def _timeline(batches: tuple[float, ...], order: tuple[str, ...]) -> list[tuple[int, str]]:
    """Every event as (ms after start, kind), sorted by time then the chosen order."""
    end_s = int(max(batches)) + 4 * RETENTION_PASS_S
    events = [(round(b * 1000), "produce") for b in batches]
    events += [(s * 1000, "tick") for s in range(0, end_s + 1, TICK_S)]
    events += [
        (s * 1000, "retention") for s in range(RETENTION_PASS_S, end_s + 1, RETENTION_PASS_S)
    ]
    events += [(s * 1000, "renew") for s in range(RENEW_S, end_s + 1, RENEW_S)]
    rank = {kind: i for i, kind in enumerate(("renew", *order))}
    return sorted(events, key=lambda e: (e[0], rank[e[1]]))


async def _check_no_hole(rt: Runtime) -> None:
    """The bucket's committed segments are contiguous per queue (read_cold asserts it) and
    agree with the catalogue; no queue row is destroyed."""
    cold = await read_cold(rt.backend, CLUSTER, BROKER)
    for row in rt.catalogue.queues.all():
        assert row.state is QueueState.ACTIVE, f"{row} is {row.state}"
        if row.cold_commit == row.init_offset:
            continue
        held = [
            *rt.catalogue.segments.of(row.topic, row.queue_id),
            *rt.catalogue.slices.of(row.topic, row.queue_id),
        ]
        assert held, f"{row}: every segment and batch slice of a live queue is gone"
        q = cold[QueueKey(row.topic, row.queue_id)]
        assert (q.start, q.end) == (row.cold_min, row.cold_commit)


async def _run(
    tmp_path: Path, batches: tuple[float, ...], order: str, retention: str, **overrides: object
) -> Outcome:
    store = SyntheticStore.create(tmp_path / "store", SPEC)  # the topic does not exist yet
    assert HotStore(store.root).queues() == []
    clock = VirtualClock(start_ms=T0)
    settings = settings_for(
        store.root,
        f"memory://8065-{uuid.uuid4().hex}",
        tmp_path / "state",
        tiering__tick_interval=f"{TICK_S}s",
        tiering__segment_max_age=f"{GROUP_COMMIT_S}s",
        tiering__segment_max_bytes="64M",
        retention__interval=f"{RETENTION_PASS_S}s",
        retention__default=retention,
        lease__renew_interval=f"{RENEW_S}s",
        **overrides,
    )
    out = Outcome()

    def tiered(plan: SegmentPlan, _sliced: bool) -> None:
        out.tiered[plan.queue].append((plan.start, plan.end))

    async with open_runtime(settings, clock=clock, on_segment=tiered) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        for at, kind in _timeline(batches, ORDERS[order]):
            clock.set_ms(T0 + at)
            if kind == "renew":
                await rt.dispatcher.lease.renew()
            elif kind == "produce":
                store.append(BATCH, store_time=T0 + at)
            elif kind == "tick":
                report = await rt.dispatcher.tick()
                assert not (report.errors or report.diverged or report.lost), report
            else:
                passed = await rt.retention.run_pass()
                out.expired += [(clock.now_ms(), d) for d in passed.expired]
                out.destroyed += passed.destroyed
            await _check_no_hole(rt)
        hot = rt.hot
        for key in hot.queues():
            row = rt.catalogue.queues.get(key.topic, key.queue_id)
            assert row is not None
            assert row.cold_commit == hot.queue_range(key.topic, key.queue_id).max
            segments = rt.catalogue.segments.of(key.topic, key.queue_id)
            slices = rt.catalogue.slices.of(key.topic, key.queue_id)
            out.final[key] = sorted(
                [(s.start_offset, s.end_offset) for s in segments]
                + [(s.start_offset, s.end_offset) for s in slices]
            )
        if not out.expired:
            await assert_cold_matches_hot(rt.backend, hot, CLUSTER, BROKER)
        else:
            await assert_cold_matches_hot(rt.backend, hot, CLUSTER, BROKER, expect_full=False)
    return out


def _assert_every_message_reached_cold(out: Outcome, store: Path) -> None:
    """Tiered ranges tile each queue's [0, hot max) exactly: nothing skipped, all 3000."""
    hot = HotStore(store)
    assert sorted(out.tiered) == hot.queues() and len(out.tiered) == SPEC.queues
    total = 0
    for key, ranges in out.tiered.items():
        assert ranges[0][0] == 0
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        assert ranges[-1][1] == hot.queue_range(key.topic, key.queue_id).max
        total += ranges[-1][1]
    assert total == 3 * BATCH


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_every_message_reaches_cold_and_nothing_is_destroyed(
    tmp_path: Path, schedule: str, order: str
) -> None:
    out = await _run(tmp_path, SCHEDULES[schedule], order, retention="72h")
    _assert_every_message_reached_cold(out, tmp_path / "store")
    assert out.expired == [] and out.destroyed == []
    assert out.final == out.tiered  # every segment or slice ever tiered is still there


@pytest.mark.slow
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("schedule", SCHEDULES)
async def test_with_a_retention_of_seconds_nothing_expires_before_reaching_cold(
    tmp_path: Path, schedule: str, order: str
) -> None:
    # Batching off: this is about the order in which segments expire, and retention never
    # expires a batch slice (expiry stops at a queue's first uncompacted slice).
    out = await _run(tmp_path, SCHEDULES[schedule], order, retention="5s", tiering__batching=False)
    _assert_every_message_reached_cold(out, tmp_path / "store")
    assert out.destroyed == []
    expired: dict[QueueKey, list[tuple[int, int]]] = defaultdict(list)
    for at, d in out.expired:
        assert d.max_store_timestamp < at - 5000
        key = QueueKey(d.segment.topic, d.segment.queue_id)
        expired[key].append((d.segment.start_offset, d.segment.end_offset))
    for key, tiered in out.tiered.items():
        # Every segment but the newest was tiered whole, then expired, oldest first;
        # the newest is all that is left and ends at the hot max.
        assert expired[key] == tiered[:-1]
        assert out.final[key] == tiered[-1:]


def test_synth_places_a_batch_at_a_chosen_store_time(tmp_path: Path) -> None:
    """The scenario's tool: ``append(n, store_time=...)`` stamps the batch, nothing else."""
    spec = SynthSpec(topics=1, queues=1, messages=3, start_time=T0, interval_ms=7, seed=1)
    plain = SyntheticStore.create(tmp_path / "plain", spec)
    plain.append(3)
    placed = SyntheticStore.create(tmp_path / "placed", spec)
    placed.append(3, store_time=T0 + 60_000)
    a, b = HotStore(plain.root), HotStore(placed.root)
    for q in range(3):
        ma, mb = a.read_message("SynthTopic0", 0, q), b.read_message("SynthTopic0", 0, q)
        assert mb.store_timestamp == T0 + 60_000 + q * 7
        assert ma.store_timestamp == T0 + q * 7
        assert mb.born_timestamp - mb.store_timestamp == ma.born_timestamp - ma.store_timestamp
        assert (mb.body, mb.properties) == (ma.body, ma.properties)
    assert b.checkpoint().physic_msg_timestamp == T0 + 60_000 + 2 * 7
    reopened = SyntheticStore.open(placed.root)
    with pytest.raises(ConfigError, match="before the last store time"):
        reopened.append(1, store_time=T0)
