"""The shared layout decision (verifier/decision), sans IO: what both jobs report."""

from __future__ import annotations

from tieredstore.findings import FindingKind
from verifier.decision import RULES, Link, QueueLinks, decide


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
