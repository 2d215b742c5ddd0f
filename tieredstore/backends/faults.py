"""A backend wrapper that injects faults into a share of calls (chaos testing).

:class:`FaultyBackend` wraps any real backend and, for a seeded random share of calls,
does one of the things real object stores do on a bad day:

=================  =====================================================================
fault              what the caller sees
=================  =====================================================================
ERROR              :class:`~tieredstore.errors.BackendUnavailableError` (a 5xx / reset)
TIMEOUT            :class:`~tieredstore.errors.BackendTimeoutError`
THROTTLE           :class:`~tieredstore.errors.ThrottledError` (SlowDown / 503)
LOST_ACK           the write **succeeds** on the inner backend, then an error is raised
SHORT_READ         a read returns fewer bytes than the object holds for the range
=================  =====================================================================

Faults are drawn per call from a seeded :class:`random.Random`, so a failing run replays
exactly. ``close`` is never faulted. ``stats`` counts calls and injected faults by kind.
"""

from __future__ import annotations

import builtins
import enum
import random
from collections import Counter
from collections.abc import AsyncIterable, Sequence

from tieredstore.backends.base import Backend, ObjectInfo, Versioned
from tieredstore.errors import BackendTimeoutError, BackendUnavailableError, ThrottledError

__all__ = ["Fault", "FaultyBackend"]


class Fault(enum.Enum):
    ERROR = "error"
    TIMEOUT = "timeout"
    THROTTLE = "throttle"
    LOST_ACK = "lost_ack"
    SHORT_READ = "short_read"


class FaultyBackend(Backend):
    """``inner`` with a share ``rate`` of calls failing with one of ``faults``."""

    def __init__(
        self,
        inner: Backend,
        *,
        rate: float,
        seed: int = 0,
        faults: Sequence[Fault] = tuple(Fault),
    ) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate {rate} is not in [0, 1]")
        self.inner = inner
        self.url = inner.url
        self.conditional_writes = inner.conditional_writes
        self.rate = rate
        self.faults = tuple(faults)
        self.enabled = True
        self.stats: Counter[str] = Counter()
        self._rng = random.Random(seed)

    def _draw(self, op: str, allowed: Sequence[Fault]) -> Fault | None:
        self.stats[f"calls.{op}"] += 1
        choices = [f for f in self.faults if f in allowed]
        if not (self.enabled and choices) or self._rng.random() >= self.rate:
            return None
        fault = self._rng.choice(choices)
        self.stats[f"faults.{fault.value}"] += 1
        return fault

    def _raise(self, fault: Fault, op: str, key: str) -> None:
        where = f"{self.url} {op} {key}"
        if fault is Fault.TIMEOUT:
            raise BackendTimeoutError("injected timeout", where=where)
        if fault is Fault.THROTTLE:
            raise ThrottledError("injected SlowDown", where=where)
        raise BackendUnavailableError(f"injected {fault.value}", where=where)

    _PLAIN = (Fault.ERROR, Fault.TIMEOUT, Fault.THROTTLE)

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        fault = self._draw("read", (*self._PLAIN, Fault.SHORT_READ))
        if fault is Fault.SHORT_READ:
            data = await self.inner.read(key, start, end)
            return data[: len(data) // 2]
        if fault is not None:
            self._raise(fault, "read", key)
        return await self.inner.read(key, start, end)

    async def write(self, key: str, data: bytes) -> None:
        fault = self._draw("write", (*self._PLAIN, Fault.LOST_ACK))
        if fault is Fault.LOST_ACK:
            await self.inner.write(key, data)
        if fault is not None:
            self._raise(fault, "write", key)
        await self.inner.write(key, data)

    async def write_chunks(self, key: str, chunks: AsyncIterable[bytes]) -> int:
        fault = self._draw("write_chunks", (*self._PLAIN, Fault.LOST_ACK))
        if fault is Fault.LOST_ACK:
            await self.inner.write_chunks(key, chunks)
        if fault is not None:
            self._raise(fault, "write_chunks", key)
        return await self.inner.write_chunks(key, chunks)

    async def create(self, key: str, data: bytes) -> str:
        fault = self._draw("create", (*self._PLAIN, Fault.LOST_ACK))
        if fault is Fault.LOST_ACK:
            await self.inner.create(key, data)
        if fault is not None:
            self._raise(fault, "create", key)
        return await self.inner.create(key, data)

    async def read_versioned(self, key: str) -> Versioned:
        fault = self._draw("read_versioned", self._PLAIN)
        if fault is not None:
            self._raise(fault, "read_versioned", key)
        return await self.inner.read_versioned(key)

    async def replace(self, key: str, data: bytes, *, version: str) -> str:
        fault = self._draw("replace", (*self._PLAIN, Fault.LOST_ACK))
        if fault is Fault.LOST_ACK:
            await self.inner.replace(key, data, version=version)
        if fault is not None:
            self._raise(fault, "replace", key)
        return await self.inner.replace(key, data, version=version)

    async def size(self, key: str) -> int:
        fault = self._draw("size", self._PLAIN)
        if fault is not None:
            self._raise(fault, "size", key)
        return await self.inner.size(key)

    async def exists(self, key: str) -> bool:
        fault = self._draw("exists", self._PLAIN)
        if fault is not None:
            self._raise(fault, "exists", key)
        return await self.inner.exists(key)

    async def delete(self, key: str) -> None:
        fault = self._draw("delete", (*self._PLAIN, Fault.LOST_ACK))
        if fault is Fault.LOST_ACK:
            await self.inner.delete(key)
        if fault is not None:
            self._raise(fault, "delete", key)
        await self.inner.delete(key)

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        fault = self._draw("list", self._PLAIN)
        if fault is not None:
            self._raise(fault, "list", prefix)
        return await self.inner.list(prefix)

    async def list_leftovers(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        return await self.inner.list_leftovers(prefix)  # no faults: GC's housekeeping

    async def delete_leftover(self, key: str) -> None:
        await self.inner.delete_leftover(key)

    async def close(self) -> None:
        await self.inner.close()
