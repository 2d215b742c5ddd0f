"""Claiming the output directory: never a running broker's store, never someone's data.

Checked in this order, each refusal one clear line:

1. ``<out>/lock`` is locked: a broker (or another restore) runs there. A broker holds a
   POSIX lock on byte 0 of ``lock`` while it runs; the restore takes the same lock for
   as long as it writes, so no broker can start on a half-written store and no second
   restore can write beside it.
2. ``<out>/abort`` exists: a broker runs there or crashed there (it removes the file
   only on a clean shutdown).
3. The directory holds anything but a restore journal (and the ``lock`` file): refused.
   With a journal: ``complete`` is refused (already restored); ``running`` with other
   parameters is refused; ``running`` with the same parameters is resumed.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tieredstore.errors import StoreError, StoreInUseError
from tieredstore.restore.journal import JOURNAL_NAME, Journal, JournalState, RestoreParams

__all__ = ["Claim", "claim_output"]

_LOCK: Final = "lock"
_ABORT: Final = "abort"


@dataclass(slots=True)
class Claim:
    """The locked output directory and the journal to resume from (None: fresh)."""

    root: Path
    lock_fd: int
    resume: Journal | None

    @property
    def journal_path(self) -> Path:
        return self.root / JOURNAL_NAME

    def release(self) -> None:
        """Drop the lock (idempotent); the ``lock`` file stays, as a broker leaves it."""
        if self.lock_fd >= 0:
            os.close(self.lock_fd)  # closing the descriptor releases the POSIX lock
            self.lock_fd = -1


def _lock(root: Path, *, create: bool) -> int:
    """Lock byte 0 of ``<root>/lock``; -1 when it does not exist and ``create`` is false."""
    path = root / _LOCK
    if not create and not path.exists():
        return -1
    try:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
    except OSError as exc:
        raise StoreError(f"cannot open the lock file: {exc.strerror}", where=str(path)) from exc
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    except OSError as exc:
        os.close(fd)
        raise StoreInUseError(
            "a broker (or another restore) is running on this store: its lock is held",
            where=str(path),
        ) from exc
    return fd


def _journal(root: Path, params: RestoreParams) -> Journal | None:
    names = set(os.listdir(root)) - {_LOCK, JOURNAL_NAME + ".tmp"}
    if JOURNAL_NAME not in names:
        if names:
            raise StoreError(
                f"output directory is not empty ({len(names)} entries, e.g. "
                f"{sorted(names)[0]!r}); restore writes only into an empty directory",
                where=str(root),
            )
        return None
    journal = Journal.load(root / JOURNAL_NAME)
    if journal.state is JournalState.COMPLETE:
        raise StoreError(
            "output directory already holds a complete restore (check it with "
            "restore --check, or restore into an empty directory)",
            where=str(root),
        )
    if journal.params != params:
        diff = next(k for k, v in journal.params.to_json().items() if params.to_json()[k] != v)
        raise StoreError(
            f"output directory holds an unfinished restore with other parameters ({diff}: "
            f"{journal.params.to_json()[diff]!r}); rerun it with the same ones to resume",
            where=str(root),
        )
    return journal


def claim_output(root: Path, params: RestoreParams) -> Claim:
    """Create/lock ``root`` for a restore with ``params`` (see the module docstring).

    Raises:
        StoreInUseError: a broker or another restore holds the lock, or ``abort`` exists.
        StoreError: the directory is not empty (and not a matching unfinished restore).
    """
    if root.exists() and not root.is_dir():
        raise StoreError("output path exists and is not a directory", where=str(root))
    if (root / _ABORT).exists():
        raise StoreInUseError(
            "a broker is running on this store or crashed on it (its abort file exists)",
            where=str(root / _ABORT),
        )
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot create output directory: {exc.strerror}", where=str(root)
        ) from exc
    # An existing lock is tested before anything else; a new one is created only once
    # the directory is known to be ours (empty, or our unfinished restore).
    fd = _lock(root, create=False)
    try:
        journal = _journal(root, params)
        if fd < 0:
            fd = _lock(root, create=True)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    return Claim(root, fd, journal)
