"""The C allocator's large-block rule for the long-running sidecar.

glibc serves a block of at least ``M_MMAP_THRESHOLD`` bytes with its own ``mmap`` and
returns it to the kernel on ``free``. By default that threshold is **dynamic**: freeing
such a block raises it to the block's size (up to 32 MiB), so the next blocks of that
size come from the heap instead, where a freed block stays resident while anything above
it is in use. The sidecar allocates such blocks all the time (a batch object of up to
16 MiB and its slices, the pass's windows and arrays, on several threads with their own
heaps): with the dynamic rule its peak RSS grew by about 10 MiB with each batch object
of a catch-up (a run of 1,024 small queues peaked at 240–310 MiB, against 200 MiB with a
fixed threshold).

:func:`fix_mmap_threshold` pins the threshold at :data:`MMAP_THRESHOLD` (which also turns
the dynamic rule off), so every block that large goes back to the kernel when freed.
Elsewhere (not glibc) it does nothing.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Final

__all__ = ["MMAP_THRESHOLD", "fix_mmap_threshold"]

log = logging.getLogger(__name__)

#: Blocks of at least this many bytes are mapped and unmapped on their own.
MMAP_THRESHOLD: Final = 1 << 20
_M_MMAP_THRESHOLD: Final = -3  # glibc's malloc.h


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Pin glibc's mmap threshold at ``threshold`` bytes for this process; whether it
    was set (False where the C library has no ``mallopt``, or refused the value)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_MMAP_THRESHOLD, threshold))
    if not done:
        log.debug("mallopt(M_MMAP_THRESHOLD, %d) refused; the allocator keeps its rule", threshold)
    return done
