"""Test helper: what of a file is dirty in the page cache (not yet on disk), via Linux's
``cachestat(2)`` (Linux 6.5+, syscall 451 on x86_64 and arm64).

A page that is neither dirty nor under writeback is on disk (or was never written): it
survives a power cut. The durability tests use this to check, at a frozen instant, that
nothing tiered could still be lost.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PageCacheStat", "cachestat", "cachestat_available"]

_SYSCALL_CACHESTAT = 451
_LIBC = ctypes.CDLL(None, use_errno=True)


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")
    ]


@dataclass(frozen=True, slots=True)
class PageCacheStat:
    """Pages of a range: cached, dirty (not on disk), under writeback (not yet on disk)."""

    cached: int
    dirty: int
    writeback: int

    @property
    def on_disk(self) -> bool:
        return self.dirty == 0 and self.writeback == 0


def cachestat(path: Path, offset: int, length: int) -> PageCacheStat:
    """The page-cache state of ``path`` bytes ``[offset, offset + length)``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        rng, st = _Range(offset, length), _Stat()
        if _LIBC.syscall(_SYSCALL_CACHESTAT, fd, ctypes.byref(rng), ctypes.byref(st), 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(path))
        return PageCacheStat(st.nr_cache, st.nr_dirty, st.nr_writeback)
    finally:
        os.close(fd)


def cachestat_available(probe: Path) -> bool:
    """Whether this kernel answers ``cachestat`` for files like ``probe``."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        return False
    try:
        cachestat(probe, 0, 1)
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
            return False
        raise
    return True
