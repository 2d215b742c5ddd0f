"""The verdict is defined once (verifier/verdict.py): ordering, exit codes, colours."""

from __future__ import annotations

import re
from pathlib import Path

from tieredstore.findings import FindingKind
from tieredstore.verifier.verdict import (
    EXIT_COULD_NOT_RUN,
    UNKNOWN_COLOUR,
    Verdict,
    colour_of,
    worst,
)

_VERIFIER = Path(__file__).resolve().parents[2] / "verifier"


def test_the_verdicts_are_ordered_clean_dirty_incomplete_corrupt() -> None:
    ranked = sorted(Verdict, key=lambda v: v.rank)
    assert ranked == [Verdict.CLEAN, Verdict.DIRTY, Verdict.INCOMPLETE, Verdict.CORRUPT]
    assert worst([]) is Verdict.CLEAN
    assert worst([Verdict.DIRTY, Verdict.INCOMPLETE, Verdict.CLEAN]) is Verdict.INCOMPLETE
    assert worst([Verdict.INCOMPLETE, Verdict.CORRUPT]) is Verdict.CORRUPT


def test_each_verdict_has_its_own_exit_code_and_none_is_could_not_run() -> None:
    codes = [v.exit_code for v in Verdict]
    assert len(set(codes)) == len(codes)
    assert EXIT_COULD_NOT_RUN not in codes
    assert Verdict.CLEAN.exit_code == 0
    assert Verdict.INCOMPLETE.exit_code not in (0, 1, 2, 3)


def test_incomplete_never_comes_from_anomalies() -> None:
    from tieredstore.verifier.verdict import verdict_of

    assert verdict_of([FindingKind.ORPHAN_OBJECT]) is Verdict.DIRTY
    assert all(verdict_of([k]) is not Verdict.INCOMPLETE for k in FindingKind)


def test_colours_are_distinct_and_unknown_names_are_grey() -> None:
    colours = {v.colour for v in Verdict}
    assert len(colours) == len(Verdict)
    assert colour_of("CORRUPT") == Verdict.CORRUPT.colour
    assert colour_of("SOMETHING") == UNKNOWN_COLOUR


def test_no_other_verifier_module_spells_a_verdict_colour_or_ranking() -> None:
    """The pages, the report and the metrics file take the verdict from one module."""
    colours = {v.colour.lower() for v in Verdict}
    offenders = []
    for path in sorted(_VERIFIER.rglob("*.py")):
        if path.name == "verdict.py":
            continue
        text = path.read_text(encoding="utf-8").lower()
        if any(c in text for c in colours):
            offenders.append(f"{path.name}: a verdict colour")
        if re.search(r"\{\s*\"corrupt\"\s*:\s*\d", text):
            offenders.append(f"{path.name}: a verdict ranking")
    assert offenders == []
