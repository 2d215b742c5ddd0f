"""Group-commit rules of the planner, on synthetic stores."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tieredstore.dispatcher.tiering.commitlog_pass import Spooled
from tieredstore.dispatcher.tiering.planner import (
    CutReason,
    HotDataLost,
    Limits,
    SegmentPlan,
    Wait,
    WaitReason,
    plan_segment,
    units_unchanged,
)
from tieredstore.dispatcher.tiering.rounds import _recheck_units
from tieredstore.errors import DivergedError, StoreError
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize
from tieredstore.metadata.rows import QueueRow, QueueState

Q = QueueKey("SynthTopic0", 0)
START = 1_700_000_000_000


def _store(tmp_path: Path) -> SyntheticStore:
    spec = SynthSpec(topics=1, queues=1, messages=200, body_min=100, body_max=100, compress_over=0)
    return synthesize(tmp_path / "store", spec)


def _plan(
    hot: HotStore,
    commit: int,
    limits: Limits,
    *,
    now: int,
    guard: int | None = None,
    flush: bool = False,
) -> SegmentPlan | Wait | HotDataLost:
    return plan_segment(hot, Q, commit, limits, now_ms=now, guard_ts=guard, flush=flush)


def test_idle_young_age_and_flush(tmp_path: Path) -> None:
    hot = HotStore(_store(tmp_path).root)
    limits = Limits(max_bytes=1 << 20, max_messages=10_000, max_age_ms=60_000)
    assert _plan(hot, 200, limits, now=START) == Wait(WaitReason.IDLE, hot.queue_range(Q.topic, 0))
    young = _plan(hot, 0, limits, now=START + 59_999)
    assert isinstance(young, Wait)
    assert young.reason is WaitReason.YOUNG
    assert (young.pending, young.oldest_ms) == (200, START)
    aged = _plan(hot, 0, limits, now=START + 60_000)
    assert isinstance(aged, SegmentPlan)
    assert (aged.start, aged.end, aged.reason) == (0, 200, CutReason.AGE)
    flushed = _plan(hot, 50, limits, now=START, flush=True)
    assert isinstance(flushed, SegmentPlan)
    assert (flushed.start, flushed.end, flushed.reason) == (50, 200, CutReason.FLUSH)


def test_without_age_cuts_an_old_segment_waits_but_a_full_one_is_cut(tmp_path: Path) -> None:
    """A tick between two batch ticks: age cuts off, size cuts and flushes unchanged."""
    hot = HotStore(_store(tmp_path).root)
    limits = Limits(max_bytes=1 << 20, max_messages=10_000, max_age_ms=60_000, age_cuts=False)
    old = _plan(hot, 0, limits, now=START + 3_600_000)
    assert isinstance(old, Wait) and old.reason is WaitReason.YOUNG
    full = _plan(hot, 0, replace(limits, max_messages=64), now=START)
    assert isinstance(full, SegmentPlan) and full.reason is CutReason.MESSAGES
    flushed = _plan(hot, 0, limits, now=START, flush=True)
    assert isinstance(flushed, SegmentPlan) and flushed.reason is CutReason.FLUSH


def test_byte_limit_cuts_exactly(tmp_path: Path) -> None:
    hot = HotStore(_store(tmp_path).root)
    sizes = [int(x) for x in hot.read_units(Q.topic, 0, 0, 200)["size"]]
    limits = Limits(max_bytes=sum(sizes[:30]) + 10, max_messages=10_000, max_age_ms=10**9)
    expected, start, acc = [], 0, 0
    for i, size in enumerate(sizes):  # greedy: a segment ends before the record that overflows
        if acc + size > limits.max_bytes:
            expected.append((start, i, CutReason.BYTES))
            start, acc = i, 0
        acc += size
    commit, cuts = 0, []
    while True:
        plan = _plan(hot, commit, limits, now=START)
        if not isinstance(plan, SegmentPlan):
            break
        assert plan.nbytes == sum(sizes[plan.start : plan.end]) <= limits.max_bytes
        cuts.append((plan.start, plan.end, plan.reason))
        commit = plan.end
    assert cuts == expected
    assert len(cuts) >= 6
    tail = _plan(hot, commit, limits, now=START)
    assert isinstance(tail, Wait)
    assert tail.pending == 200 - commit


def test_message_limit(tmp_path: Path) -> None:
    hot = HotStore(_store(tmp_path).root)
    plan = _plan(hot, 0, Limits(max_bytes=1 << 30, max_messages=64, max_age_ms=10**9), now=START)
    assert isinstance(plan, SegmentPlan)
    assert (plan.end, plan.reason) == (64, CutReason.MESSAGES)


def test_record_larger_than_the_byte_limit_is_its_own_segment(tmp_path: Path) -> None:
    hot = HotStore(_store(tmp_path).root)
    plan = _plan(hot, 5, Limits(max_bytes=10, max_messages=100, max_age_ms=10**9), now=START)
    assert isinstance(plan, SegmentPlan)
    assert (plan.start, plan.end, plan.reason) == (5, 6, CutReason.BYTES)


def test_durability_guard(tmp_path: Path) -> None:
    store = _store(tmp_path)
    hot = HotStore(store.root)
    limits = Limits(max_bytes=1 << 30, max_messages=10_000, max_age_ms=0)
    units = hot.read_units(Q.topic, 0, 0, 200)
    ts = [hot.read_store_timestamp(int(o)) for o in units["commitlog_offset"]]
    cut = ts[120]  # flushed up to and including offset 120
    plan = _plan(hot, 0, limits, now=START + 10**6, guard=cut)
    assert isinstance(plan, SegmentPlan)
    assert plan.end == 121
    assert plan.nbytes == int(units["size"][:121].sum())  # the guard's cut, not the pending
    assert np.all(np.array(ts[: plan.end]) <= cut)
    guarded = _plan(hot, 0, limits, now=START + 10**6, guard=ts[0] - 1)
    assert isinstance(guarded, Wait)
    assert guarded.reason is WaitReason.GUARDED


def test_hot_max_below_cold_commit_is_divergence(tmp_path: Path) -> None:
    hot = HotStore(_store(tmp_path).root)
    with pytest.raises(
        DivergedError, match="hot max offset 200 of SynthTopic0/0 is below the cold"
    ):
        _plan(hot, 250, Limits(), now=START)


def test_hot_data_deleted_before_tiering_is_reported_exactly(tmp_path: Path) -> None:
    spec = SynthSpec(
        topics=1,
        queues=1,
        messages=400,
        body_min=500,
        body_max=500,
        commitlog_file_size=64 << 10,
        compress_over=0,
    )
    store = synthesize(tmp_path / "s", spec)
    hot = HotStore(store.root)
    os.remove(hot.commitlog_files().files[0].path)
    new_min = hot.queue_range(Q.topic, 0).min
    lost = _plan(hot, 10, Limits(), now=START)
    assert lost == HotDataLost(Q, 10, new_min, hot.queue_range(Q.topic, 0))
    assert new_min > 10


def test_a_unit_torn_at_planning_is_found_before_commit(tmp_path: Path) -> None:
    """The broker's write of the last unit was half done when planning read it (offset
    and size there, not yet its tags code): the check after the pass sees the change."""
    store = _store(tmp_path)
    hot = HotStore(store.root)
    plan = _plan(hot, 0, Limits(), now=START, flush=True)
    assert isinstance(plan, SegmentPlan)
    assert units_unchanged(hot, plan)
    cq = hot.cq_files(Q.topic, Q.queue_id).files[0].path
    last = (plan.end - 1) * 20
    data = bytearray(cq.read_bytes())
    final = bytes(data[last + 12 : last + 20])
    data[last + 12 : last + 20] = bytes(b ^ 0x5A for b in final)  # read mid-write
    cq.write_bytes(bytes(data))
    torn = _plan(hot, 0, Limits(), now=START, flush=True)
    assert isinstance(torn, SegmentPlan) and torn.end == plan.end
    data[last + 12 : last + 20] = final
    cq.write_bytes(bytes(data))
    assert not units_unchanged(hot, torn)  # the broker's write finished since
    assert units_unchanged(hot, plan)
    # The round re-reads them all in one hop: the torn plan's spool is replaced by an
    # error (not committed, planned again), the other kept, an earlier error passed on.
    row = QueueRow(Q.topic, Q.queue_id, 0, 0, 0, 0, 0, QueueState.ACTIVE, 0)
    spooled = Spooled(tmp_path / "spool", plan.nbytes, "0" * 8, 0, 0)
    earlier = StoreError("the pass failed", where="x")
    out = _recheck_units(hot, [(row, torn), (row, plan), (row, plan)], [spooled, spooled, earlier])
    assert isinstance(out[0], StoreError) and "changed while they were tiered" in str(out[0])
    assert out[1:] == [spooled, earlier]


def test_group_limit_caps_the_segment_at_the_confirmed_commitlog_offset(tmp_path: Path) -> None:
    """``cl_limit``: only records ending at or below it; none → Wait(UNCONFIRMED)."""
    hot = HotStore(_store(tmp_path).root)
    limits = Limits(max_bytes=1 << 20, max_messages=10_000, max_age_ms=0)
    units = hot.read_units(Q.topic, 0, 0, 200)
    ends = units["commitlog_offset"].astype(np.int64) + units["size"].astype(np.int64)
    plan = plan_segment(hot, Q, 0, limits, now_ms=START, guard_ts=None, cl_limit=int(ends[49]))
    assert isinstance(plan, SegmentPlan)
    assert (plan.start, plan.end, plan.cl_end) == (0, 50, int(ends[49]))
    one_short = plan_segment(
        hot, Q, 0, limits, now_ms=START, guard_ts=None, cl_limit=int(ends[49]) - 1
    )
    assert isinstance(one_short, SegmentPlan)
    assert one_short.end == 49  # a record is confirmed only whole
    nothing = plan_segment(hot, Q, 50, limits, now_ms=START, guard_ts=None, cl_limit=int(ends[49]))
    assert isinstance(nothing, Wait)
    assert (nothing.reason, nothing.pending) == (WaitReason.UNCONFIRMED, 150)
    whole = plan_segment(hot, Q, 0, limits, now_ms=START, guard_ts=None, cl_limit=1 << 40)
    assert isinstance(whole, SegmentPlan)
    assert whole.end == 200
