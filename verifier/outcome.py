"""The outcome of one verification run, as plain frozen dataclasses (no Spark types).

:func:`tieredstore.verifier.job.verify` builds a :class:`VerificationResult` from the collected
frames; :mod:`tieredstore.verifier.reporting.report` writes it out. Tests assert on it directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from tieredstore.findings import FindingKind
from tieredstore.verifier.verdict import Verdict, verdict_of, worst
from tieredstore.verifier.vocabulary import VERIFIER_KINDS, VerifyOptions

__all__ = ["Anomaly", "QueueReport", "Totals", "VerificationResult"]


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One anomaly. ``start``/``end`` (half-open) and ``count`` are None when the
    anomaly concerns an object whose offsets are unknown (an orphan commitlog object)."""

    topic: str
    queue_id: int
    start: int | None
    anomaly: FindingKind
    end: int | None
    count: int | None
    object_key: str | None
    detail: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Anomaly:
        """Build from an ANOMALIES row (``row.asDict()``)."""
        return cls(
            topic=row["topic"],
            queue_id=row["queue_id"],
            start=row["start_offset"],
            anomaly=FindingKind(row["anomaly"]),
            end=row["end_offset"],
            count=row["count"],
            object_key=row["object_key"],
            detail=row["detail"],
        )

    @property
    def range(self) -> tuple[int, int] | None:
        """``(start, end)`` or None."""
        if self.start is None or self.end is None:
            return None
        return (self.start, self.end)


@dataclass(frozen=True, slots=True)
class QueueReport:
    """One queue as both sides show it (a QUEUE_SUMMARY row). Hot fields are None when
    the broker has no such queue; cold fields when nothing of it is tiered."""

    topic: str
    queue_id: int
    hot_present: bool
    hot_min: int | None
    hot_max: int | None
    cold_min: int | None
    cold_max: int | None
    segments: int
    cold_messages: int
    cold_bytes: int
    lag_messages: int
    lag_seconds: float | None
    units_compared: int
    bytes_compared: int
    cold_only: int
    pending_objects: int
    #: The first hot offset allowed to be untiered (None: no hot queue).
    lag_cutoff: int | None = None
    #: Whether the queue must be in cold: its topic passes the recorded topic rules (or
    #: it has segments anyway); ``tiering_rule`` names the rule that decided.
    tiered: bool = True
    tiering_rule: str | None = None
    #: Where the queue's cold history must start (None: not on record), and why.
    required_start: int | None = None
    required_because: str | None = None
    #: Where it ends, when its topic is excluded now after being tiered (None: at the
    #: hot max, less the lag allowance; :mod:`tieredstore.verifier.scope`).
    required_end: int | None = None
    #: The init record's offset (None: the queue has none).
    init_offset: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> QueueReport:
        """Build from a QUEUE_SUMMARY row; ``lag_seconds`` and the requirement fields
        (:mod:`tieredstore.verifier.scope`) are filled in later."""
        values: dict[str, Any] = {f.name: row.get(f.name) for f in fields(cls) if f.name in row}
        return cls(**values | {"lag_seconds": None})

    @property
    def scope(self) -> tuple[int, int] | None:
        """The offsets under verification: ``[cold_min, max(cold_max, hot_max))``."""
        if self.cold_min is None or self.cold_max is None:
            return None
        return (self.cold_min, max(self.cold_max, self.hot_max or 0))


@dataclass(frozen=True, slots=True)
class Totals:
    """Run-wide counts."""

    queues: int
    segments: int
    corrupt_manifests: int
    objects: int
    unrecognised_objects: int
    pending_objects: int
    units_compared: int
    bytes_compared: int
    cold_only: int
    lag_messages: int


@dataclass(frozen=True)
class VerificationResult:
    """Everything a run found. ``reference_ts`` is the time lag is measured from: the
    verifier's clock when the run started (``options.now_ms``), or for a fleet run the
    time the broker's hot fingerprint was taken. ``incomplete`` says what could not be
    proven (a fleet run's broker without a recent fingerprint): the verdict is then at
    least INCOMPLETE, never CLEAN. ``notes`` name what the run noticed that decides no
    verdict (a fleet run: a hot fingerprint dated after the verifier's clock that is not
    the one checked against)."""

    options: VerifyOptions
    queues: tuple[QueueReport, ...]
    anomalies: tuple[Anomaly, ...]
    totals: Totals
    unrecognised: tuple[str, ...]
    reference_ts: int | None
    started_ms: int
    finished_ms: int
    incomplete: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def verdict(self) -> Verdict:
        found = verdict_of(a.anomaly for a in self.anomalies)
        return found if self.incomplete is None else worst([found, Verdict.INCOMPLETE])

    def counts(self) -> dict[FindingKind, int]:
        """Number of anomalies per kind (every kind the verifier reports, zero when none)."""
        out = dict.fromkeys(VERIFIER_KINDS, 0)
        for a in self.anomalies:
            out[a.anomaly] += 1
        return out

    def of(self, cls: FindingKind) -> list[Anomaly]:
        """The anomalies of one class."""
        return [a for a in self.anomalies if a.anomaly is cls]
