"""A backend wrapper that stalls: a paused process, or a request stuck on the network.

:class:`Stall` forwards every call until ``trigger(op, key)`` first matches. From then on
the matching call — or, with ``hold_all``, every call (a process that is paused as a
whole) — waits until :meth:`Stall.release`. Nothing moves by time: the test decides
when the stalled requests land.

A held streamed upload has already consumed its chunks (its bytes are "on the wire");
after release it lands whole. :attr:`Stall.stalled` is set once a call is actually
parked at the gate — for a streamed upload, after its chunks were consumed, so a test
that moves the clock once ``stalled`` is set never races the upload's own lease checks.
A call that matched before :meth:`Stall.release` but reaches the gate after it goes
straight through. With ``land_if_cancelled`` a held write whose caller gave
up (a cancelled task) still lands after release, as a request the server goes on
processing would.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import TypeVar

from tieredstore.backends.base import Backend, ObjectInfo, Versioned
from tieredstore.backends.forwarding import ForwardingBackend

__all__ = ["Stall"]

T = TypeVar("T")
Trigger = Callable[[str, str], bool]


async def _one(data: bytes) -> AsyncIterator[bytes]:
    yield data


class Stall(ForwardingBackend):
    """``inner``, holding calls once ``trigger`` has matched (see the module docstring)."""

    def __init__(
        self,
        inner: Backend,
        trigger: Trigger,
        *,
        hold_all: bool = True,
        land_if_cancelled: bool = False,
    ) -> None:
        super().__init__(inner)
        self.trigger = trigger
        self.hold_all = hold_all
        self.land_if_cancelled = land_if_cancelled
        self.stalled = asyncio.Event()
        self.held = 0
        self._triggered = False
        self.late: list[asyncio.Task[object]] = []
        self._open = asyncio.Event()
        self._open_ops: set[str] = set()
        self._waiting: list[tuple[str, asyncio.Future[None]]] = []
        self._landed: dict[str, int] = {}
        self._changed = asyncio.Condition()

    def release(self, *ops: str) -> None:
        """Let the held calls of ``ops`` through (all calls, for good, when none given)."""
        if not ops:
            self._open.set()
        self._open_ops.update(ops)
        for op, fut in self._waiting:
            if (not ops or op in ops) and not fut.done():
                fut.set_result(None)

    async def landed(self, op: str, count: int = 1) -> None:
        """Wait until ``count`` released calls of ``op`` have returned."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._landed.get(op, 0) >= count)

    async def drained(self) -> None:
        """Wait until every write that landed after its caller gave up has landed."""
        await asyncio.gather(*self.late)

    def _released(self, op: str) -> bool:
        return self._open.is_set() or op in self._open_ops

    def _holds(self, op: str, key: str) -> bool:
        if self._released(op):
            return False
        if not self._triggered:
            if not self.trigger(op, key):
                return False
            self._triggered = True
            return True
        return self.hold_all

    async def _call(
        self, op: str, key: str, call: Callable[[], Awaitable[T]], *, hold: bool | None = None
    ) -> T:
        held = self._holds(op, key) if hold is None else hold
        if not held or self._released(op):  # released before it reached the gate
            return await call()
        self.held += 1
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((op, gate))
        self.stalled.set()
        try:
            await asyncio.shield(gate)
        except asyncio.CancelledError:
            if self.land_if_cancelled and op in ("write", "write_chunks", "create"):
                self.late.append(asyncio.ensure_future(self._land_later(op, gate, call)))
            raise
        return await self._land(op, call)

    async def _land(self, op: str, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        finally:
            async with self._changed:
                self._landed[op] = self._landed.get(op, 0) + 1
                self._changed.notify_all()

    async def _land_later(
        self, op: str, gate: asyncio.Future[None], call: Callable[[], Awaitable[object]]
    ) -> object:
        await gate
        return await self._land(op, call)

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        return await self._call("read", key, lambda: self.inner.read(key, start, end))

    async def read_exact(self, key: str, start: int, end: int) -> bytes:
        return await self._call("read", key, lambda: self.inner.read_exact(key, start, end))

    async def write(self, key: str, data: bytes) -> None:
        await self._call("write", key, lambda: self.inner.write(key, data))

    async def write_chunks(self, key: str, chunks: AsyncIterable[bytes]) -> int:
        if not self._holds("write_chunks", key):
            return await self.inner.write_chunks(key, chunks)
        data = b"".join([chunk async for chunk in chunks])  # sent: now on the wire
        return await self._call(
            "write_chunks", key, lambda: self.inner.write_chunks(key, _one(data)), hold=True
        )

    async def create(self, key: str, data: bytes) -> str:
        return await self._call("create", key, lambda: self.inner.create(key, data))

    async def read_versioned(self, key: str) -> Versioned:
        return await self._call("read", key, lambda: self.inner.read_versioned(key))

    async def replace(self, key: str, data: bytes, *, version: str) -> str:
        return await self._call(
            "replace", key, lambda: self.inner.replace(key, data, version=version)
        )

    async def size(self, key: str) -> int:
        return await self._call("size", key, lambda: self.inner.size(key))

    async def exists(self, key: str) -> bool:
        return await self._call("exists", key, lambda: self.inner.exists(key))

    async def delete(self, key: str) -> None:
        await self._call("delete", key, lambda: self.inner.delete(key))

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        return await self._call("list", prefix, lambda: self.inner.list(prefix))
