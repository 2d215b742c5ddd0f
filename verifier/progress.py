"""What a verification is doing, one line per stage on stderr (``--progress``).

A run spends most of a minute starting Spark and in a few Spark jobs; without these
lines the terminal shows nothing until the verdict. Each line names the stage and what
it covers (queues, manifests, segments), prefixed by the time since the run started:

    tieredstore verify: [   12 ms] checking the cold store at s3://bucket/tiered
    tieredstore verify: [   1.4 s] starting Spark (local[*])
    tieredstore verify: [  18.5 s] listed the cold store: 182 objects, 91 manifests; 16 hot queues
    tieredstore verify: [  19.0 s] reading 16 hot queues
    ...

The lines go to stderr, so stdout keeps only the verdict line (scripts parse it);
``auto`` (the default) writes them only when stderr is a terminal, so cron mail and
captured logs stay as quiet as before.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from tieredstore.clock import Clock
from tieredstore.humanize import human_seconds

__all__ = ["ProgressMode", "Reporter", "Stages", "silent"]


class ProgressMode(enum.Enum):
    """``--progress``: ``on``, ``off``, or ``auto`` (on when stderr is a terminal)."""

    ON = "on"
    OFF = "off"
    AUTO = "auto"

    def enabled(self, stream: TextIO) -> bool:
        if self is ProgressMode.AUTO:
            return stream.isatty()
        return self is ProgressMode.ON


def silent(_text: str) -> None:
    """A stage reporter that says nothing (the job's default)."""


@dataclass
class Stages:
    """Callable stage reporter: ``stages("reading 16 hot queues")`` writes one line.

    ``clock`` times the run from the reporter's creation; ``out`` is stderr unless a
    test gives another stream.
    """

    prog: str
    clock: Clock
    out: TextIO = field(default_factory=lambda: sys.stderr)
    started_ms: int = -1

    def __post_init__(self) -> None:
        if self.started_ms < 0:
            self.started_ms = self.clock.now_ms()

    def __call__(self, text: str) -> None:
        elapsed = human_seconds(max(self.clock.now_ms() - self.started_ms, 0) / 1000)
        self.out.write(f"{self.prog}: [{elapsed:>8}] {text}\n")
        self.out.flush()


#: What :func:`verifier.job.verify` takes: a function of one line of text.
Reporter = Callable[[str], None]
