"""How ``status`` lays out its table: worst queues first, filtered, fitted to the screen.

A terminal row that wraps turns a table into noise, and a header that scrolls away
leaves numbers without names; the lag alert's runbook sends on-call to this view. So:

* **Order.** Worst first (:func:`worst_first`): DIVERGED, then PAUSED or with messages
  lost unacknowledged, then queues with a note, then the rest; within each, the oldest
  lag first, then the most messages behind, then by name.
* **Filters.** ``--topic GLOB`` (fnmatch, case-sensitive as topic names are) and
  ``--problems`` (only the queues of the first three groups) narrow the table; the
  health line always summarises every queue.
* **Width.** Given a width, columns are dropped from the least useful up (room MiB,
  cold/hot min, lag MiB, ...) until the row fits; the topic column takes what is left
  (at least 12 characters); a longer name is shortened in the middle (``Orders…ice1``:
  names that share a prefix stay apart). No width (output piped): every column, names
  whole.
* **Height.** Given a height, the health line and the header stay on screen and the
  rows that do not fit are counted in a last line (``… 37 more queues``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from tieredstore.dispatcher.status_report import QueueStatus
from tieredstore.humanize import shorten_middle
from tieredstore.metadata.rows import QueueState

__all__ = ["Layout", "fit", "is_problem", "render_table", "select", "worst_first"]

ELLIPSIS: Final = "…"
_MIN_TOPIC: Final = 12


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, ending in ``…`` when it was cut."""
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + ELLIPSIS if width > 0 else ""


def _severity(s: QueueStatus) -> int:
    if s.state in (QueueState.DIVERGED, QueueState.DEGRADED):
        return 0
    if s.state is QueueState.PAUSED or s.lost_unacknowledged:
        return 1
    return 2 if s.note else 3


def is_problem(s: QueueStatus) -> bool:
    """DIVERGED, PAUSED, messages lost unacknowledged, or a note (could not be read)."""
    return _severity(s) < 3


def worst_first(statuses: Sequence[QueueStatus]) -> list[QueueStatus]:
    """Severity, then the oldest lag, then the most messages behind, then the name."""
    return sorted(
        statuses,
        key=lambda s: (_severity(s), -s.lag_seconds, -s.lag_messages, s.topic, s.queue),
    )


def select(
    statuses: Sequence[QueueStatus], *, topic: str | None, problems: bool
) -> list[QueueStatus]:
    """The queues the table shows, worst first."""
    chosen = [
        s
        for s in statuses
        if (topic is None or fnmatch.fnmatchcase(s.topic, topic))
        and (not problems or is_problem(s))
    ]
    return worst_first(chosen)


@dataclass(frozen=True, slots=True)
class _Column:
    title: str
    width: int
    value: Callable[[QueueStatus], str]
    #: dropped in this order when the screen is narrow (0: never)
    drop: int = 0


def _lost(s: QueueStatus) -> str:
    if s.lost_unacknowledged:
        return f"{s.lost_unacknowledged}!"
    return str(s.lost_accepted) if s.lost_accepted else "-"


_MIB: Final = 1 << 20


def _room_mib(s: QueueStatus) -> str:
    b = s.retention_headroom_bytes
    return "-" if b is None or s.retention_headroom_seconds is None else f"{b / _MIB:.1f}"


def _room_s(s: QueueStatus) -> str:
    sec = s.retention_headroom_seconds
    return "-" if sec is None or s.retention_headroom_bytes is None else f"{sec:.0f}"


#: In display order; ``drop`` says which go first on a narrow screen.
_COLUMNS: Final = (
    _Column("q", 3, lambda s: str(s.queue)),
    _Column("state", 8, lambda s: s.state.value),
    _Column("hot min", 9, lambda s: str(s.hot_min), drop=6),
    _Column("hot max", 9, lambda s: str(s.hot_max), drop=4),
    _Column("cold min", 9, lambda s: str(s.cold_min), drop=7),
    _Column("cold commit", 11, lambda s: str(s.cold_commit), drop=3),
    _Column("lag msgs", 9, lambda s: str(s.lag_messages)),
    _Column("lag MiB", 8, lambda s: f"{s.lag_bytes / _MIB:.2f}", drop=5),
    _Column("lag s", 7, lambda s: f"{s.lag_seconds:.1f}"),
    _Column("room MiB", 9, _room_mib, drop=8),
    _Column("room s", 8, _room_s, drop=2),
    _Column("lost", 7, _lost, drop=1),
)


@dataclass(frozen=True, slots=True)
class Layout:
    """The screen the table must fit: ``width``/``height`` in characters/lines, None =
    unbounded (piped output)."""

    width: int | None = None
    height: int | None = None


def _columns_for(width: int | None) -> list[_Column]:
    columns = list(_COLUMNS)
    if width is None:
        return columns
    for victim in sorted((c for c in _COLUMNS if c.drop), key=lambda c: -c.drop):
        if sum(c.width + 1 for c in columns) + _MIN_TOPIC <= width:
            break
        columns.remove(victim)
    return columns


def render_table(
    statuses: Sequence[QueueStatus], layout: Layout, *, reserved: int = 0
) -> list[str]:
    """Header and rows for ``statuses`` (already selected and ordered), fitted to
    ``layout``; ``reserved`` lines of the height are used by what is printed above."""
    columns = _columns_for(layout.width)
    longest = max((len(s.topic) for s in statuses), default=5)
    fixed = sum(c.width + 1 for c in columns)
    topic_w = max(longest, 5) if layout.width is None else max(_MIN_TOPIC, layout.width - fixed)
    topic_w = min(topic_w, max(longest, 5))

    def row(topic: str, cells: list[str], note: str) -> str:
        line = f"{shorten_middle(topic, topic_w):<{topic_w}}"
        for c, cell in zip(columns, cells, strict=True):
            line += (
                f" {fit(cell, c.width):>{c.width}}"
                if c.title != "state"
                else (f" {fit(cell, c.width):<{c.width}}")
            )
        if note:
            line += f"  {note}"
        return line if layout.width is None else fit(line, layout.width)

    lines = [row("topic", [c.title for c in columns], "")]
    rows = [row(s.topic, [c.value(s) for c in columns], s.note) for s in statuses]
    if layout.height is not None:
        room = max(layout.height - reserved - 1, 1)  # the header
        if len(rows) > room:
            hidden = len(rows) - (room - 1)
            more = f"{ELLIPSIS} {hidden} more queues (narrow with --topic GLOB or --problems)"
            rows = [*rows[: room - 1], fit(more, layout.width or len(more))]
    return lines + rows
