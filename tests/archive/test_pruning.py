"""Pushed filters as bounds: what prunes, what is ignored, and the cut of a segment."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringStartsWith,
)

from tieredstore.export.rows import TimeWindow
from tieredstore.verifier.archive.pruning import IntBounds, NameBounds, Pruning, SegmentCut

UTC = dt.UTC


def at_ms(ms: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=ms)


def test_no_filter_reads_every_segment_whole() -> None:
    assert Pruning().cut(10, 20, 1000, 2000) == SegmentCut(10, 20, None)


def test_offset_comparisons_cut_the_segment() -> None:
    p = Pruning.of([GreaterThan(("queue_offset",), 12), LessThanOrEqual(("queue_offset",), 15)])
    assert p.queue_offset == IntBounds(13, 15)
    assert p.cut(10, 20, 0, 0) == SegmentCut(13, 16, None)
    assert p.cut(16, 30, 0, 0) is None
    assert p.cut(0, 13, 0, 0) is None  # [0, 13) ends below 13
    p = Pruning.of([GreaterThanOrEqual(("queue_offset",), 12), LessThan(("queue_offset",), 15)])
    assert p.cut(10, 20, 0, 0) == SegmentCut(12, 15, None)


def test_offset_sets_read_their_hull() -> None:
    p = Pruning.of([In(("queue_offset",), (3, 17, 40)), EqualTo(("queue_id",), 2)])
    assert p.cut(10, 20, 0, 0) == SegmentCut(17, 18, None)
    assert p.cut(0, 50, 0, 0) == SegmentCut(3, 41, None)
    assert p.cut(20, 40, 0, 0) is None
    assert p.queue_id.admits(2) and not p.queue_id.admits(1)
    # Two sets intersect (Spark passes lists).
    sets = [In(("queue_id",), [1, 2]), In(("queue_id",), [2, 3])]  # type: ignore[arg-type]
    assert Pruning.of(sets).queue_id == IntBounds(values=frozenset({2}))


def test_store_times_cut_in_whole_milliseconds() -> None:
    # > 1000.5 ms means >= 1001 ms; <= 1999.9 ms means <= 1999 ms.
    lo = at_ms(1000) + dt.timedelta(microseconds=500)
    hi = at_ms(1999) + dt.timedelta(microseconds=900)
    p = Pruning.of([GreaterThan(("store_timestamp",), lo),
                    LessThanOrEqual(("store_timestamp",), hi)])  # fmt: skip
    assert p.cut(0, 5, 500, 3000) == SegmentCut(0, 5, TimeWindow(1001, 1999))
    assert p.cut(0, 5, 1001, 1999) == SegmentCut(0, 5, None)  # all of it: no window
    assert p.cut(0, 5, 2000, 3000) is None
    assert p.cut(0, 5, 0, 1000) is None


def test_a_naive_or_odd_value_does_not_prune() -> None:
    naive = dt.datetime(2024, 1, 1)
    assert Pruning.of([GreaterThan(("store_timestamp",), naive)]) == Pruning()
    assert Pruning.of([GreaterThan(("queue_offset",), 1.5)]) == Pruning()
    assert Pruning.of([EqualTo(("queue_id",), True)]) == Pruning()
    assert Pruning.of([EqualTo(("topic",), 7)]) == Pruning()


@pytest.mark.parametrize(
    "f",
    [
        Not(EqualTo(("topic",), "a")),
        IsNotNull(("topic",)),
        StringContains(("topic",), "a"),
        EqualTo(("body_size",), 3),
        EqualTo(("properties", "KEYS"), "a"),
        GreaterThan(("topic",), "a"),
    ],
)
def test_filters_that_cannot_prune_are_ignored(f: object) -> None:
    assert Pruning.of([f]) == Pruning()  # type: ignore[list-item]


def test_names() -> None:
    p = Pruning.of([
        In(("topic",), ("Orders", "Payments", "Other")),
        StringStartsWith(("topic",), "O"),
        EqualTo(("broker",), "b"),
    ])  # fmt: skip
    assert p.topic == NameBounds(frozenset({"Orders", "Payments", "Other"}), ("O",))
    assert p.topic.admits("Orders") and not p.topic.admits("Payments")
    assert not p.topic.admits("Oz")
    assert p.broker.admits("b") and not p.broker.admits("b2")
    assert p.cluster.admits("anything")
