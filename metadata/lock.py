"""The catalogue's single-writer lock: ``fcntl.flock`` on ``catalogue.lock``.

SQLite alone would let two sidecars interleave commits to one catalogue; each would then
believe its own view of ``cold_commit``. An exclusive advisory lock taken for the life of
a writer makes the second one fail at once with the first one's pid. The kernel drops the
lock when its holder dies (``kill -9`` included), so a stale lock never needs cleaning.
The lock file is never deleted: removing it would let two processes lock two different
inodes under one name.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from tieredstore.errors import CatalogueBusyError, CatalogueError

__all__ = ["WriterLock"]


class WriterLock:
    """An exclusive, non-blocking ``flock`` on a file that records the holder's pid."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, path: Path, *, what: str) -> WriterLock:
        """Take the lock or fail at once.

        ``what`` names the protected resource in the error.

        Raises:
            CatalogueBusyError: another process (or another open in this process)
                holds it; the message names the holder's pid.
            CatalogueError: the lock file cannot be opened.
        """
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise CatalogueError(f"cannot open lock file: {exc}", where=str(path)) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            holder = _read_pid(fd)
            os.close(fd)
            raise CatalogueBusyError(
                f"{what} is in use by another process (pid {holder})", where=str(path)
            ) from exc
        except OSError as exc:
            os.close(fd)
            raise CatalogueError(f"cannot lock: {exc}", where=str(path)) from exc
        pid = f"{os.getpid()}\n".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, pid, 0)
        return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock. Safe to call twice."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        # Closing the descriptor releases the flock; the pid text stays as a hint only.
        os.close(fd)


def _read_pid(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"
