"""The verifier's vocabulary: anomaly kinds it reports, verdicts, levels, lag, options.

An anomaly is a :class:`~tieredstore.findings.FindingKind` (the vocabulary gc and
reconcile share); the verifier reports the kinds in :data:`VERIFIER_KINDS`, each with
its fixed severity and meaning (the one table: :data:`tieredstore.findings.FINDINGS`,
rendered in docs/verification.md, "Anomaly classes").

The verdict, its ordering, exit codes and colours are defined once, in
:mod:`tieredstore.verifier.verdict` (re-exported here).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tieredstore.errors import ConfigError
from tieredstore.findings import FindingKind
from tieredstore.verifier.verdict import EXIT_COULD_NOT_RUN, Verdict, verdict_of

__all__ = [
    "DEFAULT_LAG_ALLOWANCE",
    "DEFAULT_ORPHAN_GRACE_S",
    "EXIT_COULD_NOT_RUN",
    "VERIFIER_KINDS",
    "LagAllowance",
    "LagUnit",
    "Level",
    "Verdict",
    "VerifyOptions",
    "parse_lag_allowance",
    "verdict_of",
]

#: Objects without a manifest younger than this are a commit in flight, not orphans.
DEFAULT_ORPHAN_GRACE_S: Final = 3600.0


#: The finding kinds the verifier reports (gc's ``unrecognised`` and reconcile's
#: ``not_adopted`` / ``corrupt_loss_record`` are never among its anomalies).
VERIFIER_KINDS: Final = (
    FindingKind.GAP,
    FindingKind.HOT_NOT_COVERED,
    FindingKind.OVERLAP,
    FindingKind.MISSING_OBJECT,
    FindingKind.SIZE_MISMATCH,
    FindingKind.DIGEST_MISMATCH,
    FindingKind.CORRUPT_MANIFEST,
    FindingKind.RECORD_MISMATCH,
    FindingKind.CONTENT_MISMATCH,
    FindingKind.COLD_AHEAD_OF_HOT,
    FindingKind.MISSING_HEAD,
    FindingKind.MANIFEST_MISMATCH,
    FindingKind.ORPHAN_OBJECT,
    FindingKind.CATALOGUE_DRIFT,
    FindingKind.LOST_BEFORE_TIERING,
    FindingKind.UNPROVEN_START,
    FindingKind.UNPROVEN_STOP,
    FindingKind.IMPOSSIBLE_LOSS_RECORD,
    FindingKind.IMPOSSIBLE_RETENTION_RECORD,
)


class Level(enum.Enum):
    """How deep to look.

    * ``offsets``: manifests, object listing (existence, sizes), the consume-queue
      objects (digest, contiguity, size/tagsCode vs hot). Commitlog objects are not read.
    * ``content``: also read every commitlog object (digest, record fields) and compare
      each record's bytes with the hot record outside bytes [28, 36).
    """

    OFFSETS = "offsets"
    CONTENT = "content"


class LagUnit(enum.Enum):
    """What a lag allowance counts."""

    MESSAGES = "messages"
    SECONDS = "seconds"


@dataclass(frozen=True, slots=True)
class LagAllowance:
    """How far cold may trail hot before the untiered tail is an anomaly.

    * ``MESSAGES``: the newest ``value`` hot offsets of a queue may be untiered.
    * ``SECONDS``: hot records whose storeTimestamp is within ``value`` seconds of the
      broker's checkpoint ``physicMsgTimestamp`` (the store time of the newest data the
      broker has flushed) may be untiered. The broker's own clock is the reference, so
      clock skew between the verifier host and the broker does not matter, and records
      the durability guard holds back (stored after the checkpoint) are always allowed.
    """

    unit: LagUnit
    value: float

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ConfigError(f"lag allowance must not be negative, got {self.value}")

    def __str__(self) -> str:
        if self.unit is LagUnit.MESSAGES:
            return f"{int(self.value)} messages"
        return f"{self.value:g}s"


DEFAULT_LAG_ALLOWANCE: Final = LagAllowance(LagUnit.SECONDS, 300.0)

_SECONDS_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_lag_allowance(text: str) -> LagAllowance:
    """Parse ``1000`` (messages) or ``60s`` / ``500ms`` / ``5m`` / ``1h`` (seconds).

    Raises:
        ConfigError: anything else, naming the text.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", text)
    if not m and text.strip().startswith("-"):
        raise ConfigError(f"bad lag allowance {text!r}: must not be negative")
    if not m:
        raise ConfigError(
            f"bad lag allowance {text!r}: a message count (1000) or a duration (60s, 5m)"
        )
    number, unit = m.group(1), m.group(2)
    if unit is None:
        if "." in number:
            raise ConfigError(f"bad lag allowance {text!r}: a message count is a whole number")
        value = float(int(number)) if len(number) < 300 else math.inf
    else:
        value = float(number) * _SECONDS_UNITS[unit]
    if not math.isfinite(value):  # hundreds of digits overflow a float: refuse, not "inf"
        raise ConfigError(f"bad lag allowance {text!r}: too large")
    return LagAllowance(LagUnit.MESSAGES if unit is None else LagUnit.SECONDS, value)


@dataclass(frozen=True)
class VerifyOptions:
    """Everything one verification run needs.

    ``now_ms`` is the reference time for the orphan grace period and catalogue drift
    (injected so tests control age); ``storage_options`` go to
    ``fsspec.core.url_to_fs`` for the cold URL on the driver and in every task.
    """

    hot: Path
    cold_url: str
    cluster: str
    broker: str
    now_ms: int
    level: Level = Level.OFFSETS
    lag_allowance: LagAllowance = DEFAULT_LAG_ALLOWANCE
    orphan_grace_s: float = DEFAULT_ORPHAN_GRACE_S
    metadata_dir: Path | None = None
    storage_options: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.orphan_grace_s < 0:
            raise ConfigError(f"orphan grace must not be negative, got {self.orphan_grace_s}")
