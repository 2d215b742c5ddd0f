"""Time, injected: every component that waits or reads the time takes a :class:`Clock`.

Tests use :class:`VirtualClock`, which never sleeps for real: ``sleep`` parks the caller
until a test calls :meth:`VirtualClock.advance`, so timelines (dispatch every 20 s,
retention every 60 s, ...) replay exactly and instantly.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Any, Protocol

__all__ = ["Clock", "SystemClock", "VirtualClock", "sleep_until", "wait_at_most"]


class Clock(Protocol):
    """Wall time in epoch milliseconds, a monotonic time, and an async sleep.

    ``monotonic_ms`` never goes backwards and ignores wall-clock steps (NTP, an operator
    setting the date): deadlines a process keeps for itself (its lease) use it.
    """

    def now_ms(self) -> int: ...

    def monotonic_ms(self) -> int: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(seconds, 0.0))


class VirtualClock:
    """A clock that moves only when told to.

    ``sleep(s)`` returns once :meth:`advance` has moved time to at least its deadline.
    ``advance`` wakes sleepers in deadline order and lets each run before moving on, so
    what happens at t=20 s happens before what happens at t=40 s.

    ``advance`` cannot wait for work a task does outside the event loop (a file read in
    a worker thread): a task still in such a call when time moves parks afterwards, with
    a deadline counted from the new time. A test that needs a task parked first awaits
    :meth:`parked`.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._seq = itertools.count()
        # (deadline, sequence, wake-up future, the task that sleeps)
        self._sleepers: list[tuple[int, int, asyncio.Future[None], asyncio.Task[Any] | None]] = []
        self._new_sleeper = asyncio.Event()

    def now_ms(self) -> int:
        return self._now

    def monotonic_ms(self) -> int:
        """Virtual time is both clocks (``set_ms`` moves both)."""
        return self._now

    async def sleep(self, seconds: float) -> None:
        deadline = self._now + max(int(seconds * 1000), 0)
        if deadline <= self._now:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        sleeper = (deadline, next(self._seq), fut, asyncio.current_task())
        heapq.heappush(self._sleepers, sleeper)
        self._new_sleeper.set()
        await fut

    @property
    def sleepers(self) -> int:
        """How many tasks are parked in :meth:`sleep`."""
        return sum(1 for _, _, f, _ in self._sleepers if not f.done())

    async def parked(self, count: int = 1) -> None:
        """Return once at least ``count`` tasks are parked in :meth:`sleep` (waits as long
        as it takes: bound it with ``asyncio.wait_for``)."""
        while self.sleepers < count:
            self._new_sleeper.clear()
            await self._new_sleeper.wait()

    async def parked_or_done(self, task: asyncio.Task[Any]) -> None:
        """Return once ``task`` itself is parked in :meth:`sleep`, or is done (waits as
        long as it takes: bound it with ``asyncio.wait_for``). Unlike :meth:`parked`, other
        tasks' sleeps do not count: a test advancing time for one task waits for it."""
        while not task.done() and not any(
            t is task and not f.done() for _, _, f, t in self._sleepers
        ):
            self._new_sleeper.clear()
            woken = asyncio.ensure_future(self._new_sleeper.wait())
            try:
                await asyncio.wait({woken, task}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                woken.cancel()

    async def settle(self) -> None:
        """Let every runnable task run until all are parked (or done)."""
        for _ in range(50):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, waking sleepers in order."""
        target = self._now + int(seconds * 1000)
        await self.settle()
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, fut, _ = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            if not fut.done():
                fut.set_result(None)
            await self.settle()
        self._now = target
        await self.settle()

    def set_ms(self, now_ms: int) -> None:
        """Jump to an absolute time without waking anyone (for synchronous tests)."""
        self._now = now_ms


async def sleep_until(clock: Clock, event: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` on ``clock``, or less if ``event`` is set meanwhile."""
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    stopper = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (sleeper, stopper):
            t.cancel()


async def wait_at_most(
    clock: Clock, task: asyncio.Future[Any], seconds: float, *, cut: asyncio.Event | None = None
) -> None:
    """Wait up to ``seconds`` (on ``clock``) for ``task`` to end, or until ``cut`` is set
    (a second Ctrl-C: stop waiting now); ``task`` is not cancelled."""
    timer = asyncio.ensure_future(clock.sleep(seconds))
    cutter = asyncio.ensure_future(cut.wait()) if cut is not None else None
    try:
        waits = {task, timer} if cutter is None else {task, timer, cutter}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
        if cutter is not None:
            cutter.cancel()
