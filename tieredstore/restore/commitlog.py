"""Writing a broker commitlog: records rolled into fixed-size files with the BLANK filler.

Placement follows the broker's append rule: a record of ``size`` bytes goes at the
current position only if ``size + 8`` bytes remain in the file; otherwise an 8-byte
filler (``int remaining``, ``int BLANK_MAGIC_CODE``) ends the file and the record starts
the next one. Each record's physicalOffset field (bytes [28, 36)) is rewritten to where
it lands. Files are created at their full size (zeros past the data), named by their
base offset.

The restored commitlog starts at ``base`` (a multiple of the file size, not 0): every
real consume-queue unit then points at or above the commitlog's first offset, while the
filler units that pad a queue starting above offset 0 point at 0, below it. That is
what lets a broker that boots on the store compute such a queue's min offset right (its
``ConsumeQueue#correctMinOffset`` searches for the first unit at or above the commitlog
min offset, and fillers at 0 would match a commitlog that starts at 0).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tieredstore.errors import StoreError
from tieredstore.formats.record import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    PHYSICAL_OFFSET_AT,
)
from tieredstore.formats.vector import scatter_be_i64
from tieredstore.restore.files import FileCache, file_name

__all__ = ["CommitLogWriter"]

I64 = npt.NDArray[np.int64]
_BLANK = struct.Struct(">ii")


class CommitLogWriter:
    """Appends batches of records to ``directory`` from global offset ``position``.

    ``position`` is where the next record may go (the commitlog's first offset on a
    fresh restore, the journaled end on a resumed one); everything at or after it in
    existing files is discarded first (see :meth:`discard_from`).
    """

    def __init__(self, directory: Path, file_size: int, *, position: int, files: FileCache) -> None:
        if file_size <= END_FILE_MIN_BLANK_LENGTH or position < 0:
            raise ValueError(f"bad commitlog geometry: file size {file_size}, position {position}")
        self.directory = directory
        self.file_size = file_size
        self.position = position
        self._files = files
        directory.mkdir(parents=True, exist_ok=True)
        self.discard_from(position)

    def _path(self, base: int) -> Path:
        return self.directory / file_name(base)

    def _base(self, offset: int) -> int:
        return offset - offset % self.file_size

    def discard_from(self, position: int) -> None:
        """Zero the file holding ``position`` from there on and delete later files."""
        keep = self._base(position)
        for entry in os.scandir(self.directory):
            if entry.name.isdigit() and int(entry.name) > keep:
                os.unlink(entry.path)
        path = self._path(keep)
        if path.exists():
            with path.open("r+b") as f:
                f.truncate(position - keep)
                f.truncate(self.file_size)

    def append(self, batch: bytearray, sizes: I64) -> I64:
        """Place ``batch`` (records back to back, ``sizes`` bytes each); return where each
        record landed. The physicalOffset fields in ``batch`` are rewritten in place.

        Raises StoreError for a record too large for any file (``size + 8 > file size``).
        """
        placed = self._place(sizes)
        arr = np.frombuffer(batch, dtype=np.uint8)
        starts: I64 = np.concatenate((np.zeros(1, np.int64), np.cumsum(sizes)[:-1]))
        scatter_be_i64(arr, starts + PHYSICAL_OFFSET_AT, placed)
        self._write(batch, starts, sizes, placed)
        return placed

    def _place(self, sizes: I64) -> I64:
        """Compute each record's global offset; advance :attr:`position` past fillers."""
        placed = np.empty(len(sizes), dtype=np.int64)
        rel: I64 = np.concatenate((np.zeros(1, np.int64), np.cumsum(sizes)))
        pos, i, n = self.position, 0, len(sizes)
        while i < n:
            room = self.file_size - pos % self.file_size
            # Record j fits after records i..j-1 iff its end plus the filler fits.
            needs = rel[i + 1 : n + 1] - rel[i] + END_FILE_MIN_BLANK_LENGTH
            k = int(np.searchsorted(needs, room, side="right"))
            if k == 0:
                if int(sizes[i]) + END_FILE_MIN_BLANK_LENGTH > self.file_size:
                    raise StoreError(
                        f"a record of {int(sizes[i])} bytes does not fit a commitlog file of "
                        f"{self.file_size} bytes; use the broker's (larger) file size",
                        where=str(self.directory),
                    )
                self._blank(pos, room)
                pos += room
                continue
            placed[i : i + k] = pos + rel[i : i + k] - rel[i]
            pos += int(rel[i + k] - rel[i])
            i += k
        return placed

    def _blank(self, pos: int, room: int) -> None:
        base = self._base(pos)
        self._files.pwrite(
            self._path(base), self.file_size, _BLANK.pack(room, BLANK_MAGIC_CODE), pos - base
        )

    def _write(self, batch: bytearray, starts: I64, sizes: I64, placed: I64) -> None:
        """Write runs of records that share a file with one pwrite each."""
        view = memoryview(batch)
        n = len(sizes)
        i = 0
        while i < n:
            base = self._base(int(placed[i]))
            # Records of one file are contiguous in the batch and in the file.
            j = int(np.searchsorted(placed, base + self.file_size, side="left"))
            lo, hi = int(starts[i]), int(starts[j - 1] + sizes[j - 1])
            self._files.pwrite(self._path(base), self.file_size, view[lo:hi], int(placed[i]) - base)
            i = j
        if n:
            self.position = int(placed[-1] + sizes[-1])
