"""Writing consume queues: 20-byte units at ``queue offset * 20`` of each queue's files.

A queue's files are ``consumequeue/<topic>/<queueId>/<base>``, each ``file_size`` bytes
(a multiple of 20), unit *q* in the file named ``floor(q*20/file_size)*file_size``.
A queue that starts at offset ``S > 0`` gets, as the broker writes it, filler units
(commitLogOffset 0, size 0x7FFFFFFF, tagsCode 0) from its first file's base up to ``S``;
no file below that one exists, so a broker derives min offset ``S`` and max offset "one
past the last unit" from the files alone.
"""

from __future__ import annotations

import os
from pathlib import Path

from tieredstore.formats.consumequeue import (
    CQ_UNIT_SIZE,
    Units,
    encode_units,
    make_units,
)
from tieredstore.formats.consumequeue import FILLER_SIZE as _FILLER_SIZE
from tieredstore.restore.files import FileCache, file_name

__all__ = ["ConsumeQueueWriter"]

_FILLER = encode_units(make_units([0], [_FILLER_SIZE], [0]))


class ConsumeQueueWriter:
    """Appends units to the consume queues under ``root`` (``<store>/consumequeue``)."""

    def __init__(self, root: Path, file_size: int, *, files: FileCache) -> None:
        if file_size <= 0 or file_size % CQ_UNIT_SIZE:
            raise ValueError(f"consume-queue file size {file_size} is not a multiple of 20")
        self.root = root
        self.file_size = file_size
        self._files = files

    def _dir(self, topic: str, queue_id: int) -> Path:
        return self.root / topic / str(queue_id)

    def _base(self, byte_offset: int) -> int:
        return byte_offset - byte_offset % self.file_size

    def begin(self, topic: str, queue_id: int, start: int) -> None:
        """Start a queue at offset ``start``: create its first file, fillers below ``start``."""
        pos = start * CQ_UNIT_SIZE
        base = self._base(pos)
        fillers = _FILLER * ((pos - base) // CQ_UNIT_SIZE)  # b"" still creates the file
        path = self._dir(topic, queue_id) / file_name(base)
        self._files.pwrite(path, self.file_size, fillers, 0)

    def append(self, topic: str, queue_id: int, first: int, units: Units) -> None:
        """Write ``units`` for queue offsets ``[first, first + len(units))``."""
        data = memoryview(encode_units(units))
        pos = first * CQ_UNIT_SIZE
        directory = self._dir(topic, queue_id)
        while data:
            base = self._base(pos)
            n = min(len(data), base + self.file_size - pos)
            self._files.pwrite(directory / file_name(base), self.file_size, data[:n], pos - base)
            data, pos = data[n:], pos + n

    def discard_from(self, topic: str, queue_id: int, next_offset: int) -> None:
        """Resume: zero units at and after ``next_offset``, delete later files."""
        pos = next_offset * CQ_UNIT_SIZE
        keep = self._base(pos)
        directory = self._dir(topic, queue_id)
        if not directory.is_dir():
            return
        for entry in os.scandir(directory):
            if entry.name.isdigit() and int(entry.name) > keep:
                os.unlink(entry.path)
        path = directory / file_name(keep)
        if path.exists():
            with path.open("r+b") as f:
                f.truncate(pos - keep)
                f.truncate(self.file_size)

    def discard_queue(self, topic: str, queue_id: int) -> None:
        """Resume: remove a queue the journal never recorded (it is restored afresh)."""
        directory = self._dir(topic, queue_id)
        if directory.is_dir():
            for entry in os.scandir(directory):
                os.unlink(entry.path)
