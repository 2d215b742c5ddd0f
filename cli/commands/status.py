"""``tieredstore status``: per queue hot min/max, cold min/commit, lag, state, losses and
retention headroom.

Reads the broker store and the catalogue (read-only, so it works next to a running
sidecar); it never contacts the cold store. The table starts with a one-line health
summary (:func:`health_line`; WARNING also when messages wait and no sidecar holds the
writer lease, or its holder makes no progress, or the cold store refuses the running
sidecar: its message, which the sidecar keeps in the state dir's ``cold-access.json``,
:mod:`tieredstore.dispatcher.cold_access`). ``--watch`` redraws it in place every ``--interval``
until Ctrl-C (on a terminal; piped, it prints one frame after another).

Columns beyond the offsets and lag (JSON field names in brackets):

* ``room MiB`` / ``room s`` [``retention_headroom_bytes`` / ``_seconds``]: how much the
  broker holds before the queue's oldest untiered message — what its retention deletes
  before it deletes that message (:mod:`tieredstore.dispatcher.retention_pressure`). ``-`` (JSON
  null) when nothing is untiered; 0 when the message is already gone.
* ``lost`` [``lost_unacknowledged`` + ``lost_accepted``]: messages the broker deleted
  before they were tiered — not yet accepted (the queue is PAUSED; ``tieredstore resume
  --accept-loss``), and accepted by resume (loss records in cold, listed in ``losses``).
  The text shows ``<unacknowledged>!`` or the accepted count.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TextIO

from tieredstore.cli.commands._settings import add_settings_arguments, settings_from_args
from tieredstore.cli.commands.status_view import Layout, fit, render_table, select
from tieredstore.clock import Clock, SystemClock
from tieredstore.dispatcher.status_report import (
    QueueStatus,
    WriterStatus,
    as_json,
    collect,
    writer_status,
)
from tieredstore.errors import ConfigError
from tieredstore.hot.store import HotStore
from tieredstore.humanize import human_bytes, human_seconds, iso_time, shorten_middle
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueState
from tieredstore.settings.loader import Settings, parse_duration

#: Cursor home and clear screen: the next frame replaces the last one.
CLEAR: Final = "\x1b[H\x1b[2J"
#: The order the health line counts the queues by state in: the worst first.
_STATES: Final = (
    QueueState.DIVERGED,
    QueueState.DEGRADED,
    QueueState.PAUSED,
    QueueState.STOPPED,
    QueueState.ACTIVE,
    QueueState.DELETED,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--watch", action="store_true", help="refresh in place every --interval until Ctrl-C"
    )
    p.add_argument("--interval", default="2s", help="--watch refresh period (default 2s)")
    p.add_argument("--topic", metavar="GLOB", help="show only topics matching GLOB (e.g. 'Order*')")
    p.add_argument(
        "--problems",
        action="store_true",
        help="show only DIVERGED or PAUSED queues, unacknowledged losses and queues with notes",
    )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one look at the state dir and the broker store gives: the queues and, when
    known, the writer (:func:`tieredstore.dispatcher.status_report.writer_status`)."""

    queues: Sequence[QueueStatus]
    writer: WriterStatus | None = None


def health(statuses: Sequence[QueueStatus], writer: WriterStatus | None = None) -> str:
    """The overall verdict, decided here only: ``NO QUEUES`` when the catalogue has none,
    ``CRITICAL`` when a queue is DIVERGED or DEGRADED (cold damage), ``WARNING`` when one
    is PAUSED or could not be read (it has a note) or the writer has a warning (no
    sidecar holds the lease while messages wait, or the holder makes no progress),
    ``OK`` otherwise. ``status --json`` gives it as ``health``."""
    states = Counter(s.state for s in statuses)
    if not statuses:
        return "NO QUEUES"
    if states[QueueState.DIVERGED] or states[QueueState.DEGRADED]:
        return "CRITICAL"
    if states[QueueState.PAUSED] or any(s.note for s in statuses):
        return "WARNING"
    if writer is not None and writer.warning:
        return "WARNING"
    return "OK"


def health_line(
    statuses: Sequence[QueueStatus],
    now_ms: int,
    width: int | None = None,
    *,
    writer: WriterStatus | None = None,
) -> str:
    """One line: when, the verdict (:func:`health`), queues by state, the lag (total,
    oldest, where), then the writer's warning if any and who the writer is or was.

    Given a ``width`` (a terminal's), the line fits it without losing what matters most
    — the verdict, the lag, the oldest age and the worst queue: first the queue counts
    by state, then the lag in bytes, the date, the time are left out, and only then is the
    worst queue's topic shortened in the middle (its queue id kept). Only a screen too
    narrow even for that cuts the line's end — the writer's warning, which comes after
    the lag (who held the lease goes first of all).
    """
    parts = _HealthParts.of(statuses, now_ms, writer)
    if width is None:
        return parts.line()
    for dropped in _DROP_ORDER:
        line = parts.line(dropped)
        if len(line) <= width:
            return line
    last = _DROP_ORDER[-1]
    room = width - len(parts.line(last, topic="", warning=False))
    topic = shorten_middle(parts.topic, max(room, 8))
    base = parts.line(last, topic=topic, warning=False)
    # The writer's warning takes what room is left after them, if it is worth showing:
    # it never pushes the lag or the worst queue off the line.
    if not parts.warning or len(base) + _WARNING_GLIMPSE > width:
        return fit(base, width)
    return fit(parts.line(last, topic=topic), width)


#: The least of the writer's warning worth showing, its "; " included (``; no side…``).
_WARNING_GLIMPSE: Final = 10


#: Which optional parts of the health line go, in turn, on a narrow screen.
_DROP_ORDER: Final[tuple[frozenset[str], ...]] = (
    frozenset(),
    frozenset({"detail"}),
    frozenset({"detail", "counts"}),
    frozenset({"detail", "counts", "bytes"}),
    frozenset({"detail", "counts", "bytes", "date"}),
    frozenset({"detail", "counts", "bytes", "date", "time"}),
)


@dataclass(frozen=True, slots=True)
class _HealthParts:
    """The pieces of the health line; :meth:`line` joins those not ``dropped``."""

    time: str
    verdict: str
    queues: int
    counts: str
    noted: int
    lag_messages: int
    lag_bytes: str
    oldest: str
    topic: str
    queue: int
    warning: str = ""  # the writer's (no sidecar holds the lease, ...), after the lag
    detail: str = ""  # who held it: the first part a narrow screen loses

    @classmethod
    def of(
        cls, statuses: Sequence[QueueStatus], now_ms: int, writer: WriterStatus | None = None
    ) -> _HealthParts:
        warned = writer is not None and bool(writer.warning)
        states = Counter(s.state for s in statuses)
        oldest = max(statuses, key=lambda s: s.lag_seconds, default=None)
        lagging = oldest is not None and oldest.lag_seconds > 0
        return cls(
            time=iso_time(now_ms),
            verdict=health(statuses, writer),
            queues=len(statuses),
            counts=", ".join(f"{states[s]} {s.value}" for s in _STATES if states[s]),
            noted=sum(1 for s in statuses if s.note),
            lag_messages=sum(s.lag_messages for s in statuses),
            lag_bytes=human_bytes(sum(s.lag_bytes for s in statuses)),
            oldest=human_seconds(oldest.lag_seconds) if oldest is not None and lagging else "",
            topic=oldest.topic if oldest is not None and lagging else "",
            queue=oldest.queue if oldest is not None else 0,
            warning=(writer.warning or "") if writer is not None and warned else "",
            detail=writer.detail if writer is not None and warned else "",
        )

    def line(
        self,
        dropped: frozenset[str] = frozenset(),
        *,
        topic: str | None = None,
        warning: bool = True,
    ) -> str:
        head = f"{self.verdict}: {self.queues} queues"
        if "time" not in dropped:  # 2026-11-25T21:16:23Z, or 21:16:23Z without the date
            head = f"{self.time.partition('T')[2] if 'date' in dropped else self.time} {head}"
        if self.counts and "counts" not in dropped:
            head += f" ({self.counts})"
        parts = [head]
        if self.noted:
            parts.append(f"{self.noted} with notes")
        lag = f"lag {self.lag_messages} messages"
        if "bytes" not in dropped:
            lag += f", {self.lag_bytes}"
        if self.oldest:
            lag += f", oldest {self.oldest} ({self.topic if topic is None else topic}/{self.queue})"
        parts.append(lag)
        if self.warning and warning:
            parts.append(self.warning)
        if self.detail and warning and "detail" not in dropped:
            parts.append(self.detail)
        return "; ".join(parts)


@dataclass(frozen=True, slots=True)
class View:
    """What the table shows (filters) and the screen it must fit (:mod:`.status_view`)."""

    topic: str | None = None
    problems: bool = False
    layout: Layout = field(default_factory=Layout)


def frame(
    statuses: Sequence[QueueStatus],
    now_ms: int,
    view: View | None = None,
    writer: WriterStatus | None = None,
) -> str:
    """What one refresh shows: the health line (of every queue, and the writer), a blank
    line, the table (of the selected queues, worst first), fitted to the view's screen."""
    view = view or View()
    top = health_line(statuses, now_ms, view.layout.width, writer=writer)
    shown = select(statuses, topic=view.topic, problems=view.problems)
    if statuses and not shown:  # a filter left nothing: say so, not a bare header
        return "\n".join([top, "", _nothing_shown(view, len(statuses))]) + "\n"
    return "\n".join([top, "", *render_table(shown, view.layout, reserved=2)]) + "\n"


def _nothing_shown(view: View, total: int) -> str:
    what = f"matching --topic {view.topic!r}" if view.topic is not None else ""
    if view.problems:
        line = (
            f"no problems: none of the {total} queues {what + ' ' if what else ''}is "
            "DIVERGED, PAUSED, losing messages or unreadable"
        )
    else:
        line = f"no queue {what} (of {total})"
    return line if view.layout.width is None else fit(line, view.layout.width)


async def watch(
    snapshot: Callable[[int], Snapshot],
    *,
    clock: Clock,
    out: TextIO,
    interval: float,
    in_place: bool,
    frames: int | None = None,
    view: Callable[[], View] = View,
) -> int:
    """Draw ``snapshot(now_ms)`` every ``interval`` seconds on ``clock``; ``frames`` bounds
    the number of refreshes (None: until cancelled). ``in_place`` clears the screen
    before each frame; otherwise frames follow one another, a blank line apart.
    ``view`` is asked before each frame (the terminal may have been resized). Returns
    how many frames were drawn.
    """
    drawn = 0
    while frames is None or drawn < frames:
        now = clock.now_ms()
        seen = snapshot(now)
        text = frame(seen.queues, now, view(), seen.writer)
        if in_place:  # no newline after the last line: the screen must not scroll
            out.write(CLEAR + text.removesuffix("\n"))
        else:
            out.write(("\n" if drawn else "") + text)
        out.flush()
        drawn += 1
        if frames is None or drawn < frames:
            await clock.sleep(interval)
    return drawn


def _interval(args: argparse.Namespace) -> float:
    """The ``--watch`` period in seconds (ConfigError if bad or used with ``--json``)."""
    if args.json:
        raise ConfigError("--watch draws the table; --json prints one snapshot: pick one")
    try:
        interval = parse_duration(args.interval)
    except ValueError as exc:
        raise ConfigError(f"bad --interval: {exc}") from exc
    if interval <= 0:
        raise ConfigError(f"bad --interval: must be positive, got {args.interval!r}")
    return interval


def run(args: argparse.Namespace) -> int:
    from tieredstore.dispatcher import stopped_file
    from tieredstore.dispatcher.status_report import mark_stopped

    # status never touches the cold store, so a cold URL is not required here.
    settings = settings_from_args(args, extra={"cold.url": args.cold or "memory://unused"})
    hot = HotStore(settings.store.path)

    def snapshot(now_ms: int) -> Snapshot:
        with Catalogue.open(
            settings.state.dir,
            cluster=settings.cold.cluster,
            broker=settings.cold.broker,
            read_only=True,
            cold_url=args.cold,  # checked when given (status never needs it)
        ) as catalogue:
            rows = catalogue.queues.all()
            losses = catalogue.queues.losses()
            lease = catalogue.lease()
        marks = settings.state.dir / stopped_file.FILE_NAME
        stopped, degraded = stopped_file.load(marks), stopped_file.load_degraded(marks)
        queues = mark_stopped(collect(hot, rows, now_ms, losses), stopped, degraded)
        lag = sum(q.lag_messages for q in queues)
        writer = writer_status(
            lease, rows, lag_messages=lag, now_ms=now_ms, stall_after_s=_stall_after(settings)
        )
        return Snapshot(queues, _with_refusals(writer, settings.state.dir))

    tty = sys.stdout.isatty()
    if args.watch:
        interval = _interval(args)
        try:
            asyncio.run(
                watch(
                    snapshot,
                    clock=SystemClock(),
                    out=sys.stdout,
                    interval=interval,
                    in_place=tty,
                    view=lambda: _view(args, tty=tty, pinned=True),
                )
            )
        except KeyboardInterrupt:
            return 0  # Ctrl-C is how a watch ends
        return 0
    now_ms = time.time_ns() // 1_000_000
    seen = snapshot(now_ms)
    statuses, writer = seen.queues, seen.writer
    if args.json:
        shown = select(statuses, topic=args.topic, problems=args.problems)
        doc = {
            "health": health(statuses, writer),
            "summary": health_line(statuses, now_ms, writer=writer),
            "writer": None if writer is None else _writer_json(writer),
            "queues": [as_json(s) for s in shown],
        }
        print(json.dumps(doc, indent=1))
        return 0
    sys.stdout.write(frame(statuses, now_ms, _view(args, tty=tty, pinned=False), writer))
    return 0


def _with_refusals(writer: WriterStatus, state_dir: Path) -> WriterStatus:
    """``writer`` with the cold store's refusals of the running sidecar first in its
    warning (:mod:`tieredstore.dispatcher.cold_access`): the cause first, as a refused renewal also
    lets the lease lapse."""
    from tieredstore.dispatcher import cold_access

    found = cold_access.load_refusals(state_dir / cold_access.FILE_NAME)
    refused = cold_access.refusals_warning(found)
    if not refused:
        return writer
    also = f"; {writer.warning}" if writer.warning else ""
    return dataclasses.replace(writer, warning=refused + also)


def _stall_after(settings: Settings) -> float:
    """How long a lease holder may go without moving any queue while messages wait:
    three segment ages, at least five minutes (a segment is cut within one age)."""
    return max(300.0, 3 * settings.tiering.segment_max_age)


def _writer_json(writer: WriterStatus) -> dict[str, object]:
    return {
        "state": writer.state.value,
        "holder": writer.holder,
        "since_ms": writer.since_ms,
        "warning": writer.warning,
        "detail": writer.detail,
    }


def _view(args: argparse.Namespace, *, tty: bool, pinned: bool) -> View:
    """Fit a terminal's width (and, for ``--watch``, its height); piped: no limits."""
    if not tty:
        return View(args.topic, args.problems)
    size = shutil.get_terminal_size()
    return View(args.topic, args.problems, Layout(size.columns, size.lines if pinned else None))
