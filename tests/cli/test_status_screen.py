"""``status --watch`` on a real terminal (tmux), 160 queues, at 80×24 and 160×45: the
health line and the header stay on screen, no row wraps, worst queues come first.

``UPDATE_SCREENSHOTS=1`` also writes what the 160×45 screen shows into
``docs/screens/status-watch.txt`` (shown in docs/operations.md).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")

DOCS = Path(__file__).resolve().parents[2] / "docs" / "screens"


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """160 queues (one topic name too long for any screen), tiered, then 10 messages
    behind on most queues: the status flags. No sidecar runs any more, so status warns."""
    root = tmp_path_factory.mktemp("screen")
    store = root / "store"
    now = time.time_ns() // 1_000_000
    synthesize(store, SynthSpec(topics=40, queues=4, messages=3200, long_topic=True,
                                start_time=now - 3200))  # fmt: skip
    flags = ["--store", str(store), "--cluster", "C", "--broker", "B",
             "--state-dir", str(root / "state")]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "tieredstore.cli", "run", "--once", "--cold", str(root / "cold"),
         *flags], capture_output=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    SyntheticStore.open(store).append(1000, store_time=now)
    return flags


@contextlib.contextmanager
def tmux(width: int, height: int, command: list[str]) -> Iterator[str]:
    """A private tmux server running ``command`` in a ``width``×``height`` window."""
    socket = f"ts-{uuid.uuid4().hex[:8]}"
    # Not LINES or COLUMNS (pytest-xdist's workers set them to 24 and 80): the command
    # would take them for the terminal's size (shutil.get_terminal_size reads them first).
    env = {k: v for k, v in os.environ.items() if k not in ("LINES", "COLUMNS")}
    env["TERM"] = "xterm-256color"
    subprocess.run(
        ["tmux", "-L", socket, "-f", "/dev/null", "new-session", "-d", "-s", "w",
         "-x", str(width), "-y", str(height), " ".join(command)],
        check=True, env=env, timeout=30,
    )  # fmt: skip
    try:
        yield socket
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], check=False, timeout=30)


def capture(socket: str) -> list[str]:
    """The screen, with wrapped lines joined (``-J``): a wrapped row shows as too long."""
    text = subprocess.run(
        ["tmux", "-L", socket, "capture-pane", "-p", "-J", "-t", "w"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    return [line.rstrip() for line in text.rstrip("\n").split("\n")]


def screen_with(
    socket: str, pattern: str, whole: Callable[[list[str]], bool], timeout: float = 90
) -> list[str]:
    """Capture until a whole frame is on screen (or fail): ``pattern`` on its first line
    and ``whole(lines)`` true. A frame is written as one clear-screen plus text, but the
    terminal may show it half drawn: a capture between the two is not a frame."""
    deadline = time.monotonic() + timeout
    while True:
        lines = capture(socket)
        if len(lines) >= 3 and re.search(pattern, lines[0]) and whole(lines):
            return lines
        assert time.monotonic() < deadline, "\n".join(lines)
        subprocess.run(["tmux", "-L", socket, "wait-for", "-S", "never"], timeout=5)


@pytest.mark.slow
@pytest.mark.parametrize(("width", "height"), [(80, 24), (160, 45)])
def test_watch_keeps_health_and_header_on_screen_and_rows_unwrapped(
    sidecar: list[str], width: int, height: int
) -> None:
    cmd = [sys.executable, "-m", "tieredstore.cli", "status", "--watch", "--interval", "1s",
           *sidecar]  # fmt: skip
    with tmux(width, height, cmd) as socket:
        # Whole, and drawn for this window: the first frame may have been measured
        # before tmux gave the pane its size (the next one measures again).
        lines = screen_with(
            socket,
            r"WARNING: 160 queues",
            lambda s: len(s) == height and re.match(r"… \d+ more queues", s[-1]) is not None,
        )
    assert len(lines) <= height
    assert all(len(line) <= width for line in lines), max(lines, key=len)
    health, blank, header, *rows = lines
    # The date goes first on a narrow screen, never the verdict, lag or worst queue; the
    # writer's warning (no sidecar runs) comes after them.
    assert re.match(r"((\d{4}-\d\d-\d\dT)?\d\d:\d\d:\d\dZ )?WARNING: 160 queues", health)
    assert re.search(r"; lag \d+ messages, .*oldest .+ \(SynthTopic\w+/\d\)(?:; no s|$)", health)
    assert blank == ""
    assert header.startswith("topic") and " lag s" in header and " lag msgs" in header
    assert rows[-1].startswith("… ") and rows[-1].split()[2:4] == ["more", "queues"]
    shown = rows[:-1]
    assert len(shown) == height - 4
    hidden = int(rows[-1].split()[1])
    assert len(shown) + hidden == 160
    end = header.index(" lag s") + len(" lag s")  # right-aligned under its title
    lags = [float(r[end - 7 : end]) for r in shown]
    assert lags == sorted(lags, reverse=True)  # the oldest lag first
    if width == 160 and os.environ.get("UPDATE_SCREENSHOTS"):
        DOCS.mkdir(parents=True, exist_ok=True)
        (DOCS / "status-watch.txt").write_text("\n".join(lines) + "\n")


def test_watch_filters_by_topic_and_long_names_are_shortened_in_the_middle(
    sidecar: list[str],
) -> None:
    cmd = [sys.executable, "-m", "tieredstore.cli", "status", "--watch", "--topic",
           "'SynthTopicLong*'", *sidecar]  # fmt: skip
    with tmux(80, 24, cmd) as socket:
        lines = screen_with(socket, r"WARNING: 160 queues", lambda s: len(s) == 3 + 4)
    rows = lines[3:]
    assert len(rows) == 4 and all(r.startswith("SynthTopicLo") for r in rows)
    assert all(re.fullmatch(r"SynthTopicLo\w*…x+", r.split()[0]) for r in rows)


#: Two topics that differ only in their last character, too long for any screen.
TWIN = "OrdersFromTheEuropeanWebShopCheckoutServiceForTheNightlyBatchReconciliation"


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Topics ``TWIN0`` and ``TWIN1`` (2 queues each), tiered, then 100 messages behind
    (and no sidecar running: WARNING)."""
    root = tmp_path_factory.mktemp("twins")
    store = root / "store"
    now = time.time_ns() // 1_000_000
    synthesize(store, SynthSpec(topics=2, queues=2, messages=400, topic_prefix=TWIN,
                                start_time=now - 400))  # fmt: skip
    flags = ["--store", str(store), "--cluster", "C", "--broker", "B",
             "--state-dir", str(root / "state")]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "tieredstore.cli", "run", "--once", "--cold", str(root / "cold"),
         *flags], capture_output=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    SyntheticStore.open(store).append(100, store_time=now)
    return flags


@pytest.mark.slow
@pytest.mark.parametrize(("width", "height"), [(80, 24), (100, 30)])
def test_watch_never_cuts_the_verdict_lag_oldest_age_or_worst_queue(
    twins: list[str], width: int, height: int
) -> None:
    cmd = [sys.executable, "-m", "tieredstore.cli", "status", "--watch", "--interval", "1s",
           *twins]  # fmt: skip
    with tmux(width, height, cmd) as socket:
        lines = screen_with(socket, r"WARNING: 4 queues", lambda s: len(s) == 3 + 4)
    health, _, header, *rows = lines
    assert all(len(line) <= width for line in lines), max(lines, key=len)
    found = re.search(
        r"WARNING: 4 queues.*; lag 100 messages, .*oldest [\d.]+ \w+ \((.+)/(\d)\)(?:; no s.*|$)",
        health,
    )
    assert found is not None, health
    worst, _ = found.groups()
    assert "…" in worst and worst.startswith(TWIN[:6]) and worst[-1] in "01"
    names = {r.split()[0] for r in rows}  # both topics, told apart by their ends
    assert len(names) == 2 and all("…" in n for n in names)
    assert {n[-1] for n in names} == {"0", "1"}
    assert header.startswith("topic")


@pytest.mark.slow
def test_status_json_has_the_overall_health_and_honours_the_filters(sidecar: list[str]) -> None:
    import json

    def status(*extra: str) -> dict[str, object]:
        done = subprocess.run(
            [sys.executable, "-m", "tieredstore.cli", "status", "--json", *extra, *sidecar],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        doc: dict[str, object] = json.loads(done.stdout)
        return doc

    everything = status()
    assert everything["health"] == "WARNING"  # messages wait and no sidecar runs
    assert str(everything["summary"]).split(" ", 1)[1].startswith("WARNING: 160 queues")
    assert isinstance(everything["writer"], dict) and everything["writer"]["state"] == "not_held"
    assert isinstance(everything["queues"], list) and len(everything["queues"]) == 160
    assert status("--problems")["queues"] == []
    assert len(status("--topic", "SynthTopic1")["queues"]) == 4  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize(("width", "height"), [(80, 24), (100, 30)])
def test_watch_warns_when_no_sidecar_holds_the_lease(
    sidecar: list[str], width: int, height: int
) -> None:
    """Messages arrived after the only sidecar stopped: WARNING, not OK, and (where the
    screen has room) who held the lease last and since when nobody does. ``--problems``
    with no queue to show says so instead of drawing a bare header."""
    cmd = [sys.executable, "-m", "tieredstore.cli", "status", "--watch", "--interval", "1s",
           "--problems", *sidecar]  # fmt: skip
    with tmux(width, height, cmd) as socket:
        lines = screen_with(socket, r"(OK|WARNING): 160 queues", lambda s: len(s) == 3)
    assert re.search(r"WARNING: 160 queues.*; lag \d+ messages, ", lines[0]), lines[0]
    if width >= 100:  # 80 has room for the verdict and the lag, maybe no more
        assert "; no sidecar holds the" in lines[0]
    assert all(len(line) <= width for line in lines)
    assert lines[2].startswith("no problems: none of the 160 queues is DIVERGED, PAUSED")
