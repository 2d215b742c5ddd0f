"""The upload token bucket, driven by a VirtualClock: no real sleep anywhere."""

from __future__ import annotations

import asyncio

import pytest

from tieredstore.clock import VirtualClock
from tieredstore.ratelimit import TokenBucket


def test_a_full_bucket_lets_one_second_through_then_charges_time() -> None:
    clock = VirtualClock()
    bucket = TokenBucket(clock, 1000)
    assert bucket.reserve(600) == 0.0
    assert bucket.reserve(400) == 0.0
    assert bucket.reserve(500) == pytest.approx(0.5)  # 500 bytes of debt at 1000 B/s
    assert bucket.reserve(1000) == pytest.approx(1.5)  # queued behind the first debt
    clock.set_ms(clock.now_ms() + 1500)
    assert bucket.tokens == pytest.approx(0.0)


def test_refill_is_capped_at_the_burst() -> None:
    clock = VirtualClock()
    bucket = TokenBucket(clock, 1000, burst=2000)
    assert bucket.reserve(2000) == 0.0
    clock.set_ms(clock.now_ms() + 60_000)  # a long quiet minute refills 2000, not 60000
    assert bucket.tokens == pytest.approx(2000)
    assert bucket.reserve(3000) == pytest.approx(1.0)


def test_a_chunk_larger_than_the_burst_goes_but_the_next_waits() -> None:
    clock = VirtualClock()
    bucket = TokenBucket(clock, 100)
    assert bucket.reserve(1000) == pytest.approx(9.0)
    assert bucket.reserve(1) == pytest.approx(9.01)


def test_zero_rate_is_unlimited_and_set_rate_applies_live() -> None:
    clock = VirtualClock()
    bucket = TokenBucket(clock, 0)
    assert all(bucket.reserve(1 << 30) == 0.0 for _ in range(3))
    bucket.set_rate(1000)  # from unlimited: starts full
    assert bucket.reserve(1000) == 0.0
    assert bucket.reserve(1000) == pytest.approx(1.0)
    bucket.set_rate(4000)  # the debt stays, paid back at the new rate
    assert bucket.reserve(0) == pytest.approx(0.25)
    bucket.set_rate(0)
    assert bucket.reserve(1 << 30) == 0.0


def test_bad_values_are_refused() -> None:
    clock = VirtualClock()
    with pytest.raises(ValueError, match="rate must be >= 0"):
        TokenBucket(clock, -1)
    with pytest.raises(ValueError, match="burst must be > 0"):
        TokenBucket(clock, 10, burst=0)
    with pytest.raises(ValueError, match="cannot reserve"):
        TokenBucket(clock, 10).reserve(-5)


async def test_acquire_sleeps_on_the_clock_until_the_tokens_are_there() -> None:
    clock = VirtualClock()
    bucket = TokenBucket(clock, 1000)
    assert await bucket.acquire(1000) == 0.0
    waiter = asyncio.create_task(bucket.acquire(2000))
    await clock.advance(1.999)
    assert not waiter.done()
    await clock.advance(0.001)
    assert await waiter == pytest.approx(2.0)
    assert clock.now_ms() - 1_700_000_000_000 == 2000


def test_a_rate_function_is_read_at_each_reservation() -> None:
    clock = VirtualClock()
    rate = [0]
    bucket = TokenBucket(clock, lambda: rate[0])
    assert bucket.reserve(1 << 30) == 0.0  # unlimited
    rate[0] = 1000  # from unlimited: starts full
    assert bucket.rate == 1000
    assert bucket.reserve(1000) == 0.0
    assert bucket.reserve(1000) == pytest.approx(1.0)
    rate[0] = 4000  # the debt stays, paid back at the new rate
    assert bucket.reserve(0) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="reads its rate from a function"):
        bucket.set_rate(10)
    rate[0] = -1
    with pytest.raises(ValueError, match="rate must be >= 0"):
        bucket.reserve(1)
