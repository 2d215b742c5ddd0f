"""The fault-injecting backend wrapper: every fault kind behaves as documented."""

from __future__ import annotations

import pytest

from tieredstore.backends.faults import Fault, FaultyBackend
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.errors import BackendTimeoutError, BackendUnavailableError, ThrottledError


@pytest.fixture
def inner() -> MemoryBackend:
    reset_memory_stores()
    return MemoryBackend("faults")


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (Fault.ERROR, BackendUnavailableError),
        (Fault.TIMEOUT, BackendTimeoutError),
        (Fault.THROTTLE, ThrottledError),
    ],
)
async def test_plain_faults_raise_retryable_errors(
    inner: MemoryBackend, fault: Fault, error: type[Exception]
) -> None:
    faulty = FaultyBackend(inner, rate=1.0, faults=[fault])
    with pytest.raises(error, match="injected"):
        await faulty.write("k", b"v")
    assert not await inner.exists("k")
    await inner.write("k", b"v")
    with pytest.raises(error):
        await faulty.read("k")
    assert faulty.stats[f"faults.{fault.value}"] == 2


async def test_lost_ack_writes_but_reports_failure(inner: MemoryBackend) -> None:
    faulty = FaultyBackend(inner, rate=1.0, faults=[Fault.LOST_ACK])
    with pytest.raises(BackendUnavailableError, match="lost_ack"):
        await faulty.write("k", b"value")
    assert await inner.read("k") == b"value"


async def test_short_read_returns_a_prefix(inner: MemoryBackend) -> None:
    await inner.write("k", b"0123456789")
    faulty = FaultyBackend(inner, rate=1.0, faults=[Fault.SHORT_READ])
    assert await faulty.read("k") == b"01234"


async def test_rate_is_respected_and_seeded(inner: MemoryBackend) -> None:
    await inner.write("k", b"v")

    async def failures(seed: int) -> list[bool]:
        faulty = FaultyBackend(inner, rate=0.1, seed=seed, faults=[Fault.ERROR])
        out = []
        for _ in range(2000):
            try:
                await faulty.read("k")
                out.append(False)
            except BackendUnavailableError:
                out.append(True)
        return out

    a, b = await failures(7), await failures(7)
    assert a == b
    assert 120 < sum(a) < 280
    with pytest.raises(ValueError, match="not in"):
        FaultyBackend(inner, rate=1.5)
