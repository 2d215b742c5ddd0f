"""The async backend contract: the one seam between tieredstore and a storage system.

A backend stores immutable objects under ``/``-separated keys relative to its root URL.
Six primitives make the contract; everything else (segments, manifests, leases, GC) is
built once above it. Every backend passes the same contract suite
(``tests/backends/test_contract.py``).

Contract, for every implementation:

* ``read(key, start, end)`` returns bytes ``[start, end)`` clipped to the object's size
  (``end=None`` means to the end). A range that starts at or past the end returns ``b""``.
  A missing key raises :class:`~tieredstore.errors.ObjectNotFoundError`.
  ``read_exact`` (derived) treats a short answer for a range known to exist as a
  retryable fault.
* ``write(key, data)`` stores the whole object atomically: a reader sees either the old
  object, or nothing, or all of ``data`` — never a prefix. Writing an existing key
  replaces it (deterministic names make retries idempotent).
* ``size(key)`` / ``exists(key)``: a missing key raises / returns ``False``.
* ``delete(key)`` is idempotent: deleting a missing key is not an error.
* ``list(prefix)`` returns every object whose key starts with ``prefix`` (recursively),
  sorted by key, as :class:`ObjectInfo`. A missing prefix gives ``[]``.
* Backend failures are translated into :mod:`tieredstore.errors`: transient ones into
  :class:`~tieredstore.errors.RetryableError` subclasses, the rest into
  :class:`~tieredstore.errors.BackendError` (or ``ObjectNotFoundError``).

Backends are async context managers; ``close()`` is safe to call twice.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterable
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from tieredstore.errors import BackendUnavailableError, ObjectNotFoundError

__all__ = ["Backend", "ObjectInfo"]


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One listed object: its key (relative to the backend root), size and mtime.

    ``mtime`` is seconds since the epoch (UTC), as the backend reports the last write.
    """

    key: str
    size: int
    mtime: float


class Backend(abc.ABC):
    """Abstract async object store rooted at :attr:`url`."""

    url: str

    @abc.abstractmethod
    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Return bytes ``[start, end)`` of ``key``, clipped to its size."""

    @abc.abstractmethod
    async def write(self, key: str, data: bytes) -> None:
        """Store ``data`` as ``key`` atomically, replacing any existing object."""

    @abc.abstractmethod
    async def size(self, key: str) -> int:
        """Return the size in bytes of ``key``; raise ObjectNotFoundError if missing."""

    async def exists(self, key: str) -> bool:
        """Return whether ``key`` exists.

        The default asks for its :meth:`size` (ObjectNotFoundError means no); backends
        with a cheaper answer override it.
        """
        try:
            await self.size(key)
        except ObjectNotFoundError:
            return False
        return True

    @abc.abstractmethod
    async def delete(self, key: str) -> None:
        """Delete ``key``; a missing key is not an error."""

    @abc.abstractmethod
    async def list(self, prefix: str = "") -> list[ObjectInfo]:
        """List objects whose key starts with ``prefix``, sorted by key."""

    async def read_exact(self, key: str, start: int, end: int) -> bytes:
        """Return exactly bytes ``[start, end)`` of ``key``, which the caller knows exist.

        A shorter answer is a transient backend fault (a truncated response), not the
        object's content: it raises :class:`~tieredstore.errors.BackendUnavailableError`
        so the caller retries instead of mistaking it for corruption.
        """
        data = await self.read(key, start, end)
        if len(data) != end - start:
            raise BackendUnavailableError(
                f"short read: {len(data)} of {end - start} bytes [{start}, {end})",
                where=f"{self.url} {key}",
            )
        return data

    async def write_chunks(self, key: str, chunks: AsyncIterable[bytes]) -> int:
        """Store the concatenation of ``chunks`` as ``key`` atomically; return its size.

        The default joins the chunks in memory; backends that can stream (POSIX temp
        file, S3 multipart) override it so large segments never sit whole in memory.
        """
        parts = [chunk async for chunk in chunks]
        data = b"".join(parts)
        await self.write(key, data)
        return len(data)

    async def close(self) -> None:  # noqa: B027 - optional hook, default no-op
        """Release connections and sessions. Safe to call twice."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
