"""The verdict, defined once: its ordering, exit codes and colours.

Every place that shows or decides a verdict reads it from here: the job
(:func:`verdict_of`), ``report.json`` and ``report.html``, the history page, the fleet
page and ``verify.prom``.

=============  ====  =====  ==========================================================
verdict        rank  exit   meaning
=============  ====  =====  ==========================================================
``CLEAN``      0     0      cold covers hot exactly
``DIRTY``      1     1      only DIRTY-class anomalies (orphans, drift, accepted loss)
``INCOMPLETE`` 2     4      nothing wrong was found, but something could not be proven:
                            a tiered broker without a recent hot fingerprint
``CORRUPT``    3     2      at least one CORRUPT-class anomaly
=============  ====  =====  ==========================================================

The rank orders them, worst last: a fleet, a topic or a table shows the worst of its
parts (:func:`worst`). Exit code 3 is "could not run" (:data:`EXIT_COULD_NOT_RUN`): no
verdict at all. INCOMPLETE's code is 4, not 3: a run that produced a verdict must be told
apart from one that did not.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from tieredstore.findings import FindingKind, Severity

__all__ = [
    "EXIT_COULD_NOT_RUN",
    "UNKNOWN_COLOUR",
    "Verdict",
    "colour_of",
    "rank_of",
    "verdict_of",
    "worst",
]

#: Exit code when the verifier could not produce a verdict at all.
EXIT_COULD_NOT_RUN: Final = 3
#: The colour of a verdict name this version does not know (an old or newer report).
UNKNOWN_COLOUR: Final = "#777777"


@dataclass(frozen=True, slots=True)
class _Traits:
    rank: int
    exit_code: int
    colour: str


class Verdict(enum.Enum):
    """The outcome of one verification (see the module doc for the table)."""

    CLEAN = "CLEAN"
    DIRTY = "DIRTY"
    INCOMPLETE = "INCOMPLETE"
    CORRUPT = "CORRUPT"

    @property
    def rank(self) -> int:
        """Higher is worse."""
        return _TRAITS[self].rank

    @property
    def exit_code(self) -> int:
        """What the command returns."""
        return _TRAITS[self].exit_code

    @property
    def colour(self) -> str:
        """The verdict's background colour on every page (white text on it)."""
        return _TRAITS[self].colour


_TRAITS: Final = {
    Verdict.CLEAN: _Traits(0, 0, "#2e7d32"),
    Verdict.DIRTY: _Traits(1, 1, "#b26a00"),
    Verdict.INCOMPLETE: _Traits(2, 4, "#6a1b9a"),
    Verdict.CORRUPT: _Traits(3, 2, "#c62828"),
}

_OF_SEVERITY: Final = {Severity.CORRUPT: Verdict.CORRUPT, Severity.DIRTY: Verdict.DIRTY}


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """The worst of ``verdicts`` (none → CLEAN)."""
    return max(verdicts, key=lambda v: v.rank, default=Verdict.CLEAN)


def verdict_of(classes: Iterable[FindingKind]) -> Verdict:
    """The verdict of a collection of anomaly kinds: the worst of their severities
    (empty → CLEAN). INCOMPLETE never comes from an anomaly: it is decided by the fleet
    job for a broker it could not check."""
    return worst(_OF_SEVERITY[c.severity] for c in classes)


def colour_of(name: str) -> str:
    """The colour of a verdict given by name, as a report document holds it."""
    try:
        return Verdict(name).colour
    except ValueError:
        return UNKNOWN_COLOUR


def rank_of(name: str) -> int:
    """The rank of a verdict given by name, case-insensitive — also a queue status or a
    severity named for one (``corrupt``, ``dirty``); -1 for any other name, so that
    sorting by ``-rank_of(name)`` lists the worst first and the rest after."""
    try:
        return Verdict(name.upper()).rank
    except ValueError:
        return -1
