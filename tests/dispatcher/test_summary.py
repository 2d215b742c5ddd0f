"""The INFO summary line per interval (:mod:`tieredstore.cli.sidecar.summary`), on a virtual clock,
and a live sidecar that logs it (and each queue's start-up line once)."""

from __future__ import annotations

import asyncio
import logging
import re
import signal
from pathlib import Path

import pytest

from tests.support.sidecar.process import start, wait_for_log
from tieredstore.cli.sidecar.summary import Summary, log_summaries
from tieredstore.clock import VirtualClock
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.hot.synth import SynthSpec, synthesize

T0 = 1_700_000_000_000


def _work(metrics: Metrics, segments: int, *, errors: int = 0) -> None:
    for _ in range(segments):
        metrics.segments_tiered.labels("size").inc()
        metrics.messages_tiered.inc(512)
        metrics.bytes_tiered.inc(1 << 20)
    if errors:
        metrics.errors.labels("BackendUnavailableError").inc(errors)


def test_a_line_says_what_happened_since_the_last_one() -> None:
    metrics = Metrics()
    _work(metrics, 2)  # before the summary started: not counted
    summary = Summary(metrics, 0.0)
    assert summary.line(60.0) is None  # idle: quiet
    _work(metrics, 3, errors=1)
    metrics.lag_messages.labels("A", "0").set(700)
    metrics.lag_messages.labels("A", "1").set(112)
    metrics.lag_seconds.labels("A", "0").set(3.2)
    assert summary.line(120.0) == (
        "tiered 3 segments, 1,536 messages, 3.0 MiB in the last 1 m 00 s; 1 errors; "
        "lag 812 messages, oldest 3.2 s"
    )
    assert summary.line(180.0) is None
    metrics.errors.labels("ThrottledError").inc()
    assert summary.line(185.0) == (
        "tiered 0 segments, 0 messages, 0 B in the last 5.0 s; 1 errors; "
        "lag 812 messages, oldest 3.2 s"
    )


def test_batch_slices_are_said_apart_from_segments() -> None:
    metrics = Metrics()
    summary = Summary(metrics, 0.0)
    _work(metrics, 3)
    for _ in range(2):  # a slice is counted in segments_tiered too, and in slices_tiered
        metrics.segments_tiered.labels("age").inc()
        metrics.slices_tiered.inc()
        metrics.messages_tiered.inc(10)
    assert summary.line(60.0) == (
        "tiered 3 segments, 2 batch slices, 1,556 messages, 3.0 MiB in the last 1 m 00 s; "
        "0 errors; lag 0 messages, oldest 0 ms"
    )


async def test_one_line_per_interval_on_the_clock(caplog: pytest.LogCaptureFixture) -> None:
    clock, metrics = VirtualClock(start_ms=T0), Metrics()
    caplog.set_level(logging.INFO, logger="tieredstore.summary")
    task = asyncio.create_task(log_summaries(metrics, clock, 60.0))
    await clock.advance(0)
    _work(metrics, 1)
    await clock.advance(59.0)
    assert caplog.messages == []
    await clock.advance(1.0)
    assert [m.split(" in the")[0] for m in caplog.messages] == [
        "tiered 1 segment, 512 messages, 1.0 MiB"
    ]
    await clock.advance(60.0)  # nothing happened: no second line
    assert len(caplog.messages) == 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.mark.slow
def test_a_working_sidecar_logs_summaries_and_each_start_up_line_once(tmp_path: Path) -> None:
    synthesize(tmp_path / "store", SynthSpec(topics=2, queues=2, messages=4000))
    log = tmp_path / "run.log"
    proc = start(
        tmp_path / "store", tmp_path / "cold", tmp_path / "state", log=log,
        TIEREDSTORE_LOG_SUMMARY_INTERVAL="1s",
        TIEREDSTORE_TIERING_MAX_BYTES_PER_SECOND="256K",  # seconds of work, not a blink
    )  # fmt: skip
    try:
        wait_for_log(log, r"INFO +tieredstore\.summary: tiered [1-9][\d,]* segments", proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert re.search(r"in the last [\d.]+ s; 0 errors; lag [\d,]+ messages, oldest", text)
    for topic in ("SynthTopic0", "SynthTopic1"):
        for queue in (0, 1):
            assert text.count(f"queue {topic}/{queue} initialised at offset") == 1, text
