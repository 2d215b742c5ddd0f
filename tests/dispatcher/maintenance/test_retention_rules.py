"""The five expiry rules (dispatcher/maintenance/retention.py's docstring), one by one, on
the pure planner; eager init.

The planner is a pure function, so these tests feed it hand-made catalogue rows and a
hand-made view of the broker and check every decision and its reason.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tests.support.layout import PRODUCT_FOLDERS
from tests.support.sidecar.lease_time import advance
from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tests.support.stores.segments import chain
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.cold.history import load_history
from tieredstore.cold.layout import QueuePath
from tieredstore.dispatcher.maintenance.retention import (
    DestroyQueue,
    DestroyReason,
    ExpireSegment,
    ExpiryReason,
    HotView,
    QueueSnapshot,
    RetentionPolicy,
    format_age,
    plan_purge,
    plan_retention,
)
from tieredstore.errors import ConfigError
from tieredstore.hot.store import HotRange, QueueKey
from tieredstore.hot.synth import SyntheticStore, SynthSpec
from tieredstore.humanize import iso_time
from tieredstore.metadata.rows import QueueRow, QueueState, SegmentRow, SegmentStatus
from tieredstore.settings.loader import load_settings

H = 3_600_000
NOW = 1_800_000_000_000
POLICY = RetentionPolicy(72 * H, {"Short": 1 * H})
REPO = Path(__file__).resolve().parents[3]


def _segments(topic: str, qid: int, ages_h: list[float]) -> tuple[SegmentRow, ...]:
    """Consecutive committed segments whose max store times are ``ages_h`` hours ago."""
    manifests = [
        s.manifest for s in chain(QueuePath(CLUSTER, BROKER, topic, qid), [2] * len(ages_h))
    ]
    out = []
    for m, age in zip(manifests, ages_h, strict=True):
        ts = NOW - round(age * H)
        out.append(
            SegmentRow(
                dataclasses.replace(m, min_store_timestamp=max(ts - 5, 0), max_store_timestamp=ts),
                SegmentStatus.COMMITTED,
            )
        )
    return tuple(out)


def _snap(
    topic: str,
    qid: int,
    ages_h: list[float],
    *,
    state: QueueState = QueueState.ACTIVE,
    deleting: int = 0,
) -> QueueSnapshot:
    segs = list(_segments(topic, qid, ages_h))
    for i in range(deleting):
        segs[i] = SegmentRow(segs[i].manifest, SegmentStatus.DELETING)
    start = segs[0].start_offset if segs else 0
    end = segs[-1].end_offset if segs else 0
    cl_end = segs[-1].cl_end if segs else 0
    row = QueueRow(topic, qid, 0, start, end, cl_end, 0, state, 0)
    return QueueSnapshot(row, tuple(segs))


def _live(*snaps: QueueSnapshot, pending: int = 0) -> HotView:
    """The broker has every queue of ``snaps``, ``pending`` messages beyond cold."""
    ranges = {
        QueueKey(s.row.topic, s.row.queue_id): HotRange(0, s.row.cold_commit + pending)
        for s in snaps
    }
    return HotView(frozenset(ranges), ranges, frozenset(s.row.topic for s in snaps))


GONE = HotView(frozenset())


def _expired_ranges(decisions: tuple[object, ...]) -> list[tuple[str, int, int]]:
    return [
        (f"{d.segment.topic}/{d.segment.queue_id}", d.segment.start_offset, d.segment.end_offset)
        for d in decisions
        if isinstance(d, ExpireSegment)
    ]


# -- rule 1: only committed segments, real timestamps ----------------------------------
def test_rule1_deleting_segments_are_not_planned_again_and_block_destruction() -> None:
    snap = _snap("T", 0, [90, 80], deleting=1)
    decisions = plan_retention([snap], GONE, now_ms=NOW, policy=POLICY)
    assert _expired_ranges(decisions) == [("T/0", 2, 4)]  # the COMMITTED one only
    assert not any(isinstance(d, DestroyQueue) for d in decisions)  # resume() finishes first


def test_rule1_age_is_the_real_max_store_timestamp_even_at_epoch_zero() -> None:
    # The oldest possible real time: still just a time. A live queue keeps its newest.
    snap = _snap("T", 0, [NOW / H, NOW / H])
    decisions = plan_retention([snap], _live(snap), now_ms=NOW, policy=POLICY)
    assert _expired_ranges(decisions) == [("T/0", 0, 2)]
    assert snap.segments[0].manifest.max_store_timestamp == 0


# -- rule 2: older than retention, a prefix only ----------------------------------------
def test_rule2_only_a_prefix_expires_never_a_hole() -> None:
    snap = _snap("T", 0, [80, 10, 75, 74])
    decisions = plan_retention([snap], _live(snap), now_ms=NOW, policy=POLICY)
    assert _expired_ranges(decisions) == [("T/0", 0, 2)]  # stops at the 10 h segment


def test_rule2_a_batch_slice_not_compacted_yet_stops_the_prefix() -> None:
    """Segments after a slice wait for its compaction (only segments expire), and a
    gone queue with slices is not destroyed; a purge of it is refused until then."""
    snap = dataclasses.replace(_snap("T", 0, [90, 85, 80, 75]), slice_starts=(8,))
    decisions = plan_retention([snap], _live(snap), now_ms=NOW, policy=POLICY)
    assert _expired_ranges(decisions) == [("T/0", 0, 2), ("T/0", 2, 4), ("T/0", 4, 6)]
    early = dataclasses.replace(snap, slice_starts=(2,))  # a slice between two segments
    decisions = plan_retention([early], GONE, now_ms=NOW, policy=POLICY)
    assert _expired_ranges(decisions) == [("T/0", 0, 2)]
    assert not [d for d in decisions if isinstance(d, DestroyQueue)]
    with pytest.raises(ConfigError, match="T/0 still has offsets in batch objects"):
        plan_purge([early], GONE, topic="T", now_ms=NOW, policy=POLICY)


def test_rule2_boundary_is_strict() -> None:
    exact = _snap("T", 0, [72, 1])
    older = _snap("T", 1, [72 + 1 / H, 1])  # one millisecond older
    decisions = plan_retention([exact, older], _live(exact, older), now_ms=NOW, policy=POLICY)
    assert _expired_ranges(decisions) == [("T/1", 0, 2)]


def test_rule2_per_topic_override() -> None:
    short = _snap("Short", 0, [2, 0.5, 0.1])
    default = _snap("Long", 0, [2, 0.5, 0.1])
    decisions = plan_retention([short, default], _live(short, default), now_ms=NOW, policy=POLICY)
    assert _expired_ranges(decisions) == [("Short/0", 0, 2)]
    (d,) = decisions
    assert isinstance(d, ExpireSegment) and d.retention_ms == 1 * H


# -- rule 3: the newest of a live queue; destroying a queue ----------------------------
def test_rule3_newest_segment_of_a_live_queue_never_expires() -> None:
    snap = _snap("T", 0, [1000, 900, 800])
    decisions = plan_retention([snap], _live(snap), now_ms=NOW, policy=POLICY)
    assert _expired_ranges(decisions) == [("T/0", 0, 2), ("T/0", 2, 4)]
    single = _snap("T", 1, [1000])
    assert plan_retention([single], _live(single), now_ms=NOW, policy=POLICY) == ()


def test_rule3_a_topic_still_in_topics_json_is_live_without_its_directory() -> None:
    snap = _snap("T", 0, [100, 90])
    view = HotView(frozenset(), topics=frozenset({"T"}))
    decisions = plan_retention([snap], view, now_ms=NOW, policy=POLICY)
    assert _expired_ranges(decisions) == [("T/0", 0, 2)]
    assert not any(isinstance(d, DestroyQueue) for d in decisions)


def test_rule3_pending_hot_data_keeps_a_queue_live() -> None:
    snap = _snap("T", 0, [100, 90])
    key = QueueKey("T", 0)
    view = HotView(frozenset(), {key: HotRange(0, snap.row.cold_commit + 5)})
    assert view.pending(snap.row) == 5
    decisions = plan_retention([snap], view, now_ms=NOW, policy=POLICY)
    assert _expired_ranges(decisions) == [("T/0", 0, 2)]
    assert not any(isinstance(d, DestroyQueue) for d in decisions)


def test_rule3_a_gone_queue_is_destroyed_only_after_all_its_segments_expire() -> None:
    young = _snap("Gone", 0, [100, 10])
    old = _snap("Gone", 1, [100, 80])
    empty = _snap("Gone", 2, [])
    decisions = plan_retention([empty, old, young], GONE, now_ms=NOW, policy=POLICY)
    assert _expired_ranges(decisions) == [("Gone/0", 0, 2), ("Gone/1", 0, 2), ("Gone/1", 2, 4)]
    destroyed = [d for d in decisions if isinstance(d, DestroyQueue)]
    assert destroyed == [
        DestroyQueue("Gone", 1, DestroyReason.TOPIC_GONE),
        DestroyQueue("Gone", 2, DestroyReason.TOPIC_GONE),
    ]
    # Execution order: a queue's expiries first, then its destruction; queues in order.
    assert decisions.index(destroyed[0]) == 3


def test_deleted_queues_are_skipped() -> None:
    snap = _snap("T", 0, [], state=QueueState.DELETED)
    assert plan_retention([snap], GONE, now_ms=NOW, policy=POLICY) == ()


def test_diverged_and_paused_queues_still_age_out_their_prefix() -> None:
    snaps = [
        _snap("T", 0, [100, 90], state=QueueState.DIVERGED),
        _snap("T", 1, [100, 90], state=QueueState.PAUSED),
    ]
    decisions = plan_retention(snaps, _live(*snaps), now_ms=NOW, policy=POLICY)
    assert _expired_ranges(decisions) == [("T/0", 0, 2), ("T/1", 0, 2)]


# -- the operator's purge ----------------------------------------------------------------
def test_purge_takes_everything_of_a_gone_topic_even_young_data() -> None:
    snaps = [_snap("Gone", 0, [1, 0.1]), _snap("Gone", 1, []), _snap("Other", 0, [100, 1])]
    decisions = plan_purge(snaps, GONE, topic="Gone", now_ms=NOW, policy=POLICY)
    assert _expired_ranges(decisions) == [("Gone/0", 0, 2), ("Gone/0", 2, 4)]
    assert all(d.reason is ExpiryReason.PURGED for d in decisions if isinstance(d, ExpireSegment))
    assert [d for d in decisions if isinstance(d, DestroyQueue)] == [
        DestroyQueue("Gone", 0, DestroyReason.PURGED),
        DestroyQueue("Gone", 1, DestroyReason.PURGED),
    ]


def test_purge_refuses_a_topic_the_broker_still_has_or_the_catalogue_lacks() -> None:
    snap = _snap("T", 0, [1])
    with pytest.raises(ConfigError, match="still exists in the broker"):
        plan_purge([snap], _live(snap), topic="T", now_ms=NOW, policy=POLICY)
    with pytest.raises(ConfigError, match="no queue of topic 'X'"):
        plan_purge([snap], GONE, topic="X", now_ms=NOW, policy=POLICY)


# -- what the operator reads -------------------------------------------------------------
def test_a_decision_says_segment_queue_max_timestamp_age_and_why() -> None:
    snap = _snap("T", 3, [73.5, 1])
    (d,) = plan_retention([snap], _live(snap), now_ms=NOW, policy=POLICY)
    assert isinstance(d, ExpireSegment)
    ts = NOW - round(73.5 * H)
    assert d.describe() == (
        f"segment [0, 2) of queue T/3: max store timestamp {ts} "
        f"({iso_time(ts, timespec='milliseconds')}), "
        "age 73h30m00.000s, retention 72h00m00.000s: older than retention"
    )
    assert iso_time(0, timespec="milliseconds") == "1970-01-01T00:00:00.000Z"
    assert format_age(-1500) == "-0h00m01.500s"


# -- rule 5 / settings: the policy ------------------------------------------------------
def test_policy_from_settings_and_validation(tmp_path: Path) -> None:
    settings = load_settings(
        env={},
        overrides={
            "store.path": str(tmp_path),
            "cold.url": "memory://p",
            "cold.cluster": CLUSTER,
            "cold.broker": BROKER,
            "state.dir": str(tmp_path),
            "retention.topics": {"Orders": "7d"},
        },
    )
    policy = RetentionPolicy.of(settings.retention)
    assert policy.for_topic("Orders") == 7 * 24 * H
    assert policy.for_topic("Other") == 72 * H
    with pytest.raises(ConfigError, match="topic 'x'"):
        RetentionPolicy(H, {"x": 0})
    with pytest.raises(ConfigError, match="the default"):
        RetentionPolicy(0)


# -- no sentinel, eager initialisation (the root of RocketMQ #8065) -----------------------
T0 = 1_800_000_000_000


async def test_a_new_queue_is_born_initialised_and_nothing_expires_it(tmp_path: Path) -> None:
    """The first tick that sees a queue creates its row with its CQ base at once and
    writes no object: there is no empty segment, no 'flat file without consume queue',
    so even a retention of 1 ms run right then has nothing it could destroy."""
    store = SyntheticStore.create(tmp_path / "store", SynthSpec(topics=1, queues=2, start_time=T0))
    store.append(50, store_time=T0 + 1000)
    clock = VirtualClock(start_ms=T0 + 2000)
    settings = settings_for(
        store.root,
        "memory://eager",
        tmp_path / "state",
        tiering__segment_max_age="30s",
        retention__default="1ms",
        lease__renew_interval="20m",
    )
    async with open_runtime(settings, clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        report = await rt.dispatcher.tick()  # messages are 1 s old: group commit waits
        assert report.segments == report.slices == 0 and len(report.new_queues) == 2
        for row in rt.catalogue.queues.all():
            assert row.cq_base == row.init_offset * 20 == 0
            assert (row.cold_min, row.cold_commit, row.cold_cl_end) == (0, 0, 0)
            assert row.state is QueueState.ACTIVE
        # No segment object: only the lease and what must be in cold (the records), and
        # with batching on the writer's start fence at a batch key, which commits nothing.
        keys = [o.key for o in await rt.backend.list() if "_lease" not in o.key]
        assert [k for k in keys if not re.search(r"/_queues/|_tiering|/_batches/", k)] == []
        assert (await load_history(rt.backend, CLUSTER, BROKER)).queues == {}
        await advance(rt.dispatcher.lease, clock, 3600)  # every message is far older than 1 ms now
        assert (await rt.retention.run_pass()).decisions == ()
        assert {r.state for r in rt.catalogue.queues.all()} == {QueueState.ACTIVE}
        assert (await rt.dispatcher.tick()).messages == 50


def test_only_the_catalogue_creates_queue_rows_and_always_with_their_cq_base() -> None:
    """Eager init cannot be bypassed: one INSERT INTO queues in the whole code base, in
    Catalogue.queues.ensure (metadata/queue_table.py), and the schema refuses a row
    without cq_base = init * 20 (tests/metadata/test_catalogue.py checks the schema)."""
    insert = re.compile(r"INSERT\s+(?:OR\s+\w+\s+)?INTO\s+queues\b", re.IGNORECASE)
    hits = [
        (path.relative_to(REPO).as_posix(), line)
        for pkg in PRODUCT_FOLDERS
        for path in sorted((REPO / pkg).rglob("*.py"))
        for line in path.read_text().splitlines()
        if insert.search(line)
    ]
    assert [h[0] for h in hits] == ["metadata/queue_table.py"], hits
    source = (REPO / "metadata" / "queue_table.py").read_text()
    body = source[source.index("def ensure_many") : source.index("def get(")]
    assert "init_offset * CQ_UNIT_SIZE" in body and "INSERT INTO queues" in body
