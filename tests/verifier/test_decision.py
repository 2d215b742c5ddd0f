"""The shared decisions (verifier/decision), sans IO: what both jobs report of a queue's
layout and of a link's objects."""

from __future__ import annotations

from tieredstore.findings import FindingKind
from tieredstore.verifier.decision import (
    RULES,
    Link,
    ObjectRead,
    QueueLinks,
    content_judged,
    decide,
    judged,
    object_findings,
)


def _q(*links: tuple[int, int], spans: tuple[tuple[int, int], ...] = ()) -> QueueLinks:
    return QueueLinks("T", 0, [Link(s, e, f"m/{s}") for s, e in links], spans)


def test_a_hole_between_links_is_a_gap_unless_one_span_holds_it_whole() -> None:
    (g,) = decide(_q((100, 0 + 200), (0, 100), (250, 300)))  # any order in
    assert (g.kind, g.start, g.end, g.object_key) == (FindingKind.GAP, 200, 250, None)
    assert g.detail == "queue offsets [200, 250) are in no committed segment (the next " \
        "segment is m/250)"  # fmt: skip
    assert decide(_q((0, 100), (250, 300), spans=((90, 260),))) == []
    assert len(decide(_q((0, 100), (250, 300), spans=((100, 200), (200, 250))))) == 1


def test_offsets_held_twice_are_an_overlap_on_the_later_link() -> None:
    found = decide(_q((0, 100), (50, 80), (90, 150)))
    assert [(f.kind, f.start, f.end, f.object_key) for f in found] == [
        (FindingKind.OVERLAP, 50, 80, "m/50"),
        (FindingKind.OVERLAP, 90, 100, "m/90"),
    ]
    assert decide(_q((0, 100), (50, 80)), [FindingKind.GAP]) == []


def test_one_link_or_none_decides_nothing_and_every_rule_runs() -> None:
    assert decide(_q()) == [] and decide(_q((5, 10))) == []
    assert {r.__name__ for r in RULES} == {"gaps", "overlaps"}


def _read(listed: int | None, read: int | None = 200, actual: str = "aa") -> ObjectRead:
    return ObjectRead("o/1", listed, 200, 200, read, actual if read == 200 else None, "aa")


def _kinds(*reads: ObjectRead) -> list[FindingKind]:
    return [f.kind for f in object_findings("m/0", 0, 10, reads)]


def test_each_object_is_missing_of_another_size_cut_short_or_of_another_digest() -> None:
    assert _kinds(_read(None, None)) == [FindingKind.MISSING_OBJECT]
    assert _kinds(_read(180, None)) == [FindingKind.SIZE_MISMATCH]
    assert _kinds(_read(200, 120)) == [FindingKind.MISSING_OBJECT]  # vanished after listing
    assert _kinds(_read(200, actual="bb")) == [FindingKind.DIGEST_MISMATCH]
    assert _kinds(_read(200)) == []
    (f,) = object_findings("m/0", 0, 10, [_read(180, None)])
    assert (f.start, f.end, f.object_key) == (0, 10, "o/1")
    assert f.detail == "object is 180 bytes, its manifest says 200"


def test_records_are_judged_only_on_a_link_read_whole_and_content_where_units_tile() -> None:
    assert judged([_read(200), _read(200, actual="bb")])  # a digest that differs: still read
    assert not judged([_read(200), _read(200, 120)])
    assert not judged([_read(200), _read(None, None)])
    assert content_judged(True) and not content_judged(False)
