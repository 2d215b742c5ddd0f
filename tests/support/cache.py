"""The test support's cache on this machine: what the first run builds and later runs
reuse (RocketMQ's jars and the compiled tool, the broker plugin, the Spark JVMs' class
archive), under ``$TIEREDSTORE_CACHE`` or ``~/.cache/tieredstore``, and its one lock."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["cache_lock", "cache_root"]


def cache_root() -> Path:
    """``$TIEREDSTORE_CACHE``, or ``~/.cache/tieredstore``."""
    env = os.environ.get("TIEREDSTORE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "tieredstore"


@contextlib.contextmanager
def cache_lock() -> Iterator[None]:
    """Hold an exclusive ``flock`` on the cache (``cache_root()/.lock``).

    The suite's workers prepare the same cache entries (RocketMQ's jars, the compiled
    tool, the plugin jar, the class archive) at once: without the lock, one worker's
    ``rmtree`` of a stale entry can pull the jars from under another worker's running
    broker, two ``mvn`` processes write one local repository, and two JVMs write one
    archive. One lock for all entries; released when the process dies."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
