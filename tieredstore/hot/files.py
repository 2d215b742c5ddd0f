"""The files of one of the broker's rolling address spaces: the commitlog, or one queue's
consume queue. Each file is named by its global base offset (20 digits); a listing is a
snapshot of one directory, sorted by base offset.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tieredstore.errors import StoreNotFoundError

__all__ = ["MappedFile", "MappedFileList"]

_FILE_NAME = re.compile(r"^\d{20}$")


@dataclass(frozen=True, slots=True)
class MappedFile:
    """One store file: its global base offset (its name), path and size."""

    base: int
    path: Path
    size: int

    @property
    def end(self) -> int:
        return self.base + self.size


class MappedFileList:
    """The files of one rolling address space (the commitlog, or one queue's CQ).

    A snapshot: built from one directory listing, sorted by base offset.
    """

    def __init__(self, files: Sequence[MappedFile]) -> None:
        self.files = list(files)

    @classmethod
    def scan(cls, directory: Path) -> MappedFileList:
        """List the 20-digit files of ``directory``; a missing directory is empty."""
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            return cls([])
        except OSError as exc:
            raise StoreNotFoundError(f"cannot list: {exc.strerror}", where=str(directory)) from exc
        files = []
        for entry in entries:
            if _FILE_NAME.match(entry.name) and entry.is_file():
                try:
                    size = entry.stat().st_size
                except FileNotFoundError:  # deleted by the broker while we listed
                    continue
                files.append(MappedFile(int(entry.name), Path(entry.path), size))
        files.sort(key=lambda f: f.base)
        return cls(files)

    def __bool__(self) -> bool:
        return bool(self.files)

    @property
    def min_offset(self) -> int:
        return self.files[0].base if self.files else 0

    def find(self, offset: int) -> MappedFile | None:
        """Return the file whose range holds ``offset``, or None if none does."""
        lo, hi = 0, len(self.files)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.files[mid].base <= offset:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return None
        f = self.files[lo - 1]
        return f if offset < f.end else None
