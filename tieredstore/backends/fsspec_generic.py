"""Any other fsspec filesystem (``gs://``, ``az://``, ``sftp://``, ...) behind the contract.

The adapter speaks fsspec's generic API: for an async filesystem
(:class:`fsspec.asyn.AsyncFileSystem`) it creates the instance with
``asynchronous=True`` and awaits the ``_``-prefixed coroutines; for a sync one it runs
the sync methods in worker threads. Either way nothing blocks the event loop.

Best effort, by design — prefer the dedicated memory, POSIX and S3 backends:

* **Atomicity** is whatever ``pipe_file`` gives on that filesystem. Object stores
  (GCS, Azure) publish an object whole; file-like ones (sftp, ftp) may expose a
  partially written file to a concurrent reader.
* **Conditional writes** (``create``, ``replace``) are emulated by a check followed by
  a write, which another writer can interleave: :attr:`conditional_writes` is False,
  and the sidecar refuses to write through this backend unless the operator opts into
  that weaker mode (``cold.allow_unconditional_writes``).
* **Parent directories** are not created; filesystems that need them (sftp, ftp) must
  have them already.
* **Ranged reads** ask for the object's size first and clip the range themselves, so
  every filesystem gets the contract's clipping rules (two round trips).
* **mtime** comes from the listing's ``mtime``/``LastModified``/``created``/... field;
  a filesystem that reports none makes ``list`` raise BackendError rather than invent
  a time (GC decisions depend on it).
* **Errors**: FileNotFoundError → ObjectNotFoundError, TimeoutError →
  BackendTimeoutError, ConnectionError → BackendUnavailableError; anything else the
  filesystem raises becomes BackendError (the original is chained as ``__cause__``).
* **Keys** are passed to fsspec as paths, and some filesystems give path characters a
  meaning: s3fs, for one, cuts a key at ``?versionId=``. Keys with ``?`` or ``#`` are
  only safe on the dedicated backends.
* **close()** closes the sessions of the async filesystems we know (s3fs's client, an
  aiohttp session in ``_session`` as held by the HTTP filesystem and gcsfs).
"""

from __future__ import annotations

import asyncio
import builtins
import enum
import inspect
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import fsspec
from fsspec.asyn import AsyncFileSystem
from fsspec.core import split_protocol

from tieredstore.backends.base import (
    Backend,
    ObjectInfo,
    Versioned,
    check_open,
    content_version,
    failure_error,
    usable_key,
)
from tieredstore.backends.key_rules import check_prefix, check_range
from tieredstore.errors import (
    BackendError,
    ConditionFailedError,
    ConfigError,
    ObjectNotFoundError,
    TieredStoreError,
)

__all__ = ["FsspecBackend", "filesystem_class"]

_MTIME_FIELDS = ("mtime", "LastModified", "last_modified", "modified", "updated", "created")


class _State(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


def filesystem_class(url: str) -> type[Any]:
    """The fsspec filesystem class for ``url``'s protocol; ConfigError if there is none."""
    protocol, _ = split_protocol(url)
    if not protocol:
        raise ConfigError(f"URL has no scheme: {url!r}")
    try:
        return fsspec.get_filesystem_class(protocol)  # type: ignore[no-any-return]
    except ValueError as exc:
        raise ConfigError(f"unknown storage scheme {protocol!r} in {url!r}") from exc
    except ImportError as exc:
        raise ConfigError(
            f"storage scheme {protocol!r} needs a package that is not installed: {exc}"
        ) from exc


class FsspecBackend(Backend):
    """Objects under ``url`` on the fsspec filesystem its scheme names.

    ``storage_options`` are passed to the filesystem constructor (credentials,
    endpoints, ...). See the module docstring for what is best effort.
    """

    conditional_writes = False

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        cls = filesystem_class(url)
        self.url = url.rstrip("/")
        self.is_async = issubclass(cls, AsyncFileSystem)
        options = dict(storage_options or {})
        if self.is_async:
            options["asynchronous"] = True
        try:
            self._fs = cls(skip_instance_cache=True, **options)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"bad options for {url!r}: {exc}") from exc
        self._root = str(self._fs._strip_protocol(url)).rstrip("/")
        self._state = _State.OPEN

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        path = self._path(key)
        check_range(key, start, end, self.url)
        if start == 0 and end is None:
            with self._errors("read", path):
                return bytes(await self._call("cat_file", path))
        size = await self.size(key)
        stop = size if end is None else min(end, size)
        if start >= stop:
            return b""
        with self._errors("read", path):
            return bytes(await self._call("cat_file", path, start=start, end=stop))

    async def write(self, key: str, data: bytes) -> None:
        path = self._path(key)
        with self._errors("write", path):
            await self._call("pipe_file", path, bytes(data))

    async def create(self, key: str, data: bytes) -> str:
        """Check-then-write: NOT atomic (see the module docstring)."""
        if await self.exists(key):
            raise ConditionFailedError("object already exists", where=self._path(key))
        await self.write(key, data)
        return content_version(data)

    async def read_versioned(self, key: str) -> Versioned:
        data = await self.read(key)
        return Versioned(data, content_version(data))

    async def replace(self, key: str, data: bytes, *, version: str) -> str:
        """Compare-then-write: NOT atomic (see the module docstring)."""
        try:
            current = await self.read_versioned(key)
        except ObjectNotFoundError as exc:
            raise ConditionFailedError("object does not exist", where=self._path(key)) from exc
        if current.version != version:
            raise ConditionFailedError(
                "object is not at the expected version", where=self._path(key)
            )
        await self.write(key, data)
        return content_version(data)

    async def size(self, key: str) -> int:
        path = self._path(key)
        with self._errors("stat", path):
            info = await self._call("info", path)
        if info.get("type") != "file":
            raise ObjectNotFoundError("no such object (a directory)", where=path)
        return int(info["size"])

    async def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            with self._errors("delete", path):
                await self._call("rm_file", path)
        except ObjectNotFoundError:
            return

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        check_prefix(prefix, self.url)
        check_open(self._state is _State.CLOSED, self.url)
        head = prefix.rpartition("/")[0]
        base = f"{self._root}/{head}" if head else self._root
        try:
            with self._errors("list", base):
                found = await self._call("find", base, detail=True)
        except ObjectNotFoundError:
            return []
        cut = len(self._root) + 1
        infos = [
            ObjectInfo(str(name)[cut:], int(info["size"]), _mtime(info, str(name)))
            for name, info in found.items()
            if info.get("type") == "file" and str(name)[cut:].startswith(prefix)
        ]
        infos.sort(key=lambda info: info.key)
        return infos

    async def close(self) -> None:
        """Close the async filesystem's session where we know how. Safe to call twice."""
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        if self.is_async:
            await _close_sessions(self._fs)

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self.is_async:
            return await getattr(self._fs, "_" + method)(*args, **kwargs)
        return await asyncio.to_thread(getattr(self._fs, method), *args, **kwargs)

    def _path(self, key: str) -> str:
        return f"{self._root}/{usable_key(key, self.url, closed=self._state is _State.CLOSED)}"

    @contextmanager
    def _errors(self, op: str, path: str) -> Iterator[None]:
        try:
            yield
        # A third-party filesystem may raise anything for a failed call; each failure
        # becomes one of ours with the original chained.
        except Exception as exc:
            raise _translate(exc, op, path) from exc


def _translate(exc: Exception, op: str, where: str) -> TieredStoreError:
    known = failure_error(exc, op, where, timeouts=(TimeoutError,), unavailable=(ConnectionError,))
    return known or BackendError(f"{op} failed: {type(exc).__name__}: {exc}", where=where)


def _mtime(info: Mapping[str, Any], where: str) -> float:
    for name in _MTIME_FIELDS:
        value = info.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                continue
        if isinstance(value, datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=UTC)
            return value.timestamp()
    raise BackendError("filesystem reports no modification time for object", where=where)


async def _close_sessions(fs: Any) -> None:
    client = getattr(fs, "_s3", None)  # s3fs: an aiobotocore client
    if client is not None:
        fs._s3 = None
        await client.close()
    session = getattr(fs, "_session", None)  # HTTP filesystem, gcsfs: aiohttp session
    if session is not None and not getattr(session, "closed", True):
        result = session.close()
        if inspect.isawaitable(result):
            await result
