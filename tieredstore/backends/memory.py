"""An in-memory backend: a real implementation of the contract, and the test double.

``memory://<name>`` names a process-wide store, like fsspec's memory filesystem: every
:class:`MemoryBackend` opened with the same name sees the same objects, so a writer and a
reader built separately (dispatcher and read path) share data in tests. The whole text
after ``memory://`` is the name (``memory://a/b`` is the store ``a/b``, not a prefix of
``a``). :func:`reset_memory_stores` forgets every store; tests call it between cases.

Each operation runs to completion without awaiting, under a short thread lock, so it is
atomic with respect to other coroutines and threads: ``write`` replaces the object in one
step, and a reader sees the old bytes or the new ones, never a mix. ``create`` and
``replace`` check their condition and write under the same lock, so they are true
create-if-absent and compare-and-swap; versions are content digests.

mtimes come from an injected clock (epoch seconds), so retention and GC tests control
time; the default is :func:`time.time`.
"""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tieredstore.backends.base import Backend, ObjectInfo, Versioned, content_version
from tieredstore.backends.key_rules import check_key, check_prefix, check_range
from tieredstore.errors import ConditionFailedError, ConfigError, ObjectNotFoundError

__all__ = ["MemoryBackend", "reset_memory_stores"]

SCHEME = "memory://"


@dataclass(frozen=True, slots=True)
class _Object:
    data: bytes
    mtime: float


@dataclass(slots=True)
class _Store:
    objects: dict[str, _Object] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


_stores: dict[str, _Store] = {}
_stores_lock = threading.Lock()


def reset_memory_stores() -> None:
    """Forget every named store (objects of already-open backends stay with them)."""
    with _stores_lock:
        _stores.clear()


def _by_key(item: tuple[str, _Object]) -> str:
    return item[0]


def _store_named(name: str) -> _Store:
    with _stores_lock:
        return _stores.setdefault(name, _Store())


class MemoryBackend(Backend):
    """Objects in a process-wide dict, shared by name.

    ``MemoryBackend("t")`` and ``MemoryBackend.from_url("memory://t")`` are the same store.
    ``clock`` returns epoch seconds and stamps each write's mtime.
    """

    def __init__(self, name: str, *, clock: Callable[[], float] = time.time) -> None:
        if not name:
            raise ConfigError("memory backend needs a name (memory://<name>)")
        self.name = name
        self.url = SCHEME + name
        self._clock = clock
        self._store = _store_named(name)

    @classmethod
    def from_url(cls, url: str, *, clock: Callable[[], float] = time.time) -> MemoryBackend:
        """Open ``memory://<name>``; raise ConfigError for any other URL."""
        if not url.startswith(SCHEME):
            raise ConfigError(f"not a memory:// URL: {url!r}")
        return cls(url[len(SCHEME) :].rstrip("/"), clock=clock)

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        check_key(key, self.url)
        check_range(key, start, end, self.url)
        return self._get(key).data[start:end]

    async def write(self, key: str, data: bytes) -> None:
        check_key(key, self.url)
        # bytes() freezes a bytearray/memoryview the caller might mutate afterwards.
        obj = _Object(bytes(data), self._clock())
        with self._store.lock:
            self._store.objects[key] = obj

    async def create(self, key: str, data: bytes) -> str:
        check_key(key, self.url)
        obj = _Object(bytes(data), self._clock())
        with self._store.lock:
            if key in self._store.objects:
                raise ConditionFailedError("object already exists", where=f"{self.url}/{key}")
            self._store.objects[key] = obj
        return content_version(obj.data)

    async def read_versioned(self, key: str) -> Versioned:
        check_key(key, self.url)
        data = self._get(key).data
        return Versioned(data, content_version(data))

    async def replace(self, key: str, data: bytes, *, version: str) -> str:
        check_key(key, self.url)
        obj = _Object(bytes(data), self._clock())
        with self._store.lock:
            current = self._store.objects.get(key)
            if current is None or content_version(current.data) != version:
                raise ConditionFailedError(
                    "object is not at the expected version", where=f"{self.url}/{key}"
                )
            self._store.objects[key] = obj
        return content_version(obj.data)

    async def size(self, key: str) -> int:
        check_key(key, self.url)
        return len(self._get(key).data)

    async def exists(self, key: str) -> bool:
        check_key(key, self.url)
        with self._store.lock:
            return key in self._store.objects

    async def delete(self, key: str) -> None:
        check_key(key, self.url)
        with self._store.lock:
            self._store.objects.pop(key, None)

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        check_prefix(prefix, self.url)
        with self._store.lock:
            items = [(k, o) for k, o in self._store.objects.items() if k.startswith(prefix)]
        return [ObjectInfo(k, len(o.data), o.mtime) for k, o in sorted(items, key=_by_key)]

    def _get(self, key: str) -> _Object:
        with self._store.lock:
            obj = self._store.objects.get(key)
        if obj is None:
            raise ObjectNotFoundError("no such object", where=f"{self.url}/{key}")
        return obj
