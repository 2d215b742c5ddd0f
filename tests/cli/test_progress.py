"""The ``run --once`` progress line: a total and an ETA as ``restore`` has, binary units."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tieredstore.cli.sidecar.progress import ProgressLine
from tieredstore.hot.synth import SynthSpec, synthesize


class _Seconds:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_line_has_the_total_the_share_done_and_an_eta_in_mib() -> None:
    clock, out = _Seconds(), io.StringIO()
    total = [1000]  # what the pass has to tier, as the catalogue and hot store say
    bar = ProgressLine(enabled=True, stream=out, clock=clock)
    bar.measure(lambda: total[0])
    clock.now += 2.0
    bar.add(250, 3 << 20)  # 250 of 1000 messages in 2 s: 750 left at 125/s, 6 s
    assert out.getvalue() == (
        "\rtiered 1 segment, 250/1,000 messages (25 %), 3.0 MiB (1.5 MiB/s), ETA 6.0 s"
    )
    clock.now += 0.1  # redraws are throttled
    bar.add(250, 3 << 20)
    assert out.getvalue().count("\r") == 1
    clock.now += 1.0  # the total is measured again: new messages raise it
    total[0] = 1300
    bar.add(100, 1 << 20)
    last = out.getvalue().split("\r")[-1]
    assert last.startswith("tiered 3 segments, 600/1,300 messages (46 %), 7.0 MiB (")
    assert last.endswith(", ETA 3.6 s")
    bar.close()
    assert out.getvalue().endswith("\n")


def test_without_a_backlog_or_disabled() -> None:
    clock, out = _Seconds(), io.StringIO()
    bar = ProgressLine(enabled=True, stream=out, clock=clock)
    clock.now += 1.0
    bar.add(10, 2048)
    assert out.getvalue() == "\rtiered 1 segment, 10 messages, 2.0 KiB (2.0 KiB/s)"
    quiet, measured = io.StringIO(), []

    def total() -> int:
        measured.append(1)
        return 0

    off = ProgressLine(enabled=False, stream=quiet, clock=clock)
    off.measure(total)
    off.add(10, 2048)
    assert quiet.getvalue() == "" and measured == [] and off.counts.messages == 10


def test_batch_slices_are_said_apart_from_segments() -> None:
    clock, out = _Seconds(), io.StringIO()
    bar = ProgressLine(enabled=True, stream=out, clock=clock)
    clock.now += 1.0
    bar.add(10, 2048, sliced=True)
    assert out.getvalue() == "\rtiered 0 segments, 1 batch slice, 10 messages, 2.0 KiB (2.0 KiB/s)"
    clock.now += 1.0
    bar.add(30, 2048)
    assert out.getvalue().split("\r")[-1].startswith("tiered 1 segment, 1 batch slice, 40 ")
    assert (bar.counts.segments, bar.counts.slices, bar.counts.messages) == (1, 1, 40)


@pytest.mark.slow
def test_run_once_shows_the_total_and_an_eta(tmp_path: Path) -> None:
    store = tmp_path / "store"
    synthesize(store, SynthSpec(topics=2, queues=2, messages=4000))
    done = subprocess.run(
        [sys.executable, "-m", "tieredstore.cli", "run", "--once", "--progress", "on",
         "--store", str(store), "--cold", str(tmp_path / "cold"), "--cluster", "C",
         "--broker", "B", "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = re.findall(r"tiered \d+ segments?, [^\r\n]*", done.stderr)
    assert lines, done.stderr
    assert re.fullmatch(
        r"tiered \d+ segments?, (\d+ batch slices?, )?[\d,]+/4,000 messages \(\d+ %\), "
        r"[\d.]+ [KM]iB \([\d.]+ [KM]iB/s\), ETA .+",
        lines[0].rstrip(),
    ), lines
    assert " MB" not in done.stderr
    assert re.search(
        r"catch-up done: \d+ segments?(, \d+ batch slices? in \d+ batch objects?)?, 4000 messages, "
        r"[\d.]+ [KM]iB \(\d+ bytes\)",
        done.stderr,
    )
