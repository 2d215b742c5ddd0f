"""``tieredstore status``: the one-line health summary and ``--watch`` on a virtual clock."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tieredstore.cli.commands.status import CLEAR, Snapshot, health_line, watch
from tieredstore.clock import VirtualClock
from tieredstore.dispatcher.status_report import QueueStatus
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.metadata.rows import QueueState

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def _q(topic: str, queue: int, state: QueueState = QueueState.ACTIVE, **kw: object) -> QueueStatus:
    base = QueueStatus(topic, queue, state, 0, 100, 0, 100, 0, 0, 0.0, "")
    return replace(base, **kw)  # type: ignore[arg-type]


def test_health_line_names_the_worst_and_the_oldest_lag() -> None:
    ok = [_q("A", 0), _q("A", 1, lag_messages=5, lag_bytes=3 << 20, lag_seconds=75.0)]
    assert health_line(ok, T0) == (
        "2023-11-14T22:13:20Z OK: 2 queues (2 ACTIVE); "
        "lag 5 messages, 3.0 MiB, oldest 1 m 15 s (A/1)"
    )
    paused = [*ok, _q("B", 0, QueueState.PAUSED), _q("C", 2, note="cannot read queue")]
    assert health_line(paused, T0).startswith(
        "2023-11-14T22:13:20Z WARNING: 4 queues (1 PAUSED, 3 ACTIVE); 1 with notes; lag 5"
    )
    diverged = [*paused, _q("D", 0, QueueState.DIVERGED)]
    assert " CRITICAL: 5 queues (1 DIVERGED, 1 PAUSED, 3 ACTIVE);" in health_line(diverged, T0)
    assert health_line([], T0) == "2023-11-14T22:13:20Z NO QUEUES: 0 queues; lag 0 messages, 0 B"


def test_health_line_warns_when_no_sidecar_holds_the_lease() -> None:
    from tieredstore.dispatcher.status_report import WriterState, WriterStatus

    lagging = [_q("A", 0, lag_messages=3000, lag_bytes=1 << 20, lag_seconds=40.0)]
    gone = WriterStatus(WriterState.NOT_HELD, "u@h", T0 - 60_000,
                        "no sidecar holds the writer lease since 2023-11-14T22:12:20Z",
                        "last holder u@h")  # fmt: skip
    assert health_line(lagging, T0, writer=gone) == (
        "2023-11-14T22:13:20Z WARNING: 1 queues (1 ACTIVE); lag 3000 messages, 1.0 MiB, "
        "oldest 40.0 s (A/0); no sidecar holds the writer lease since 2023-11-14T22:12:20Z; "
        "last holder u@h"
    )
    # On a narrow screen the holder goes first, then what the line drops anyway; the
    # verdict and the lag stay whole and the warning keeps what room is left.
    narrow = health_line(lagging, T0, 80, writer=gone)
    assert len(narrow) == 80 and "last holder" not in narrow and narrow.endswith("…")
    assert narrow.startswith("WARNING: 1 queues; lag 3000 messages, oldest 40.0 s (A/0); no sid")
    quiet = WriterStatus(WriterState.NOT_HELD, "u@h", T0 - 60_000, None)  # nothing waits
    assert health_line([_q("A", 0)], T0, writer=quiet).startswith("2023-11-14T22:13:20Z OK: ")


LONG = "OrdersFromTheEuropeanWebShopCheckoutServiceForTheNightlyBatch"


@pytest.mark.parametrize("width", [100, 80, 60])
def test_a_narrow_health_line_keeps_the_verdict_lag_oldest_age_and_worst_queue(
    width: int,
) -> None:
    statuses = [
        _q(f"{LONG}{i}", q, lag_messages=10 + q, lag_bytes=q << 20, lag_seconds=q + i / 10)
        for i in range(2)
        for q in range(4)
    ]
    line = health_line(statuses, T0, width)
    assert len(line) <= width
    assert "OK: 8 queues" in line and "lag 92 messages" in line and "oldest 3.1 s (" in line
    where = line[line.index("oldest 3.1 s (") + len("oldest 3.1 s (") :]
    assert where.endswith("1/3)") and "…" in where  # shortened in the middle, queue kept
    assert where.startswith(LONG[:4])
    wide = health_line(statuses, T0, 200)
    assert wide == health_line(statuses, T0) and wide.endswith(f"({LONG}1/3)")


async def test_watch_redraws_in_place_every_interval() -> None:
    clock = VirtualClock(start_ms=T0)
    seen: list[int] = []

    def snapshot(now_ms: int) -> Snapshot:
        seen.append(now_ms)
        lag = 30 - 10 * len(seen)  # the sidecar catches up between refreshes
        return Snapshot([_q("Orders", 0, lag_messages=lag, lag_seconds=float(lag))])

    out = io.StringIO()
    task = asyncio.create_task(
        watch(snapshot, clock=clock, out=out, interval=2.0, in_place=True, frames=3)
    )
    await clock.advance(2.0)
    await clock.advance(2.0)
    assert await task == 3
    assert seen == [T0, T0 + 2000, T0 + 4000]
    frames = out.getvalue().split(CLEAR)
    assert frames[0] == "" and len(frames) == 4  # every frame starts by clearing the screen
    firsts = [f.splitlines()[0] for f in frames[1:]]
    assert firsts[0].startswith("2023-11-14T22:13:20Z OK: 1 queues (1 ACTIVE); lag 20 messages")
    assert firsts[1].startswith("2023-11-14T22:13:22Z OK: 1 queues (1 ACTIVE); lag 10 messages")
    assert firsts[2] == "2023-11-14T22:13:24Z OK: 1 queues (1 ACTIVE); lag 0 messages, 0 B"
    assert all(f.splitlines()[2].startswith("topic") for f in frames[1:])


async def test_watch_without_a_terminal_prints_frames_one_after_another() -> None:
    clock = VirtualClock(start_ms=T0)
    out = io.StringIO()
    task = asyncio.create_task(
        watch(lambda _now: Snapshot([_q("A", 0)]), clock=clock, out=out, interval=1.0,
              in_place=False, frames=2)
    )  # fmt: skip
    await clock.advance(1.0)
    await task
    text = out.getvalue()
    assert CLEAR not in text and text.count(" OK: 1 queues") == 2 and "\n\n2023" in text


@pytest.mark.slow
def test_status_starts_with_the_health_line(tmp_path: Path) -> None:
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=2, messages=200))
    flags = ["--store", str(tmp_path / "store"), "--cluster", "C", "--broker", "B",
             "--state-dir", str(tmp_path / "state")]  # fmt: skip

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tieredstore.cli", *args],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    assert cli("run", "--once", "--cold", str(tmp_path / "cold"), *flags).returncode == 0
    status = cli("status", *flags)
    assert status.returncode == 0, status.stderr
    first, blank, head, *rows = status.stdout.splitlines()
    assert " OK: 2 queues (2 ACTIVE); lag 0 messages, 0 B" in first and blank == ""
    assert head.startswith("topic") and len(rows) == 2
    bad = cli("status", "--watch", "--interval", "0", *flags)
    assert bad.returncode == 3 and "bad --interval" in bad.stderr
    both = cli("status", "--watch", "--json", *flags)
    assert both.returncode == 3 and "pick one" in both.stderr
