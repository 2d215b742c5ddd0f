"""A backend that forwards every call to another one: the base for wrappers.

Wrappers that change one or two operations (fault injection, tests that make time pass
or a process "die" at a chosen call) subclass :class:`ForwardingBackend` and override
only those; everything else reaches ``inner`` unchanged, errors included.

``read_exact`` follows ``read``: a wrapper that leaves ``read`` alone passes it down too,
so a short answer raises beneath, inside any retry wrapper there (a wrapper above a
retrying backend that checked the length over its own ``read`` raised instead); one that
changes ``read`` gets :meth:`Backend.read_exact` over its own ``read``.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterable

from tieredstore.backends.base import Backend, ObjectInfo, Versioned

__all__ = ["ForwardingBackend"]


class ForwardingBackend(Backend):
    """Every operation goes to ``inner``; ``url`` is the inner backend's."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.url = inner.url
        self.conditional_writes = inner.conditional_writes

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        return await self.inner.read(key, start, end)

    async def read_exact(self, key: str, start: int, end: int) -> bytes:
        if type(self).read is ForwardingBackend.read:  # reads unchanged: the inner's own
            return await self.inner.read_exact(key, start, end)
        return await super().read_exact(key, start, end)

    async def write(self, key: str, data: bytes) -> None:
        await self.inner.write(key, data)

    async def write_chunks(self, key: str, chunks: AsyncIterable[bytes]) -> int:
        return await self.inner.write_chunks(key, chunks)

    async def create(self, key: str, data: bytes) -> str:
        return await self.inner.create(key, data)

    async def read_versioned(self, key: str) -> Versioned:
        return await self.inner.read_versioned(key)

    async def replace(self, key: str, data: bytes, *, version: str) -> str:
        return await self.inner.replace(key, data, version=version)

    async def size(self, key: str) -> int:
        return await self.inner.size(key)

    async def exists(self, key: str) -> bool:
        return await self.inner.exists(key)

    async def list_leftovers(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        return await self.inner.list_leftovers(prefix)

    async def delete_leftover(self, key: str) -> None:
        await self.inner.delete_leftover(key)

    async def delete(self, key: str) -> None:
        await self.inner.delete(key)

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        return await self.inner.list(prefix)

    async def close(self) -> None:
        await self.inner.close()
