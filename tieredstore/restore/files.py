"""Preallocated store files, written with ``pwrite`` through a small descriptor cache.

A broker maps every commitlog and consume-queue file at its full configured size and
refuses a file of any other length, so each file is created at that size up front
(``ftruncate``: sparse, reads as zeros past the data).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Final

from tieredstore.errors import StoreError

__all__ = ["FileCache", "file_name", "fsync_dir"]

_DEFAULT_OPEN: Final = 64


def file_name(base: int) -> str:
    """A store file's name: its first byte's global offset, 20 digits."""
    return f"{base:020d}"


def fsync_dir(path: Path) -> None:
    """Flush a directory entry (new or renamed files) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: a temporary file beside it,
    fsynced, renamed over ``path``, then the directory fsynced. Raises OSError."""
    temp = path.with_name(path.name + ".tmp")
    with temp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    fsync_dir(path.parent)


class FileCache:
    """Open descriptors of fixed-size store files, least recently used closed first.

    :meth:`pwrite` creates a missing file (and its directory) at ``size`` bytes. Files
    written since the last :meth:`sync` are fsynced by it, so a restore can commit its
    journal only after its data is durable.
    """

    def __init__(self, *, max_open: int = _DEFAULT_OPEN) -> None:
        self._fds: OrderedDict[Path, int] = OrderedDict()
        self._dirty: set[Path] = set()
        self._max_open = max_open

    def _fd(self, path: Path, size: int) -> int:
        fd = self._fds.get(path)
        if fd is not None:
            self._fds.move_to_end(path)
            return fd
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
        except OSError as exc:
            raise StoreError(f"cannot create store file: {exc.strerror}", where=str(path)) from exc
        self._fds[path] = fd
        while len(self._fds) > self._max_open:
            _, old_fd = self._fds.popitem(last=False)
            os.close(old_fd)  # still dirty: sync() reopens it
        return fd

    def pwrite(self, path: Path, size: int, data: bytes | bytearray | memoryview, pos: int) -> None:
        """Write ``data`` at ``pos`` of the ``size``-byte file ``path``."""
        if pos < 0 or pos + len(data) > size:
            raise ValueError(f"write of {len(data)} bytes at {pos} overruns {path} ({size})")
        fd = self._fd(path, size)
        view = memoryview(data)
        try:
            while view:
                n = os.pwrite(fd, view, pos)
                view, pos = view[n:], pos + n
        except OSError as exc:
            raise StoreError(f"cannot write: {exc.strerror}", where=str(path)) from exc
        self._dirty.add(path)

    def sync(self) -> None:
        """fsync every file written since the last sync (reopening ones closed since)."""
        for path in sorted(self._dirty):
            fd = self._fds.get(path)
            if fd is not None:
                os.fsync(fd)
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._dirty.clear()

    def close(self) -> None:
        """Sync and close every descriptor; safe to call twice."""
        self.sync()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
