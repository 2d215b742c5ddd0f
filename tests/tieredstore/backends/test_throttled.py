"""ThrottledBackend: writes paced by a token bucket on a VirtualClock (no real sleeps)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.backends.throttled import ThrottledBackend
from tieredstore.clock import VirtualClock
from tieredstore.ratelimit import TokenBucket

KiB = 1 << 10


async def _chunks(n: int, size: int, sent: list[int], clock: VirtualClock) -> AsyncIterator[bytes]:
    for _ in range(n):
        yield b"x" * size
        sent.append(clock.now_ms())


async def test_a_streamed_upload_is_paced_chunk_by_chunk() -> None:
    reset_memory_stores()
    clock = VirtualClock(start_ms=0)
    waits: list[float] = []
    backend = ThrottledBackend(
        MemoryBackend.from_url("memory://throttled"),
        TokenBucket(clock, 100 * KiB),
        on_wait=waits.append,
    )
    sent: list[int] = []
    upload = asyncio.create_task(backend.write_chunks("seg", _chunks(5, 100 * KiB, sent, clock)))
    for _ in range(4):
        await clock.advance(1.0)
    assert await upload == 500 * KiB
    # The first chunk uses the full bucket; each further one waits one second for its own.
    assert [s // 1000 for s in sent] == [0, 1, 2, 3, 4]
    assert waits == pytest.approx([1.0, 1.0, 1.0, 1.0])
    assert len(await backend.read("seg")) == 500 * KiB


async def test_writes_wait_reads_do_not_and_unlimited_never_waits() -> None:
    reset_memory_stores()
    clock = VirtualClock(start_ms=0)
    bucket = TokenBucket(clock, 10 * KiB)
    backend = ThrottledBackend(MemoryBackend.from_url("memory://throttled2"), bucket)
    await backend.write("a", b"y" * (10 * KiB))  # the full bucket: no wait
    second = asyncio.create_task(backend.write("b", b"z" * (5 * KiB)))
    await clock.settle()
    assert not second.done() and not await backend.exists("b")
    assert await backend.read("a") == b"y" * (10 * KiB)  # reads pass while a write waits
    await clock.advance(0.5)
    await second
    assert await backend.size("b") == 5 * KiB
    bucket.set_rate(0)
    await backend.write("c", b"w" * (1 << 20))
    assert clock.now_ms() == 500
