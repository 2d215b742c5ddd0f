"""The one vocabulary of cold-store findings, shared by the verifier, gc and reconcile.

Each job reports what it found as a :class:`FindingKind`; the value is the name every
report, log line and metric label uses, so "size_mismatch" means the same thing whether
``gc --dry-run``, ``rebuild-metadata`` or the nightly verification said it. Each kind
has one fixed :class:`Severity`::

    kind                 severity  meaning                                      found by
    gap                  CORRUPT   offsets missing between cold min and max     verifier, reconcile
    hot_not_covered      CORRUPT   hot offsets past the lag allowance not in    verifier
                                   cold
    overlap              CORRUPT   an offset covered by two committed segments  verifier, reconcile
    missing_object       CORRUPT   a manifest names an object that is absent    all three
    size_mismatch        CORRUPT   an object's size differs from its manifest   all three
    digest_mismatch      CORRUPT   an object's digest differs from its manifest verifier
    corrupt_manifest     CORRUPT   a manifest that does not parse or validate   all three
    corrupt_loss_record  CORRUPT   a loss record that does not parse            reconcile
    record_mismatch      CORRUPT   cold CQ unit vs cold CL record disagree      verifier
    content_mismatch     CORRUPT   cold differs from hot outside bytes [28, 36) verifier
    cold_ahead_of_hot    CORRUPT   cold offsets at or past the hot max          verifier
    missing_head         CORRUPT   cold starts above the queue's required       verifier
                                   start, no retention or loss record explains
                                   it
    manifest_mismatch    CORRUPT   a manifest's store times or message count    verifier
                                   differ from its records
    orphan_object        DIRTY     an object no manifest names, past the grace  verifier, gc
    unrecognised         DIRTY     a key that is not tieredstore's; never       gc
                                   deleted
    catalogue_drift      DIRTY     the SQLite catalogue disagrees with cold     verifier
    not_adopted          DIRTY     a manifest reconcile could not adopt (an     reconcile
                                   earlier finding or the queue's state blocks
                                   it)
    lost_before_tiering  DIRTY     offsets the broker deleted before they were  verifier
                                   tiered, the loss accepted (a loss record)
    unproven_start       DIRTY     a tiered queue without an init record: where verifier
                                   its history must start is not on record

CORRUPT means committed data is damaged, missing or wrong; DIRTY means something needs
the operator's attention while every committed message is intact.
"""

from __future__ import annotations

import enum

__all__ = ["FindingKind", "Severity"]


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
    }
)
