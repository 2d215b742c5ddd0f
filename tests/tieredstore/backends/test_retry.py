"""RetryPolicy and RetryingBackend, with a recording fake sleep (nothing really sleeps).

Failures come from :class:`FaultyBackend`, a fault-injecting wrapper around the real
in-memory backend: it stands in for an external store that fails, nothing of ours is
mocked.
"""

from __future__ import annotations

import builtins
from collections import Counter
from collections.abc import AsyncIterable, AsyncIterator, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tieredstore.backends import (
    Backend,
    MemoryBackend,
    ObjectInfo,
    RetryingBackend,
    RetryPolicy,
    open_backend,
    reset_memory_stores,
)
from tieredstore.backends.forwarding import ForwardingBackend
from tieredstore.errors import (
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    ConfigError,
    ObjectNotFoundError,
    RetryableError,
    ThrottledError,
    TieredStoreError,
)


class FaultyBackend(ForwardingBackend):
    """``inner`` whose next calls of an operation raise the queued errors first."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.faults: dict[str, builtins.list[Exception]] = {}
        self.calls: Counter[str] = Counter()

    def fail(self, op: str, *errors: Exception) -> None:
        self.faults.setdefault(op, []).extend(errors)

    def _maybe_fail(self, op: str) -> None:
        self.calls[op] += 1
        queued = self.faults.get(op)
        if queued:
            raise queued.pop(0)

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        self._maybe_fail("read")
        return await self.inner.read(key, start, end)

    async def write(self, key: str, data: bytes) -> None:
        self._maybe_fail("write")
        await self.inner.write(key, data)

    async def write_chunks(self, key: str, chunks: AsyncIterable[bytes]) -> int:
        return await Backend.write_chunks(self, key, chunks)  # joins, then self.write()

    async def size(self, key: str) -> int:
        self._maybe_fail("size")
        return await self.inner.size(key)

    async def exists(self, key: str) -> bool:
        self._maybe_fail("exists")
        return await self.inner.exists(key)

    async def delete(self, key: str) -> None:
        self._maybe_fail("delete")
        await self.inner.delete(key)

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        self._maybe_fail("list")
        return await self.inner.list(prefix)


class RecordingSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture(autouse=True)
def fresh_stores() -> Iterator[None]:
    yield
    reset_memory_stores()


@pytest.fixture
def faulty() -> FaultyBackend:
    return FaultyBackend(MemoryBackend("retry"))


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


def unavailable() -> BackendUnavailableError:
    return BackendUnavailableError("connection refused", where="s3://b/k")


# --- the policy ------------------------------------------------------------------------


def test_delays_grow_and_are_capped() -> None:
    policy = RetryPolicy(max_attempts=10, base_delay=1.0, max_delay=5.0, multiplier=2.0, jitter=0)
    assert [policy.delay(n, 0.5) for n in range(1, 8)] == [1, 2, 4, 5, 5, 5, 5]


def test_jitter_only_shortens() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=8.0, multiplier=2.0, jitter=0.25)
    assert policy.delay(3, 0.0) == 4.0
    assert policy.delay(3, 0.5) == 3.5
    assert policy.delay(3, 0.999) == pytest.approx(3.001)


def test_huge_retry_numbers_stay_at_the_cap() -> None:
    assert RetryPolicy(max_delay=30.0, jitter=0).delay(100_000, 0.0) == 30.0


@given(
    retry=st.integers(1, 2000),
    rand=st.floats(0, 1, exclude_max=True),
    base=st.floats(0, 10),
    extra=st.floats(0, 100),
    multiplier=st.floats(1, 10),
    jitter=st.floats(0, 1),
)
def test_delay_is_within_its_jitter_band(
    retry: int, rand: float, base: float, extra: float, multiplier: float, jitter: float
) -> None:
    policy = RetryPolicy(
        max_attempts=3,
        base_delay=base,
        max_delay=base + extra,
        multiplier=multiplier,
        jitter=jitter,
    )
    capped = base
    for _ in range(retry - 1):
        capped = min(capped * multiplier, base + extra)
    delay = policy.delay(retry, rand)
    assert capped * (1 - jitter) - 1e-9 <= delay <= capped + 1e-9
    assert delay <= policy.max_delay
    assert policy.delay(retry + 1, rand) >= delay


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"base_delay": -1.0},
        {"base_delay": 5.0, "max_delay": 1.0},
        {"multiplier": 0.5},
        {"jitter": 1.5},
        {"jitter": -0.1},
    ],
)
def test_bad_policies_are_config_errors(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


# --- the wrapper -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        unavailable(),
        BackendTimeoutError("read timed out", where="s3://b/k"),
        ThrottledError("SlowDown", where="s3://b/k"),
    ],
)
async def test_retryable_errors_are_retried_until_success(
    faulty: FaultyBackend, sleep: RecordingSleep, error: RetryableError
) -> None:
    await faulty.inner.write("k", b"v")
    faulty.fail("read", error, error, error)
    policy = RetryPolicy(max_attempts=5, base_delay=0.1, max_delay=10, multiplier=2, jitter=0.2)
    backend = RetryingBackend(faulty, policy, sleep=sleep, random_source=lambda: 0.5)

    assert await backend.read("k") == b"v"

    assert faulty.calls["read"] == 4
    assert sleep.delays == pytest.approx([0.09, 0.18, 0.36])


async def test_exhausted_attempts_reraise_the_last_error(
    faulty: FaultyBackend, sleep: RecordingSleep
) -> None:
    errors = [unavailable() for _ in range(4)]
    faulty.fail("write", *errors)
    retries: list[tuple[str, int, RetryableError]] = []
    backend = RetryingBackend(
        faulty,
        RetryPolicy(max_attempts=3, base_delay=1, max_delay=1.5, jitter=0),
        on_retry=lambda op, attempt, exc: retries.append((op, attempt, exc)),
        sleep=sleep,
    )

    with pytest.raises(BackendUnavailableError) as raised:
        await backend.write("k", b"v")

    assert raised.value is errors[2]
    assert faulty.calls["write"] == 3
    assert retries == [("write", 1, errors[0]), ("write", 2, errors[1])]
    assert sleep.delays == [1.0, 1.5]
    assert not await faulty.inner.exists("k")


@pytest.mark.parametrize(
    "error",
    [
        ObjectNotFoundError("no such object", where="memory://retry/k"),
        BackendError("AccessDenied", where="s3://b/k"),
    ],
)
async def test_fatal_errors_are_not_retried(
    faulty: FaultyBackend, sleep: RecordingSleep, error: TieredStoreError
) -> None:
    faulty.fail("size", error)
    retries: list[str] = []
    backend = RetryingBackend(
        faulty, RetryPolicy(), on_retry=lambda op, *_: retries.append(op), sleep=sleep
    )

    with pytest.raises(type(error)) as raised:
        await backend.size("k")

    assert raised.value is error
    assert faulty.calls["size"] == 1
    assert sleep.delays == []
    assert retries == []


async def test_every_operation_is_retried(faulty: FaultyBackend, sleep: RecordingSleep) -> None:
    backend = RetryingBackend(faulty, RetryPolicy(jitter=0), sleep=sleep)
    for op in ("write", "read", "size", "exists", "list", "delete"):
        faulty.fail(op, unavailable())

    await backend.write("k", b"v")
    assert await backend.read("k") == b"v"
    assert await backend.size("k") == 1
    assert await backend.exists("k")
    assert [i.key for i in await backend.list()] == ["k"]
    await backend.delete("k")

    assert all(n == 2 for n in faulty.calls.values())
    assert len(sleep.delays) == 6


async def test_write_chunks_is_not_retried(sleep: RecordingSleep) -> None:
    faulty = FaultyBackend(MemoryBackend("retry"))
    faulty.fail("write", unavailable())  # the default write_chunks ends in write()
    backend = RetryingBackend(faulty, RetryPolicy(), sleep=sleep)

    async def chunks() -> AsyncIterator[bytes]:
        yield b"once"

    with pytest.raises(BackendUnavailableError):
        await backend.write_chunks("k", chunks())
    assert faulty.calls["write"] == 1
    assert sleep.delays == []


async def test_open_backend_wraps_in_retries(sleep: RecordingSleep) -> None:
    backend = open_backend("memory://wrapped", retry=RetryPolicy(max_attempts=2))
    assert isinstance(backend, RetryingBackend)
    assert isinstance(backend.inner, MemoryBackend)
    assert backend.url == "memory://wrapped"
    await backend.write("k", b"v")
    assert await backend.read("k") == b"v"
    await backend.close()
    await backend.close()
