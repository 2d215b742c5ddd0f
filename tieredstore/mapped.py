"""A local file read through the page cache without a copy: :func:`mapped_view`."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

__all__ = ["mapped_view"]


def mapped_view(path: Path) -> memoryview:
    """The whole file at ``path`` as a read-only view, mapped (an empty file: an empty
    view, as ``mmap`` refuses a length of 0).

    The mapping lasts as long as a view of it does and is never closed explicitly: a
    view still held by an error's traceback would make closing it raise ``BufferError``
    over that error. The file must not shrink while a view is held (a mapped page past
    its end is a ``SIGBUS``): map only finished files that nothing else writes, such as
    the sidecar's own spool files. Raises ``OSError`` as ``open`` does.
    """
    with path.open("rb", buffering=0) as f:
        length = os.fstat(f.fileno()).st_size
        if length == 0:
            return memoryview(b"")
        return memoryview(mmap.mmap(f.fileno(), length, access=mmap.ACCESS_READ))
