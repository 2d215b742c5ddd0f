"""Run ``tieredstore`` as a real process that SIGSTOPs itself at a chosen call.

``python -m tests.support.sidecar.pausing POINT N -- <tieredstore arguments>``

The sidecar's cold store (the backend under its retry wrapper, as the runtime opens it)
is wrapped in :class:`SelfStop`, which freezes the whole process with SIGSTOP at the
``N``-th call matching ``POINT``; the test thaws it with SIGCONT.

This module is core-layer test support, so it does not import the CLI as a library: it
replaces the core's ``open_cold`` (``tieredstore.backends``, where the runtime imports it
from) before anything imports the sidecar's runtime, which binds the name when it is first
imported, then runs the program as ``python -m tieredstore.cli`` would (``runpy``). When
the replacement cannot take (the runtime was already imported) or the sidecar never
opened its cold store through it, the process fails loudly (a message on stderr, exit
status :data:`NOT_WRAPPED`) rather than run a sidecar that never freezes. Points:

* ``upload``: before a COMMIT_LOG object's write goes out (after its lease check);
* ``create``: before a manifest create goes out (after the last lease check);
* ``retried-create``: a manifest create fails retryably once, and the retry (which the
  retry wrapper makes without any lease check) freezes before it goes out;
* ``after-create``: after a manifest create landed, before the catalogue commit.

Nothing is mocked: every call still goes to the real backend; only the moment moves.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
from collections.abc import AsyncIterable, Callable
from pathlib import Path
from typing import Any

import tieredstore.backends
import tieredstore.backends.factory
from tieredstore.backends.base import Backend
from tieredstore.backends.forwarding import ForwardingBackend
from tieredstore.errors import BackendUnavailableError

POINTS = ("upload", "create", "retried-create", "after-create")
#: The module that opens the sidecar's cold store, binding ``open_cold`` at import.
RUNTIME = "tieredstore.cli.sidecar.runtime"
#: Exit status when the SelfStop could not be put under the sidecar.
NOT_WRAPPED = 86


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


def _fail(why: str) -> None:
    print(f"pausing_sidecar: {why}", file=sys.stderr, flush=True)
    sys.exit(NOT_WRAPPED)


def main() -> None:
    point, nth, sep, *args = sys.argv[1:]
    assert point in POINTS and sep == "--", sys.argv
    if RUNTIME in sys.modules:
        _fail(f"{RUNTIME} was imported before open_cold was replaced: it would not freeze")
    opened: Callable[..., Backend] = tieredstore.backends.factory.open_cold
    wrapped: list[SelfStop] = []

    def open_cold(*a: Any, **kw: Any) -> Backend:
        wrapped.append(SelfStop(opened(*a, **kw), point, int(nth)))
        return wrapped[-1]

    # Wherever the runtime imports it from, it binds this one when it is first imported.
    tieredstore.backends.open_cold = open_cold
    tieredstore.backends.factory.open_cold = open_cold
    sys.argv = ["tieredstore", *args]
    code: str | int | None = 0
    try:
        runpy.run_module("tieredstore.cli", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    if not wrapped:
        _fail(f"the sidecar never opened its cold store through open_cold (exit {code})")
    sys.exit(code)


if __name__ == "__main__":
    main()
