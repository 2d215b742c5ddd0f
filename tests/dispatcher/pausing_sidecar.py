"""Run ``tieredstore`` as a real process that SIGSTOPs itself at a chosen call.

``python -m tests.dispatcher.pausing_sidecar POINT N -- <tieredstore arguments>``

The sidecar's cold store (the backend under its retry wrapper, as the runtime opens it)
is wrapped in :class:`SelfStop`, which freezes the whole process with SIGSTOP at the
``N``-th call matching ``POINT``; the test thaws it with SIGCONT. Points:

* ``upload``: before a COMMIT_LOG object's write goes out (after its lease check);
* ``create``: before a manifest create goes out (after the last lease check);
* ``retried-create``: a manifest create fails retryably once, and the retry (which the
  retry wrapper makes without any lease check) freezes before it goes out;
* ``after-create``: after a manifest create landed, before the catalogue commit.

Nothing is mocked: every call still goes to the real backend; only the moment moves.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterable, Callable
from pathlib import Path

from tieredstore.backends.base import Backend
from tieredstore.backends.forwarding import ForwardingBackend
from tieredstore.errors import BackendUnavailableError

POINTS = ("upload", "create", "retried-create", "after-create")


def _freeze() -> None:
    os.kill(os.getpid(), signal.SIGSTOP)


class SelfStop(ForwardingBackend):
    """``inner``, freezing the process at the ``nth`` call matching ``point``."""

    def __init__(self, inner: Backend, point: str, nth: int) -> None:
        super().__init__(inner)
        self.point = point
        self.left = nth
        self.armed = ""  # retried-create: the key whose next create freezes

    def _due(self, point: str, key: str, kind: str) -> bool:
        if self.point != point or f"/{kind}/" not in key or self.left <= 0:
            return False
        self.left -= 1
        return self.left == 0

    async def write_file(
        self, key: str, path: Path, *, chunk_bytes: int, check: Callable[[], None]
    ) -> int:
        if self._due("upload", key, "COMMIT_LOG"):
            _freeze()
        return await self.inner.write_file(key, path, chunk_bytes=chunk_bytes, check=check)

    async def write_chunks(self, key: str, chunks: AsyncIterable[bytes]) -> int:
        if self._due("upload", key, "COMMIT_LOG"):
            _freeze()
        return await self.inner.write_chunks(key, chunks)

    async def create(self, key: str, data: bytes) -> str:
        if self.armed == key:
            self.armed = ""
            _freeze()
        elif self._due("retried-create", key, "MANIFEST"):
            self.armed = key
            raise BackendUnavailableError("injected: the create failed", where=key)
        elif self._due("create", key, "MANIFEST"):
            _freeze()
        version = await self.inner.create(key, data)
        if self._due("after-create", key, "MANIFEST"):
            _freeze()
        return version


def main() -> None:
    point, nth, sep, *args = sys.argv[1:]
    assert point in POINTS and sep == "--", sys.argv
    import tieredstore.cli.sidecar.runtime as runtime
    from tieredstore.cli.main import main as cli_main

    opened = vars(runtime)["open_cold"]

    def open_cold(*a: object, **kw: object) -> Backend:
        return SelfStop(opened(*a, **kw), point, int(nth))

    vars(runtime)["open_cold"] = open_cold  # the runtime opens the cold store through it
    sys.exit(cli_main(args))


if __name__ == "__main__":
    main()
