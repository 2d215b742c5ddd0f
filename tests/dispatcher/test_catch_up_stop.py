"""A stop during ``run --once``: what the pass reports is what happened.

The cold store is the in-memory backend behind a wrapper that asks the dispatcher to
stop (or to stop and abandon) while it uploads a chosen COMMIT_LOG object, so the stop
lands exactly there, on a virtual clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Callable
from pathlib import Path

import pytest

from tests.support.sidecar.settings import settings_for
from tieredstore.backends.base import Backend
from tieredstore.backends.forwarding import ForwardingBackend
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.cli.commands.run import closing_line
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.hot.synth import SynthSpec, synthesize


class StopDuring(ForwardingBackend):
    """``inner``; during the ``nth`` COMMIT_LOG upload, calls ``action`` and then (when
    ``hang``) waits until cancelled, as a slow upload would."""

    def __init__(self, inner: Backend, nth: int, *, hang: bool = False) -> None:
        super().__init__(inner)
        self.nth, self.hang, self.uploads = nth, hang, 0
        self.action: Callable[[], None] = lambda: None

    async def _upload(self, key: str) -> None:
        if "/COMMIT_LOG/" not in key:
            return
        self.uploads += 1
        if self.uploads == self.nth:
            self.action()
            if self.hang:
                await asyncio.Event().wait()  # until abandoned

    async def write(self, key: str, data: bytes) -> None:
        await self._upload(key)
        await self.inner.write(key, data)

    async def write_chunks(self, key: str, chunks: AsyncIterable[bytes]) -> int:
        await self._upload(key)
        return await self.inner.write_chunks(key, chunks)


async def _pass(tmp_path: Path, cold: StopDuring, *, abandon: bool = False) -> tuple[int, ...]:
    """Three segments of one queue; returns (segments, abandoned, left messages, queues)."""
    reset_memory_stores()
    store = synthesize(tmp_path / "store", SynthSpec(topics=1, queues=1, messages=300))
    settings = settings_for(store.root, "memory://stop", tmp_path / "state",
                            tiering__concurrency=1, tiering__guard="none",
                            tiering__segment_max_messages=100,
                            tiering__segment_max_bytes="16M")  # fmt: skip
    clock = VirtualClock()
    async with open_runtime(settings, clock=clock, backend=cold) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        cold.action = rt.dispatcher.abandon if abandon else rt.dispatcher.stop
        report = await rt.dispatcher.catch_up(shutdown_deadline=3600)
    assert report.interrupted
    return report.segments, report.abandoned, report.left_messages, report.left_queues


async def test_a_stop_during_the_last_upload_says_the_pass_had_finished(tmp_path: Path) -> None:
    cold = StopDuring(MemoryBackend("stop"), nth=3)
    assert await _pass(tmp_path, cold) == (3, 0, 0, 0)


async def test_a_stop_during_the_first_upload_leaves_the_rest(tmp_path: Path) -> None:
    cold = StopDuring(MemoryBackend("stop"), nth=1)
    assert await _pass(tmp_path, cold) == (1, 0, 200, 1)


async def test_a_second_stop_abandons_the_upload_in_flight_at_once(tmp_path: Path) -> None:
    # The upload never ends by itself and the deadline is an hour: only abandon ends it.
    cold = StopDuring(MemoryBackend("stop"), nth=2, hang=True)
    assert await _pass(tmp_path, cold, abandon=True) == (1, 1, 200, 1)


@pytest.mark.parametrize(
    ("counts", "line"),
    [
        ((3, 0, 0, 0), "stopped by SIGINT: 3 segments committed; nothing is left to tier, "
                       "the catch-up had finished"),
        ((1, 0, 200, 1), "stopped by SIGINT: 1 segment committed; 200 messages in 1 queue "
                         "left: run again to tier them"),
        ((1, 2, 900, 3), "stopped by SIGINT: 2 uploads in flight abandoned uncommitted (never "
                         "read; `tieredstore gc` removes them), 1 segment committed; 900 "
                         "messages in 3 queues left: run again to tier them"),
    ],
)  # fmt: skip
def test_the_closing_line_says_what_happened(counts: tuple[int, ...], line: str) -> None:
    from tieredstore.dispatcher.tiering.tick_report import TickReport

    segments, abandoned, left, queues = counts
    report = TickReport(segments=segments, interrupted=True, abandoned=abandoned,
                        left_messages=left, left_queues=queues)  # fmt: skip
    assert closing_line(report, "SIGINT") == line
