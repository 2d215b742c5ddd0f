"""The async backend contract: the one seam between tieredstore and a storage system.

A backend stores immutable objects under ``/``-separated keys relative to its root URL.
Six primitives make the contract, plus three conditional ones that fence concurrent
writers; everything else (segments, manifests, leases, GC) is built once above it.
Every backend passes the same contract suite (``tests/tieredstore/backends/test_contract.py``).

Contract, for every implementation:

* ``read(key, start, end)`` returns bytes ``[start, end)`` clipped to the object's size
  (``end=None`` means to the end). A range that starts at or past the end returns ``b""``.
  A missing key raises :class:`~tieredstore.errors.ObjectNotFoundError`.
  ``read_exact`` (derived) treats a short answer for a range known to exist as a
  retryable fault.
* ``write(key, data)`` stores the whole object atomically: a reader sees either the old
  object, or nothing, or all of ``data`` — never a prefix. Writing an existing key
  replaces it (deterministic names make retries idempotent).
* ``create(key, data)`` stores ``data`` only if ``key`` does not exist, atomically with
  that check (S3 ``If-None-Match: *``, POSIX ``link()``), and returns the new object's
  version. If the key exists, nothing is written and
  :class:`~tieredstore.errors.ConditionFailedError` is raised. Committed objects
  (manifests, loss records) are only ever created, never replaced.
* ``read_versioned(key)`` returns the object's bytes with its version (an opaque token:
  the S3 ETag, a content digest elsewhere).
* ``replace(key, data, version=v)`` replaces the object only if its current version is
  ``v`` (S3 ``If-Match``, POSIX under an exclusive lock); otherwise — another version, or
  no object — nothing is written and ConditionFailedError is raised. The lease is the one
  object written this way (compare-and-swap).
* :attr:`Backend.conditional_writes` says whether the three above are really atomic.
  Backends that cannot make them atomic (generic fsspec) emulate them with a check and
  a write; the sidecar refuses to write through them unless the operator opts in.
* ``size(key)`` / ``exists(key)``: a missing key raises / returns ``False``.
* ``delete(key)`` is idempotent: deleting a missing key is not an error.
* ``list(prefix)`` returns every object whose key starts with ``prefix`` (recursively),
  sorted by key, as :class:`ObjectInfo`. A missing prefix gives ``[]``.
* ``list_leftovers(prefix)`` / ``delete_leftover(key)``: the backend's own private files
  that an interrupted write left behind (a POSIX temp file killed before its rename, an
  S3 multipart upload never completed nor aborted), which ``list`` never shows and no
  object key names; GC removes them past its grace. Stores
  whose writes leave nothing of the kind list none (the default).
* Backend failures are translated into :mod:`tieredstore.errors`: transient ones into
  :class:`~tieredstore.errors.RetryableError` subclasses, the rest into
  :class:`~tieredstore.errors.BackendError` (or ``ObjectNotFoundError``).

Backends are async context managers; ``close()`` is safe to call twice.
"""

from __future__ import annotations

import abc
import asyncio
import builtins
from collections.abc import AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

import xxhash

from tieredstore.backends.key_rules import check_key
from tieredstore.errors import (
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    Damage,
    DamagedObjectError,
    ObjectNotFoundError,
    TieredStoreError,
)

__all__ = [
    "Backend",
    "ObjectInfo",
    "Versioned",
    "check_open",
    "content_version",
    "failure_error",
    "usable_key",
]


def check_open(closed: bool, where: str) -> None:
    """Refuse an operation on a closed backend (``where``: its URL) with BackendError."""
    if closed:
        raise BackendError("backend is closed", where=where)


def failure_error(
    exc: BaseException,
    op: str,
    where: str,
    *,
    timeouts: tuple[type[BaseException], ...],
    unavailable: tuple[type[BaseException], ...],
) -> TieredStoreError | None:
    """Our error for a failed ``op`` on ``where`` that timed out (one of ``timeouts``),
    found the backend unreachable (``unavailable``) or the object missing; None for any
    other failure, which the backend maps itself."""
    text = f"{op} failed: {type(exc).__name__}: {exc}"
    if isinstance(exc, timeouts):
        return BackendTimeoutError(text, where=where)
    if isinstance(exc, unavailable):
        return BackendUnavailableError(text, where=where)
    if isinstance(exc, FileNotFoundError):
        return ObjectNotFoundError("no such object", where=where)
    return None


def usable_key(key: str, where: str, *, closed: bool) -> str:
    """``key``, once it is a valid key (:func:`~tieredstore.backends.key_rules.check_key`) of
    an open backend (:func:`check_open`); BackendError otherwise."""
    check_key(key, where)
    check_open(closed, where)
    return key


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One listed object: its key (relative to the backend root), size and mtime.

    ``mtime`` is seconds since the epoch (UTC), as the backend reports the last write.
    """

    key: str
    size: int
    mtime: float


@dataclass(frozen=True, slots=True)
class Versioned:
    """An object's bytes and the version token a conditional :meth:`Backend.replace` names."""

    data: bytes
    version: str


def content_version(data: bytes) -> str:
    """The version token of backends without native versions: the content's XXH3-128.

    Every record written with ``replace`` (the lease) carries its owner and renewal time,
    so two different writes never share a token (a 128-bit hash of content we write
    ourselves; nothing here defends against someone who can write the store anyway).
    A token is compared only within the process that read it, never stored, so the hash
    may change between releases. It is not a cryptographic digest on purpose: every
    ``create`` computes one, batch objects of up to 16 MiB included, where SHA-256 took
    about 5 % of a catch-up of small queues' CPU.
    """
    return xxhash.xxh3_128_hexdigest(data)


class Backend(abc.ABC):
    """Abstract async object store rooted at :attr:`url`."""

    url: str
    #: Whether ``create`` and ``replace`` are atomic with their condition on this backend.
    conditional_writes: bool = True

    @abc.abstractmethod
    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Return bytes ``[start, end)`` of ``key``, clipped to its size."""

    @abc.abstractmethod
    async def write(self, key: str, data: bytes) -> None:
        """Store ``data`` as ``key`` atomically, replacing any existing object."""

    @abc.abstractmethod
    async def create(self, key: str, data: bytes) -> str:
        """Store ``data`` as ``key`` only if ``key`` is absent; return the new version.

        Raises ConditionFailedError (nothing written) when ``key`` already exists.
        """

    @abc.abstractmethod
    async def read_versioned(self, key: str) -> Versioned:
        """Return ``key``'s bytes and version; raise ObjectNotFoundError if missing."""

    @abc.abstractmethod
    async def replace(self, key: str, data: bytes, *, version: str) -> str:
        """Replace ``key`` with ``data`` only if its version is ``version``; return the new one.

        Raises ConditionFailedError (nothing written) when the object has another version
        or does not exist.
        """

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

    async def list_leftovers(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        """Files this backend's own interrupted writes left under ``prefix``, sorted by
        key (relative to the root, like objects). The default: none."""
        return []

    async def delete_leftover(self, key: str) -> None:
        """Remove one file :meth:`list_leftovers` listed; a missing one is not an error.

        Raises BackendError for a key that is not such a file (an object is never
        deleted this way).
        """
        raise BackendError(f"{key!r} is not a leftover of an interrupted write", where=self.url)

    async def read_exact(self, key: str, start: int, end: int) -> bytes:
        """Return exactly bytes ``[start, end)`` of ``key``, which the caller knows exist.

        A shorter answer from an object that is itself shorter than ``end`` is damage (the
        object was cut short, or another object took its key): it raises
        :class:`~tieredstore.errors.DamagedObjectError` (``Damage.SIZE``), which no retry
        can heal. A shorter answer from an object that holds the bytes is a transient
        backend fault (a truncated response): it raises
        :class:`~tieredstore.errors.BackendUnavailableError` so the caller retries instead
        of mistaking it for corruption.
        """
        data = await self.read(key, start, end)
        if len(data) != end - start:
            size = await self.size(key)
            if size < end:
                raise DamagedObjectError(
                    f"object is {size} bytes, too short for bytes [{start}, {end})",
                    key=key,
                    damage=Damage.SIZE,
                )
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

    async def write_file(
        self, key: str, path: Path, *, chunk_bytes: int, check: Callable[[], None]
    ) -> int:
        """Store the bytes of the local file ``path`` as ``key`` atomically; return its size.

        ``check`` runs before every chunk of about ``chunk_bytes`` (a writer that lost its
        lease stops at once; whatever it raises aborts the write, no object appears).
        The default streams the file through :meth:`write_chunks`, so wrappers that
        intercept it (throttling, counting, faults) see the write; a backend that can
        publish a local file more cheaply (POSIX: a hard link) overrides it. The file
        must not change while it is written.
        """
        return await self.write_chunks(key, file_chunks(path, chunk_bytes, check))

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


def _read_at(path: Path, offset: int, size: int) -> bytes:
    with path.open("rb", buffering=0) as f:
        f.seek(offset)
        return f.read(size)


async def file_chunks(
    path: Path, chunk_bytes: int, check: Callable[[], None]
) -> AsyncIterator[bytes]:
    """Yield the bytes of ``path`` in chunks of ``chunk_bytes``, calling ``check`` before
    reading each (see :meth:`Backend.write_file`)."""
    offset = 0
    while True:
        check()
        data = await asyncio.to_thread(_read_at, path, offset, max(chunk_bytes, 1))
        if not data:
            return
        offset += len(data)
        yield data
