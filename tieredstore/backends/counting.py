"""Counting a backend's requests and bytes per operation (what an object store bills).

:class:`CountingBackend` wraps any backend and reports, through two callbacks:

* ``on_request(operation)`` once per request. For most backends a request is one call
  (``read``, ``write``, ``size``, ``exists``, ``delete``, ``list``; ``write_chunks`` and
  the conditional ``create`` / ``replace`` count as one ``write``, ``read_versioned``
  as one ``read``), counted when it is made, whether it succeeds or not. Over
  an :class:`~tieredstore.backends.s3.S3Backend` the count is per HTTP request, as S3
  bills it: a multipart write is a ``write`` for the create, each part and the
  complete, a listing one ``list`` per page, a HEAD (``size``, ``exists``) a ``size``,
  an aborted multipart upload an ``abort``.
* ``on_bytes(operation, n)`` with the payload of each successful ``read`` (bytes
  returned) and ``write`` (bytes stored, streamed ones included).

Put it *inside* the retry wrapper (``RetryingBackend(CountingBackend(...))``) so that
every attempt is a request.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import AsyncIterable, Callable
from pathlib import Path
from typing import Final

from tieredstore.backends.base import Backend, ObjectInfo, Versioned
from tieredstore.backends.forwarding import ForwardingBackend

__all__ = ["CountingBackend", "OnBytes", "OnRequest"]

OnRequest = Callable[[str], None]
OnBytes = Callable[[str, int], None]

# S3Backend names its requests as its error messages do; "stat" is a HEAD: our size.
_S3_KINDS: Final = {"stat": "size"}


class CountingBackend(ForwardingBackend):
    """``inner`` with its requests and bytes counted (see the module doc)."""

    def __init__(self, inner: Backend, *, on_request: OnRequest, on_bytes: OnBytes) -> None:
        super().__init__(inner)
        self._on_request = on_request
        self._on_bytes = on_bytes
        self._per_call = True
        s3 = sys.modules.get("tieredstore.backends.s3")  # not imported: not an S3Backend
        if s3 is not None and isinstance(inner, s3.S3Backend):
            inner.on_request = self._s3_request
            self._per_call = False

    def _s3_request(self, kind: str) -> None:
        self._on_request(_S3_KINDS.get(kind, kind))

    def _request(self, operation: str) -> None:
        if self._per_call:
            self._on_request(operation)

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        self._request("read")
        data = await self.inner.read(key, start, end)
        self._on_bytes("read", len(data))
        return data

    async def read_exact(self, key: str, start: int, end: int) -> bytes:
        """Counted like :meth:`read`; the inner backend's own check of the length (a
        short answer raises there, inside any retry wrapper beneath)."""
        self._request("read")
        data = await self.inner.read_exact(key, start, end)
        self._on_bytes("read", len(data))
        return data

    async def write(self, key: str, data: bytes) -> None:
        self._request("write")
        await self.inner.write(key, data)
        self._on_bytes("write", len(data))

    async def write_chunks(self, key: str, chunks: AsyncIterable[bytes]) -> int:
        self._request("write")
        size = await self.inner.write_chunks(key, chunks)
        self._on_bytes("write", size)
        return size

    async def write_file(
        self, key: str, path: Path, *, chunk_bytes: int, check: Callable[[], None]
    ) -> int:
        """One write request, its size in bytes; the inner backend's own way."""
        self._request("write")
        size = await self.inner.write_file(key, path, chunk_bytes=chunk_bytes, check=check)
        self._on_bytes("write", size)
        return size

    async def create(self, key: str, data: bytes) -> str:
        self._request("write")
        version = await self.inner.create(key, data)
        self._on_bytes("write", len(data))
        return version

    async def read_versioned(self, key: str) -> Versioned:
        self._request("read")
        got = await self.inner.read_versioned(key)
        self._on_bytes("read", len(got.data))
        return got

    async def replace(self, key: str, data: bytes, *, version: str) -> str:
        self._request("write")
        new = await self.inner.replace(key, data, version=version)
        self._on_bytes("write", len(data))
        return new

    async def size(self, key: str) -> int:
        self._request("size")
        return await self.inner.size(key)

    async def exists(self, key: str) -> bool:
        self._request("exists")
        return await self.inner.exists(key)

    async def delete(self, key: str) -> None:
        self._request("delete")
        await self.inner.delete(key)

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        self._request("list")
        return await self.inner.list(prefix)
