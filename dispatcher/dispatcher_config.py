"""What the dispatcher needs from the settings (built from them by the CLI's wiring,
:func:`tieredstore.cli.sidecar.runtime.dispatcher_config`).

Frozen: a reload (:mod:`tieredstore.cli.sidecar.reload`) swaps the whole value on the
running dispatcher, which hands it to its parts; what they built at start from it (the commit
semaphore from ``concurrency``) stays as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dispatcher.durability import GuardMode
from dispatcher.planner import Limits
from dispatcher.topic_filter import TopicFilter

__all__ = ["DispatcherConfig"]


@dataclass(frozen=True, slots=True)
class DispatcherConfig:
    """What the dispatcher needs from the settings."""

    limits: Limits = field(default_factory=Limits)
    tick_interval: float = 1.0
    concurrency: int = 4
    read_batch_bytes: int = 1 << 20
    init_policy: str = "earliest"
    guard: GuardMode = GuardMode.SYNC
    topic_filter: TopicFilter = field(default_factory=TopicFilter)
    lease_renew_interval: float = 10.0
    #: Commitlog bytes read per window by the tiering pass (:mod:`dispatcher.commitlog_pass`).
    pass_window_bytes: int = 2 << 20
    #: Records planned per round of the pass at most (bounds the unit arrays' memory).
    pass_max_records: int = 1 << 20
    #: Where the pass spools gathered segments (None: the system's temp directory).
    spool_dir: Path | None = None
    #: Spool bytes a round may use at most (0: the disk's free space less a reserve).
    spool_max_bytes: int = 0
