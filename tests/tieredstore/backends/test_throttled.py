"""ThrottledBackend: writes paced by a token bucket on a VirtualClock (no real sleeps);
reads passed through, range reads checked beneath the retries."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tieredstore.backends.counting import CountingBackend
from tieredstore.backends.forwarding import ForwardingBackend
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.backends.retry import RetryingBackend, RetryPolicy
from tieredstore.backends.throttled import ThrottledBackend
from tieredstore.clock import VirtualClock
from tieredstore.errors import BackendUnavailableError
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


class _ShortOnce(MemoryBackend):
    """A real memory backend whose first range read answers half the bytes."""

    shorted = False

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        data = await super().read(key, start, end)
        if not self.shorted and end is not None:
            self.shorted = True
            return data[: len(data) // 2]
        return data


async def test_a_short_range_read_is_retried_beneath_the_pacing_and_the_counting() -> None:
    """As the sidecar stacks them (pacing over retries over counting), a truncated answer
    to ``read_exact`` is retried, not raised (old code checked the length above the
    retries, in the inherited ``read_exact``)."""
    reset_memory_stores()
    inner = _ShortOnce("short-once")
    await inner.write("k", bytes(range(200)))
    counted: list[str] = []
    stack = ThrottledBackend(
        RetryingBackend(
            CountingBackend(inner, on_request=counted.append, on_bytes=lambda _op, _n: None),
            RetryPolicy(max_attempts=3, base_delay=0.0, max_delay=0.0),
            sleep=VirtualClock().sleep,
        ),
        TokenBucket(VirtualClock(start_ms=0), 100 * KiB),
    )
    assert await stack.read_exact("k", 10, 60) == bytes(range(10, 60))
    assert inner.shorted and counted == ["read", "read"]  # the short answer, then the retry


class _HalfReads(ForwardingBackend):
    """A wrapper that changes ``read`` (every answer cut in half)."""

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        data = await super().read(key, start, end)
        return data[: len(data) // 2]


async def test_a_wrapper_that_changes_read_checks_read_exact_over_its_own_read() -> None:
    """``read_exact`` follows ``read``: passed down by a wrapper that leaves reads alone
    (above), checked over the wrapper's own ``read`` when it changes them."""
    reset_memory_stores()
    inner = MemoryBackend("half-reads")
    await inner.write("k", bytes(range(200)))
    with pytest.raises(BackendUnavailableError, match="short read: 25 of 50 bytes"):
        await _HalfReads(inner).read_exact("k", 10, 60)
