"""``tieredstore check-cold``: try each operation the sidecar needs on the cold store.

Run it before the first ``run`` (and after changing a bucket policy or rotating keys):
it lists, conditionally creates (``If-None-Match: *``, twice: the second must be
refused), reads back and deletes one key of its own under the store's prefix
(``_check-cold/<random>``), and prints one line per operation::

    list                ok      s3://bkt/tiered/_check-cold/
    conditional create  ok      s3://bkt/tiered/_check-cold/5f0c…  (a second create was refused)
    get                 ok      s3://bkt/tiered/_check-cold/5f0c…
    delete              FAILED  cold store s3://bkt/tiered: access denied: delete of …

Every operation is tried whatever the others did, so one run shows the whole policy (a
get after a refused create reads a key that is not there: a 404 there means the read
was allowed). Exit 0 when all pass, 3 when any is refused or fails (a configuration
fault, like every command's :class:`~tieredstore.errors.ColdStoreAccessError`). A store
that does not answer at all stops at the first operation with the one message of
:class:`~tieredstore.errors.ColdStoreUnreachableError` (exit 3). Only the cold store is
used: no broker store, no state directory; ``--cluster``/``--broker`` are not needed.
A key a refused delete leaves behind is tiny and ``gc`` never needs it; delete it by
hand or let a lifecycle rule do it.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tieredstore.backends import open_cold
from tieredstore.backends.base import Backend
from tieredstore.cli.commands._settings import add_settings_arguments, settings_from_args
from tieredstore.errors import (
    ColdStoreUnreachableError,
    ConditionFailedError,
    ObjectNotFoundError,
    TieredStoreError,
)
from tieredstore.settings.loader import Settings

__all__ = ["PROBE_PREFIX", "Check", "add_arguments", "check_cold", "run"]

#: Where the probe key lives, under the store's prefix.
PROBE_PREFIX = "_check-cold/"

_EXIT_OK = 0
_EXIT_REFUSED = 3


@dataclass(frozen=True, slots=True)
class Check:
    """One operation tried: its name, whether it passed, and what to print beside it."""

    op: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{self.op:<19} {'ok' if self.ok else 'FAILED':<7} {self.detail}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings_arguments(p, store=False)


async def check_cold(backend: Backend, url: str) -> list[Check]:
    """Try list, conditional create (twice), get and delete of a key of our own on
    ``backend`` (named ``url`` in the lines). A store that does not answer raises
    ColdStoreUnreachableError at once; any other error is that operation's FAILED line."""
    key = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
    shown = f"{url.rstrip('/')}/{key}"
    payload = b"tieredstore check-cold probe\n"
    checks: list[Check] = []

    async def attempt(op: str, call: Callable[[], Awaitable[str]]) -> None:
        try:
            checks.append(Check(op, True, await call()))
        except ColdStoreUnreachableError:
            raise
        except TieredStoreError as exc:
            checks.append(Check(op, False, str(exc)))

    async def listing() -> str:
        await backend.list(PROBE_PREFIX)
        return f"{url.rstrip('/')}/{PROBE_PREFIX}"

    async def create() -> str:
        await backend.create(key, payload)
        try:
            await backend.create(key, payload)
        except ConditionFailedError:
            return f"{shown}  (a second create was refused, as it must be)"
        raise ConditionFailedError(
            "a second conditional create (If-None-Match: *) of the same key succeeded: this "
            "store ignores the condition, and two sidecars could both take one lease",
            where=shown,
        )

    async def get() -> str:
        try:
            data = await backend.read(key)
        except ObjectNotFoundError:
            return f"{shown}  (not there, as the create failed: reading is allowed)"
        if data != payload:
            raise ConditionFailedError("read back other bytes than were written", where=shown)
        return shown

    async def delete() -> str:
        await backend.delete(key)
        return shown

    for op, call in (("list", listing), ("conditional create", create), ("get", get),
                     ("delete", delete)):  # fmt: skip
        await attempt(op, call)
    return checks


async def _check(settings: Settings) -> list[Check]:
    async with open_cold(settings.cold) as backend:
        return await check_cold(backend, settings.cold_url_redacted)


def run(args: argparse.Namespace) -> int:
    # Only the cold store: a placeholder broker identity, as nothing is read by it.
    extra: dict[str, object] = {"store.path": ".", "state.dir": "."}
    extra.update({k: v for k, v in (("cold.cluster", "check"), ("cold.broker", "check"))
                  if getattr(args, k.split(".")[1]) is None})  # fmt: skip
    settings = settings_from_args(args, extra=extra, check=False)
    checks = asyncio.run(_check(settings))
    for check in checks:
        print(check.line())
    return _EXIT_OK if all(c.ok for c in checks) else _EXIT_REFUSED
