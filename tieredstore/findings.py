"""The one vocabulary of cold-store findings, shared by the verifier, gc and reconcile.

Each job reports what it found as a :class:`FindingKind`; the value is the name every
report, log line and metric label uses, so "size_mismatch" means the same thing whether
``gc --dry-run``, ``rebuild-metadata`` or the nightly verification said it. Each kind
has one fixed :class:`Severity`, and one line saying what it means and which jobs find
it: :data:`FINDINGS`, the one table of findings (a :class:`KindRow` per kind).
docs/verification.md's table of anomaly classes is generated from it
(:func:`markdown_table`; ``tests/repo/test_findings_table.py`` fails when the two differ).

One occurrence on one object, as gc and reconcile report it, is a :class:`Finding`: the
same class for both, so their lines read alike (the verifier's occurrences are rows of
its anomaly table, :class:`tieredstore.verifier.outcome.Anomaly`, and a queue's layout decision
yields :class:`tieredstore.verifier.decision.QueueFinding`).

CORRUPT means committed data is damaged, missing or wrong; DIRTY means something needs
the operator's attention while every committed message is intact.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["FINDINGS", "Finding", "FindingKind", "KindRow", "Severity", "markdown_table"]


class Severity(enum.Enum):
    """How bad one finding is (see the module docstring)."""

    CORRUPT = "CORRUPT"
    DIRTY = "DIRTY"


class FindingKind(enum.Enum):
    """What a job found in the cold store; the value is its name in every report."""

    GAP = "gap"
    HOT_NOT_COVERED = "hot_not_covered"
    OVERLAP = "overlap"
    MISSING_OBJECT = "missing_object"
    SIZE_MISMATCH = "size_mismatch"
    DIGEST_MISMATCH = "digest_mismatch"
    CORRUPT_MANIFEST = "corrupt_manifest"
    CORRUPT_LOSS_RECORD = "corrupt_loss_record"
    RECORD_MISMATCH = "record_mismatch"
    CONTENT_MISMATCH = "content_mismatch"
    COLD_AHEAD_OF_HOT = "cold_ahead_of_hot"
    MISSING_HEAD = "missing_head"
    MANIFEST_MISMATCH = "manifest_mismatch"
    ORPHAN_OBJECT = "orphan_object"
    UNRECOGNISED = "unrecognised"
    CATALOGUE_DRIFT = "catalogue_drift"
    NOT_ADOPTED = "not_adopted"
    LOST_BEFORE_TIERING = "lost_before_tiering"
    UNPROVEN_START = "unproven_start"
    IMPOSSIBLE_LOSS_RECORD = "impossible_loss_record"
    IMPOSSIBLE_RETENTION_RECORD = "impossible_retention_record"
    UNPROVEN_STOP = "unproven_stop"

    @property
    def severity(self) -> Severity:
        return Severity.DIRTY if self in _DIRTY else Severity.CORRUPT

    @property
    def damage(self) -> bool:
        """Whether committed data is damaged or unreadable (severity CORRUPT)."""
        return self.severity is Severity.CORRUPT


_DIRTY = frozenset(
    {
        FindingKind.ORPHAN_OBJECT,
        FindingKind.UNRECOGNISED,
        FindingKind.CATALOGUE_DRIFT,
        FindingKind.NOT_ADOPTED,
        FindingKind.LOST_BEFORE_TIERING,
        FindingKind.UNPROVEN_START,
        FindingKind.UNPROVEN_STOP,
    }
)


@dataclass(frozen=True, slots=True)
class Finding:
    """One occurrence gc or reconcile reports: its kind, the object key it is about (a
    loss record's or batch object's key where no segment object is meant) and the
    sentence saying why: something the job leaves for the operator."""

    kind: FindingKind
    key: str
    detail: str

    def describe(self) -> str:
        """``<kind>: <detail> (<key>)``, the line every report and log shows."""
        return f"{self.kind.value}: {self.detail} ({self.key})"

    def __str__(self) -> str:
        return self.describe()


@dataclass(frozen=True)
class KindRow:
    """A row of :data:`FINDINGS`: what one kind of finding means, and which jobs report it."""

    meaning: str
    found_by: tuple[str, ...]


#: The one table of findings: each kind's meaning (as the reports explain it) and jobs.
FINDINGS: Final[Mapping[FindingKind, KindRow]] = {
    FindingKind.GAP: KindRow(
        "offsets between cold min and cold max in no committed segment (and in no accepted loss)",
        ("verifier", "reconcile"),
    ),
    FindingKind.HOT_NOT_COVERED: KindRow(
        "hot offsets in the required range, older than the lag allowance, not in cold: "
        "the untiered tail, or everything of a queue with no segment (includes offsets "
        "the broker deleted before they were tiered whose loss nobody accepted: the "
        "queue is PAUSED)",
        ("verifier",),
    ),
    FindingKind.MISSING_HEAD: KindRow(
        "cold starts above the queue's required start and no retention or loss record "
        "explains the difference (checked even where hot no longer has those offsets)",
        ("verifier",),
    ),
    FindingKind.MANIFEST_MISMATCH: KindRow(
        "a manifest's `min/max_store_timestamp` or `message_count` differs from its "
        "records (content level; retention, `restore --since` and offset by time trust "
        "them)",
        ("verifier",),
    ),
    FindingKind.OVERLAP: KindRow(
        "offsets covered by two committed segments", ("verifier", "reconcile")
    ),
    FindingKind.MISSING_OBJECT: KindRow(
        "a manifest names an object that does not exist; or a batch object the "
        "catalogue's slice rows name (with `--state-dir`: one per queue it held, the "
        "batch key as the object and the queue's offsets in it)",
        ("verifier", "gc", "reconcile"),
    ),
    FindingKind.SIZE_MISMATCH: KindRow(
        "an object's size differs from its manifest", ("verifier", "gc", "reconcile")
    ),
    FindingKind.DIGEST_MISMATCH: KindRow(
        "an object's digest (CRC-32C, or SHA-256 for 0.1.0 segments: the algorithm its "
        "manifest names) differs from its manifest; for a compressed object (manifest "
        "format 3) also one that does not decode, or whose stored bytes' CRC-32C differs "
        "from its `stored_digest` (a flip zstd never reads, which decodes to the recorded "
        "bytes)",
        ("verifier",),
    ),
    FindingKind.CORRUPT_MANIFEST: KindRow(
        "a MANIFEST that does not parse or validate (its range shows as a `gap` too), or a "
        "batch object's head (the batch key as the object, no queue: its slices' offsets "
        "show as `gap` or `hot_not_covered`)",
        ("verifier", "gc", "reconcile"),
    ),
    FindingKind.CORRUPT_LOSS_RECORD: KindRow(
        "a loss record that does not parse or validate", ("reconcile",)
    ),
    FindingKind.RECORD_MISMATCH: KindRow(
        "cold CQ unit vs cold record: offsets that do not tile the cold commitlog, or "
        "totalSize / queueOffset / physicalOffset fields that disagree",
        ("verifier",),
    ),
    FindingKind.CONTENT_MISMATCH: KindRow(
        "cold ≠ hot: CQ unit size or tagsCode, or record bytes outside [28, 36); or two "
        "cold copies that disagree (a batch slice the reading rule skips whose digests "
        "differ from the link read over exactly its offsets)",
        ("verifier",),
    ),
    FindingKind.COLD_AHEAD_OF_HOT: KindRow(
        "cold offsets at or beyond the hot max (hot regression)", ("verifier",)
    ),
    FindingKind.ORPHAN_OBJECT: KindRow(
        "a COMMIT_LOG / CONSUME_QUEUE object no manifest names, older than the grace "
        "period (`--orphan-grace`, `gc.grace`)",
        ("verifier", "gc"),
    ),
    FindingKind.UNRECOGNISED: KindRow(
        "a key under the broker prefix that is not tieredstore's; never deleted", ("gc",)
    ),
    FindingKind.CATALOGUE_DRIFT: KindRow(
        "the catalogue disagrees with the manifests (only with `--state-dir`)",
        ("verifier",),
    ),
    FindingKind.NOT_ADOPTED: KindRow(
        "a manifest reconcile could not adopt (an earlier finding or the queue's state blocks it)",
        ("reconcile",),
    ),
    FindingKind.LOST_BEFORE_TIERING: KindRow(
        "offsets the broker deleted before they were tiered, the loss accepted by "
        "`tieredstore resume --accept-loss`: one per loss record (`LOSS/<name>.json`, its "
        "key as the object), with its range and, in the detail, when and by which writer "
        "it was accepted",
        ("verifier",),
    ),
    FindingKind.UNPROVEN_START: KindRow(
        "a tiered queue without an init record: where its history must start is not on "
        "record (reported at the offset cold shows, count 0); messages hot holds that "
        "were stored while the tiering record tiered the topic are required all the same "
        "(`missing_head` where cold lacks them)",
        ("verifier",),
    ),
    FindingKind.UNPROVEN_STOP: KindRow(
        "a queue whose topic the tiering record excludes now, after an earlier entry "
        "tiered it, without a stop record for that exclusion: where its tiering stopped is "
        "not on record, so every message stored before the exclusion is required "
        "(reported at the first offset stored after it, count 0)",
        ("verifier",),
    ),
    FindingKind.IMPOSSIBLE_LOSS_RECORD: KindRow(
        "a loss record over offsets hot still holds: the broker deletes only from the "
        "head, so it cannot have deleted them before they were tiered; the record (its "
        "key as the object) explains nothing, so the offsets it covers show as `gap` or "
        "`hot_not_covered` too",
        ("verifier",),
    ),
    FindingKind.IMPOSSIBLE_RETENTION_RECORD: KindRow(
        "a retention record of a queue hot still has whose first offset is past the hot "
        "max, or at or past everything cold committed (retention never removes a live "
        "queue's newest segment); the record (its key as the object) explains nothing, "
        "so the head it claimed removed shows as `missing_head` or `hot_not_covered`",
        ("verifier",),
    ),
}


def markdown_table(kinds: Iterable[FindingKind]) -> str:
    """``kinds`` as a Markdown table (class, meaning, verdict), in the order given."""
    lines = ["| class | meaning | verdict |", "|---|---|---|"]
    for kind in kinds:
        lines.append(f"| `{kind.value}` | {FINDINGS[kind].meaning} | {kind.severity.value} |")
    return "\n".join(lines) + "\n"
