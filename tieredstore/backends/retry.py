"""Retrying transient backend errors with capped exponential backoff and jitter.

:class:`RetryingBackend` wraps any backend and retries an operation only when it raises
a :class:`~tieredstore.errors.RetryableError` (unavailable, timeout, throttled —
throttling is back-pressure, never a failure). Fatal errors, ObjectNotFoundError
included, pass through at once. When the attempts run out, the last RetryableError is
re-raised unchanged, so the caller still sees *why*.

Delay before retry ``n`` (``n`` = 1 after the first failure), for
``base_delay=0.1, multiplier=2, max_delay=2, jitter=0.25``:

====  ===========  ================  ======================
 n    uncapped     capped            slept (jitter removes
                                     up to 25 %)
====  ===========  ================  ======================
 1    0.1          0.1               0.075 … 0.1
 2    0.2          0.2               0.15 … 0.2
 5    1.6          1.6               1.2 … 1.6
 6    3.2          2.0               1.5 … 2.0
====  ===========  ================  ======================

Jitter only ever shortens a delay, so ``max_delay`` is a hard cap. Sleep and randomness
are injected: tests pass a recording fake sleep and a fixed random source.

Given a :class:`Reach` (what the operator needs to find the store: its URL, endpoint and
timeouts), a backend that runs out of attempts on a connection error or a timeout raises
:class:`~tieredstore.errors.ColdStoreUnreachableError` instead, with one message for the
fault whatever the command (:func:`unreachable`); throttling and other errors pass
unchanged. Commands get this through :func:`tieredstore.backends.factory.open_cold`.
"""

from __future__ import annotations

import asyncio
import builtins
import random
import time
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tieredstore.backends.base import Backend, ObjectInfo, Versioned
from tieredstore.errors import (
    BackendTimeoutError,
    BackendUnavailableError,
    ColdStoreUnreachableError,
    ConfigError,
    RetryableError,
)

__all__ = ["OnRetry", "Reach", "RetryPolicy", "RetryingBackend", "retry_call", "unreachable"]

T = TypeVar("T")

OnRetry = Callable[[str, int, RetryableError], None]
"""``on_retry(op_name, attempt, exc)``: called after failed ``attempt`` (1-based) of
``op_name`` (``"read"``, ``"write"``, ...) when another attempt will follow."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently to retry. ``max_attempts`` counts the first try."""

    max_attempts: int = 6
    base_delay: float = 0.2
    max_delay: float = 20.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"retry max_attempts must be >= 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < self.base_delay:
            raise ConfigError(
                f"retry delays need 0 <= base_delay <= max_delay, "
                f"got {self.base_delay} and {self.max_delay}"
            )
        if self.multiplier < 1:
            raise ConfigError(f"retry multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise ConfigError(f"retry jitter must be within [0, 1], got {self.jitter}")

    def delay(self, retry: int, rand: float) -> float:
        """Seconds to wait before retry number ``retry`` (1-based).

        ``rand`` is a uniform sample from ``[0, 1)``; the capped delay is reduced by
        ``jitter * rand`` of itself, so the result lies in
        ``[capped * (1 - jitter), capped]``.
        """
        # Multiply step by step rather than take a power: base * multiplier**n overflows
        # a float long before the capped result stops being representable.
        capped = self.base_delay
        for _ in range(retry - 1):
            if capped >= self.max_delay:
                break
            capped *= self.multiplier
        capped = min(capped, self.max_delay)
        return capped * (1.0 - self.jitter * rand)


@dataclass(frozen=True, slots=True)
class Reach:
    """How a store is reached, for the message of :func:`unreachable`: its URL (without
    credentials), the endpoint (``""``: the scheme's default) and the per-request
    timeouts in seconds (None: the backend has none, e.g. POSIX)."""

    url: str
    endpoint: str = ""
    connect_timeout: float | None = None
    read_timeout: float | None = None


def unreachable(
    reach: Reach, op: str, exc: RetryableError, *, attempts: int, elapsed_s: float
) -> ColdStoreUnreachableError:
    """The one message for a cold store that did not answer (:class:`Reach`)::

    cold store s3://bkt/tiered unreachable at endpoint http://127.0.0.1:1: list of
    s3://bkt/tiered/…/_lease.json failed 6 times in 8.1 s (connect timeout 10 s,
    read timeout 60 s); last error: EndpointConnectionError: Could not connect …
    """
    at = f"endpoint {reach.endpoint}" if reach.endpoint else "its default endpoint"
    what = f"{op} of {exc.where}" if exc.where else op
    limits = [
        f"{name} timeout {value:g} s"
        for name, value in (("connect", reach.connect_timeout), ("read", reach.read_timeout))
        if value is not None
    ]
    timeouts = f" ({', '.join(limits)})" if limits else ""
    last = exc.message.removeprefix(f"{op} failed: ")
    return ColdStoreUnreachableError(
        f"cold store {reach.url} unreachable at {at}: {what} failed {attempts} "
        f"time{'s' if attempts != 1 else ''} in {elapsed_s:.1f} s{timeouts}; last error: {last}"
    )


class RetryingBackend(Backend):
    """``inner`` with every operation retried per ``policy``.

    ``write_chunks`` and ``write_file`` are *not* retried: a chunk stream can be consumed
    only once, so a RetryableError from it reaches the caller, who must rebuild the
    stream. ``close`` is never retried.
    """

    def __init__(
        self,
        inner: Backend,
        policy: RetryPolicy,
        *,
        on_retry: OnRetry | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        random_source: Callable[[], float] = random.random,
        reach: Reach | None = None,
    ) -> None:
        self.inner = inner
        self.policy = policy
        self.reach = reach
        self.url = inner.url
        self.conditional_writes = inner.conditional_writes
        self._on_retry = on_retry
        self._sleep = sleep
        self._random = random_source

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        return await self._retry("read", lambda: self.inner.read(key, start, end))

    async def read_exact(self, key: str, start: int, end: int) -> bytes:
        return await self._retry("read", lambda: self.inner.read_exact(key, start, end))

    async def write(self, key: str, data: bytes) -> None:
        await self._retry("write", lambda: self.inner.write(key, data))

    async def write_chunks(self, key: str, chunks: AsyncIterable[bytes]) -> int:
        return await self.inner.write_chunks(key, chunks)

    async def write_file(
        self, key: str, path: Path, *, chunk_bytes: int, check: Callable[[], None]
    ) -> int:
        """Not retried either, like :meth:`write_chunks` (the caller retries the whole
        upload); the inner backend's own way (POSIX links the file)."""
        return await self.inner.write_file(key, path, chunk_bytes=chunk_bytes, check=check)

    async def create(self, key: str, data: bytes) -> str:
        """Retried like a write. A retry after a lost reply may find the caller's own
        object and raise ConditionFailedError: callers compare what is there."""
        return await self._retry("create", lambda: self.inner.create(key, data))

    async def read_versioned(self, key: str) -> Versioned:
        return await self._retry("read", lambda: self.inner.read_versioned(key))

    async def replace(self, key: str, data: bytes, *, version: str) -> str:
        """Retried like a write; the same caveat as :meth:`create` holds."""
        return await self._retry("replace", lambda: self.inner.replace(key, data, version=version))

    async def size(self, key: str) -> int:
        return await self._retry("size", lambda: self.inner.size(key))

    async def exists(self, key: str) -> bool:
        return await self._retry("exists", lambda: self.inner.exists(key))

    async def delete(self, key: str) -> None:
        await self._retry("delete", lambda: self.inner.delete(key))

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        return await self._retry("list", lambda: self.inner.list(prefix))

    async def list_leftovers(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        return await self._retry("list_leftovers", lambda: self.inner.list_leftovers(prefix))

    async def delete_leftover(self, key: str) -> None:
        await self._retry("delete_leftover", lambda: self.inner.delete_leftover(key))

    async def close(self) -> None:
        await self.inner.close()

    async def _retry(self, op: str, call: Callable[[], Awaitable[T]]) -> T:
        started = time.monotonic()
        try:
            return await retry_call(
                op,
                call,
                self.policy,
                sleep=self._sleep,
                random_source=self._random,
                on_retry=self._on_retry,
            )
        except (BackendUnavailableError, BackendTimeoutError) as exc:
            if self.reach is None or isinstance(exc, ColdStoreUnreachableError):
                raise
            elapsed = time.monotonic() - started
            attempts = self.policy.max_attempts
            raise unreachable(self.reach, op, exc, attempts=attempts, elapsed_s=elapsed) from exc


async def retry_call(
    op: str,
    call: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], Awaitable[None]],
    random_source: Callable[[], float] = random.random,
    on_retry: OnRetry | None = None,
) -> T:
    """Await ``call()``, again after each RetryableError, up to ``policy.max_attempts``.

    The one retry loop: :class:`RetryingBackend` runs every backend call through it, and
    callers that must retry a whole multi-request operation (a streamed segment upload,
    which cannot be replayed request by request) run that through it too. The last
    RetryableError is re-raised unchanged; any other error passes through at once.
    """
    attempt = 1
    while True:
        try:
            return await call()
        except RetryableError as exc:
            if attempt >= policy.max_attempts:
                raise
            if on_retry is not None:
                on_retry(op, attempt, exc)
            await sleep(policy.delay(attempt, random_source()))
            attempt += 1
