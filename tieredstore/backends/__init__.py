"""Storage backends: one async contract (:class:`Backend`), several implementations.

Callers open a backend with :func:`open_backend` and use only the :class:`Backend`
methods; :mod:`tieredstore.backends.base` states the contract every backend meets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tieredstore.backends.base import Backend, ObjectInfo
from tieredstore.backends.factory import backend_options, open_backend, open_cold
from tieredstore.backends.fsspec_generic import FsspecBackend
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.backends.options import BackendOptions
from tieredstore.backends.posix import PosixBackend
from tieredstore.backends.retry import OnRetry, RetryingBackend, RetryPolicy

if TYPE_CHECKING:
    from tieredstore.backends.s3 import S3Backend

__all__ = [
    "Backend",
    "BackendOptions",
    "FsspecBackend",
    "MemoryBackend",
    "ObjectInfo",
    "OnRetry",
    "PosixBackend",
    "RetryPolicy",
    "RetryingBackend",
    "S3Backend",
    "backend_options",
    "open_backend",
    "open_cold",
    "reset_memory_stores",
]


def __getattr__(name: str) -> Any:
    """``S3Backend`` on first use: s3fs, aiobotocore and aiohttp take ~0.2 s to import,
    which a POSIX sidecar, a Spark Python worker or a command that never opens S3 should
    not pay."""
    if name == "S3Backend":
        from tieredstore.backends.s3 import S3Backend

        return S3Backend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
