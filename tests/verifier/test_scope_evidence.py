"""Records checked against what hot proves (verifier/scope.py): the pure decisions, on
plain values, as the module docstring's worked example states them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tieredstore.cold.layout import QueuePath, broker_prefix
from tieredstore.cold.loss import LossRecord
from tieredstore.cold.provenance import (
    QueueInit,
    RetentionMark,
    RuleEpoch,
    StopMark,
    TieringRecord,
    read_queue_record,
)
from tieredstore.errors import CorruptProvenanceError
from tieredstore.findings import FindingKind
from tieredstore.topic_rules import TopicRules
from tieredstore.verifier.outcome import Anomaly, QueueReport
from tieredstore.verifier.scope import (
    HotFacts,
    ProvenanceRecords,
    impossible_init,
    impossible_losses,
    impossible_retention,
    judge,
    tiered_end,
    tiered_start,
)

C, B = "cluster-a", "broker-a"
T = ("T", 0)
QP = QueuePath(C, B, "T", 0)


def record(*epochs: tuple[int, TopicRules]) -> TieringRecord:
    return TieringRecord(C, B, tuple(RuleEpoch(t, r, "w", 1) for t, r in epochs))


EVERY = TopicRules()
NOT_T = TopicRules(exclude=("T",))
#: The docstring's example: every topic from t=100, T excluded from t=500.
HISTORY = record((100, EVERY), (500, NOT_T))
#: hot [0, 90), offset o stored at t = 10 * o: stored from t=100 is 10, from t=500 is 50.
HOT = HotFacts(0, 90, {100: 10, 500: 50})


def loss(start: int, end: int) -> LossRecord:
    return LossRecord.new(QP, start, end, accepted_at_ms=1, writer_id="w", lease_epoch=1)


def retention(first: int) -> RetentionMark:
    return RetentionMark(1, C, B, "T", 0, "w", 1, first, "m", 1, 2)


def stop(since: int, offset: int) -> StopMark:
    return StopMark.new(QP, excluded_since_ms=since, stop_offset=offset, stopped_at_ms=since,
                        writer_id="w", lease_epoch=1)  # fmt: skip


def init(offset: int, policy: str) -> QueueInit:
    return QueueInit.new(QP, offset, policy, created_at_ms=1, writer_id="w", lease_epoch=1)


@pytest.mark.parametrize(
    ("start", "end", "impossible"),
    [(60, 70, True), (0, 1, True), (89, 95, True), (90, 95, False)],
)
def test_a_loss_over_any_offset_hot_holds_is_impossible(
    start: int, end: int, impossible: bool
) -> None:
    x = loss(start, end)
    assert impossible_losses([x], {T: HOT}) == ([x] if impossible else [])


def test_a_loss_below_hot_min_is_possible_and_one_of_a_queue_hot_lacks_too() -> None:
    hot = HotFacts(100, 200, {})
    assert impossible_losses([loss(0, 100)], {T: hot}) == []
    assert impossible_losses([loss(150, 160)], {}) == []


@pytest.mark.parametrize(
    ("first", "cold_max", "impossible"),
    [(40, 80, False), (80, 80, True), (85, None, True), (95, 100, True), (10, None, True)],
)
def test_retention_must_leave_a_segment_and_stay_within_hot(
    first: int, cold_max: int | None, impossible: bool
) -> None:
    r = retention(first)
    tops = {} if cold_max is None else {T: cold_max}
    assert impossible_retention([r], tops, {T: HOT}) == ([r] if impossible else [])


def test_retention_of_a_queue_the_broker_no_longer_has_is_never_judged() -> None:
    assert impossible_retention([retention(500)], {}, {}) == []


def test_init_records_hot_contradicts() -> None:
    hot = HotFacts(20, 90, {})
    assert impossible_init(init(20, "earliest"), hot) is None
    assert "hot still holds offsets from 20" in (impossible_init(init(30, "earliest"), hot) or "")
    assert impossible_init(init(30, "latest"), hot) is None
    assert "past the hot max 90" in (impossible_init(init(91, "latest"), hot) or "")
    assert impossible_init(init(30, "earliest"), None) is None


def test_the_history_per_topic() -> None:
    assert (HISTORY.tiered_since("T"), HISTORY.excluded_since("T")) == (100, 500)
    assert (HISTORY.tiered_since("U"), HISTORY.excluded_since("U")) == (100, None)
    never = record((100, NOT_T), (300, NOT_T))
    assert (never.tiered_since("T"), never.excluded_since("T")) == (None, None)
    again = record((100, EVERY), (200, NOT_T), (300, EVERY), (400, NOT_T), (450, NOT_T))
    assert again.excluded_since("T") == 400  # the unbroken run that ends the history


def test_the_start_hot_proves_without_an_init_record() -> None:
    assert tiered_start(HISTORY, "U", HOT) == 10
    assert tiered_start(record((100, NOT_T)), "T", HOT) is None  # never tiered
    assert tiered_start(HISTORY, "U", HotFacts(0, 90, {100: 90})) is None  # stored before
    assert tiered_start(HISTORY, "U", None) is None


def test_where_a_stopped_queue_ends() -> None:
    end = tiered_end(HISTORY, T, [stop(500, 40)], HOT)
    assert end is not None and (end.end, end.record) == (40, stop(500, 40).key)
    # A stop record of another exclusion, or none: the messages stored before t=500.
    for stops in ([], [stop(200, 30)]):
        end = tiered_end(HISTORY, T, stops, HOT)
        assert end is not None and (end.end, end.record) == (50, None)
    assert tiered_end(HISTORY, T, [], None) is None
    assert tiered_end(HISTORY, ("U", 0), [], HOT) is None  # tiered now
    assert tiered_end(record((100, NOT_T)), T, [], HOT) is None  # excluded from the start


def test_a_stop_record_round_trips_and_is_parsed_strictly() -> None:
    mark = stop(500, 40)
    prefix = broker_prefix(C, B) + "/"
    assert "/_queues/T/0/STOPPED/" in mark.key
    assert read_queue_record(mark.to_json(), mark.key, prefix) == mark
    with pytest.raises(CorruptProvenanceError, match="stopped_at_ms"):
        read_queue_record(mark.to_json().replace(b'"stopped_at_ms":500', b'"stopped_at_ms":1'),
                          mark.key, prefix)  # fmt: skip
    with pytest.raises(CorruptProvenanceError):
        read_queue_record(mark.to_json().replace(b"}", b',"x":1}'), mark.key, prefix)
    with pytest.raises(CorruptProvenanceError, match="describes"):
        read_queue_record(stop(501, 40).to_json(), mark.key, prefix)


def _queue(cold: tuple[int, int] | None, hot: tuple[int, int]) -> QueueReport:
    return QueueReport(
        "T", 0, True, hot[0], hot[1], cold[0] if cold else None, cold[1] if cold else None,
        1 if cold else 0, 0, 0, 0, None, 0, 0, 0, 0, lag_cutoff=hot[1],
    )  # fmt: skip


def test_judge_owes_a_stopped_queue_its_history_only() -> None:
    """T excluded from t=500 with a stop record at 40, cold [0, 30): the segment checks'
    tail [30, 90) becomes [30, 40); with the history intact nothing is owed."""
    records = ProvenanceRecords(HISTORY, [init(0, "earliest")], [], [stop(500, 40)])
    tail = Anomaly("T", 0, 30, FindingKind.HOT_NOT_COVERED, 90, 60, None, "segment checks")
    queues, found = judge([_queue((0, 30), (0, 90))], [tail], records, [], [], {T: HOT})
    assert [(a.anomaly, a.start, a.end) for a in found] == [(FindingKind.HOT_NOT_COVERED, 30, 40)]
    assert (queues[0].required_end, queues[0].tiered) == (40, True)
    tail = replace(tail, start=40, count=50)
    _, found = judge([_queue((0, 40), (0, 90))], [tail], records, [], [], {T: HOT})
    assert found == []


def test_judge_reports_contradicting_records_and_lets_them_explain_nothing() -> None:
    x, r = loss(60, 70), retention(95)
    records = ProvenanceRecords(record((100, EVERY)), [init(0, "earliest")], [r], [])
    _, found = judge([_queue(None, (0, 90))], [], records, [x], [x], {T: HOT})
    assert {(a.anomaly, a.start, a.end, a.object_key) for a in found} == {
        (FindingKind.IMPOSSIBLE_LOSS_RECORD, 60, 70, x.key),
        (FindingKind.IMPOSSIBLE_RETENTION_RECORD, 95, 95, r.key),
        (FindingKind.HOT_NOT_COVERED, 0, 90, None),  # from the init record, not 95
    }
