"""VirtualClock: deadline order, and ``parked`` for a task whose work runs in a thread."""

from __future__ import annotations

import asyncio
import threading

from tieredstore.clock import VirtualClock


async def test_advance_wakes_sleepers_in_deadline_order() -> None:
    clock = VirtualClock(start_ms=0)
    woke: list[tuple[str, int]] = []

    async def nap(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.now_ms()))

    tasks = [asyncio.create_task(nap("late", 40)), asyncio.create_task(nap("early", 20))]
    await clock.advance(60)
    await asyncio.gather(*tasks)
    assert woke == [("early", 20_000), ("late", 40_000)]
    assert clock.now_ms() == 60_000


async def test_parked_waits_for_a_task_busy_in_a_thread() -> None:
    # A task in a worker thread when time moves parks later, with a later deadline:
    # advancing first would leave it asleep. parked() waits until it sleeps.
    clock = VirtualClock(start_ms=0)
    gate = threading.Event()

    async def poll() -> int:
        await asyncio.to_thread(gate.wait)  # a lease read, a file stat...
        await clock.sleep(10)
        return clock.now_ms()

    task = asyncio.create_task(poll())
    await clock.settle()
    assert clock.sleepers == 0
    waiting = asyncio.create_task(clock.parked())
    await clock.settle()
    assert not waiting.done()
    gate.set()
    await asyncio.wait_for(waiting, 10)
    assert clock.sleepers == 1
    await clock.advance(10)
    assert await asyncio.wait_for(task, 10) == 10_000


async def test_parked_or_done_waits_for_that_task_not_for_others() -> None:
    # A test moving time for one task must not move it while that task is in a thread
    # (a lease swap): its deadline would count from a time already gone.
    clock = VirtualClock(start_ms=0)
    gate = threading.Event()

    async def other() -> None:
        await clock.sleep(100)

    async def poll() -> None:
        await asyncio.to_thread(gate.wait)
        await clock.sleep(10)

    sleeping = asyncio.create_task(other())
    task = asyncio.create_task(poll())
    await clock.settle()
    assert clock.sleepers == 1  # the other task, not ours
    waiting = asyncio.create_task(clock.parked_or_done(task))
    await clock.settle()
    assert not waiting.done()
    gate.set()
    await asyncio.wait_for(waiting, 10)
    await clock.advance(10)
    await asyncio.wait_for(task, 10)
    await asyncio.wait_for(clock.parked_or_done(task), 10)  # done counts too
    sleeping.cancel()
