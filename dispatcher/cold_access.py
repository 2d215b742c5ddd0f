"""The cold store refusing a running sidecar: keys rotated, a policy changed, a bucket gone.

Every command stops with one line on a :class:`~tieredstore.errors.ColdStoreAccessError`;
the sidecar cannot: it watches. :class:`AccessWatchingBackend` wraps the sidecar's cold
store (outside the retries: these faults are not retried) and tells :class:`ColdAccess`
of each refusal and each success:

* the first refusal of a distinct fault — an :class:`~tieredstore.errors.AccessFault` on
  one operation (``list``, ``read``, ``stat``, ``write``, ``delete``, ``abort``) — is one
  ERROR line with the error's whole message; its repeats (every queue, every tick) log
  nothing more;
* while a fault stands, ``tieredstore_cold_access_refused{fault, op}`` is 1 (the alert
  ``TieredstoreColdStoreRefused``), ``/healthz`` names it and :meth:`ColdAccess.summary`
  is the state the sidecar's progress line and summary show;
* the standing faults are also written to ``cold-access.json`` in the state directory
  (:data:`FILE_NAME`, whole and atomically at each change; removed when the sidecar
  starts), so ``tieredstore status``, which never asks the sidecar, shows them:
  ``{"version": 1, "refusals": [{"fault", "op", "message"}, ...]}``;
* a later success clears it, with one INFO line (``cold store access restored``): a
  ``DENIED`` fault when the same operation succeeds, any other (credentials, bucket,
  region: the whole store) when any operation does. The work that failed is simply
  retried on the next tick (tiering) or run (expiry, gc), so the sidecar resumes alone.

A fault of ``delete`` (or ``abort``) alone — a bucket policy that allows writes but not
deletes — only fails expiry and gc, whose own errors say so; tiering never deletes, so it
goes on, and ``/healthz`` stays 200 with the fault in its detail
(:attr:`ColdAccess.blocks_tiering`).
"""

from __future__ import annotations

import builtins
import json
import logging
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from tieredstore.backends.base import Backend, ObjectInfo, Versioned
from tieredstore.backends.forwarding import ForwardingBackend
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.errors import AccessFault, ColdStoreAccessError, ConfigError
from tieredstore.restore.files import replace_file

__all__ = [
    "FILE_NAME",
    "AccessWatchingBackend",
    "ColdAccess",
    "Refusal",
    "load_refusals",
    "refusals_warning",
]

#: The standing faults' file in the state directory, for ``tieredstore status``.
FILE_NAME: Final = "cold-access.json"

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Operations tiering never needs: a fault of these alone leaves it running.
_MAINTENANCE_ONLY: Final = frozenset({"delete", "abort"})


@dataclass(frozen=True, slots=True)
class Refusal:
    """One standing fault: what, on which operation, and the message of its first error."""

    fault: AccessFault
    op: str
    message: str


class ColdAccess:
    """The faults the cold store currently refuses the sidecar with (module docstring)."""

    def __init__(self, metrics: Metrics, path: Path | None = None) -> None:
        """``path``: where the standing faults are kept for ``status`` (None: nowhere); a
        file left by an earlier process is removed (this one has seen nothing yet)."""
        self._metrics = metrics
        self._standing: dict[tuple[AccessFault, str], Refusal] = {}
        self._path = path
        if path is not None:
            path.unlink(missing_ok=True)

    @property
    def refusals(self) -> tuple[Refusal, ...]:
        """The standing faults, oldest first."""
        return tuple(self._standing.values())

    @property
    def blocks_tiering(self) -> bool:
        """Whether a standing fault stops tiering (any but a delete-only denial)."""
        return any(
            r.fault is not AccessFault.DENIED or r.op not in _MAINTENANCE_ONLY
            for r in self._standing.values()
        )

    def summary(self) -> str:
        """One clause for ``/healthz`` and the log: ``""`` when nothing is refused."""
        if not self._standing:
            return ""
        faults = "; ".join(r.message for r in self._standing.values())
        stops = "tiering stopped" if self.blocks_tiering else "expiry and gc stopped"
        return f"cold store refuses this sidecar ({stops}): {faults}"

    def refused(self, exc: ColdStoreAccessError) -> None:
        """Note a refusal: one ERROR line the first time this fault is seen."""
        key = (exc.fault, exc.op)
        if key in self._standing:
            return
        self._standing[key] = Refusal(exc.fault, exc.op, str(exc))
        self._metrics.cold_access_refused.labels(exc.fault.value, exc.op).set(1)
        log.error("%s", exc)
        self._save()

    def succeeded(self, op: str) -> None:
        """Note a success of ``op``: clears what it proves gone (module docstring)."""
        if not self._standing:
            return
        before = len(self._standing)
        for key, refusal in list(self._standing.items()):
            if refusal.fault is AccessFault.DENIED and refusal.op != op:
                continue
            del self._standing[key]
            self._metrics.cold_access_refused.labels(refusal.fault.value, refusal.op).set(0)
            log.info("cold store access restored: %s of %s works again", op,
                     refusal.fault.value)  # fmt: skip
        if len(self._standing) != before:
            self._save()

    def _save(self) -> None:
        if self._path is None:
            return
        doc = {"version": 1, "refusals": [
            {"fault": r.fault.value, "op": r.op, "message": r.message} for r in self.refusals
        ]}  # fmt: skip
        try:
            replace_file(self._path, json.dumps(doc, indent=1).encode())
        except OSError as exc:  # the state is still on /healthz and the metric
            log.warning("cannot record the cold store's refusals in %s: %s", self._path, exc)


def load_refusals(path: Path) -> tuple[Refusal, ...]:
    """The faults a running sidecar saved at ``path`` (none when there is no file).
    Raises ConfigError, naming the file, when it is not what :class:`ColdAccess` writes."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return ()
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"cannot read the cold store's refusals ({path}): {exc}") from exc
    try:
        return tuple(
            Refusal(AccessFault(str(r["fault"])), str(r["op"]), str(r["message"]))
            for r in doc["refusals"]
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"not a cold-access file ({path}): {exc!r}") from exc


def refusals_warning(refusals: tuple[Refusal, ...]) -> str:
    """The ``status`` warning for ``refusals`` (``""`` for none): the first one's message."""
    if not refusals:
        return ""
    more = f" (and {len(refusals) - 1} more)" if len(refusals) > 1 else ""
    return f"the cold store refuses the sidecar: {refusals[0].message}{more}"


class AccessWatchingBackend(ForwardingBackend):
    """``inner``, telling ``access`` of every refusal and success (module docstring).
    Each call is named by the S3 operation it needs, as the refusals name theirs."""

    def __init__(self, inner: Backend, access: ColdAccess) -> None:
        super().__init__(inner)
        self.access = access

    async def _watch(self, op: str, call: Awaitable[T]) -> T:
        try:
            result = await call
        except ColdStoreAccessError as exc:
            self.access.refused(exc)
            raise
        self.access.succeeded(op)
        return result

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        return await self._watch("read", self.inner.read(key, start, end))

    async def read_exact(self, key: str, start: int, end: int) -> bytes:
        return await self._watch("read", self.inner.read_exact(key, start, end))

    async def write(self, key: str, data: bytes) -> None:
        await self._watch("write", self.inner.write(key, data))

    async def write_chunks(self, key: str, chunks: AsyncIterable[bytes]) -> int:
        return await self._watch("write", self.inner.write_chunks(key, chunks))

    async def write_file(
        self, key: str, path: Path, *, chunk_bytes: int, check: Callable[[], None]
    ) -> int:
        call = self.inner.write_file(key, path, chunk_bytes=chunk_bytes, check=check)
        return await self._watch("write", call)

    async def create(self, key: str, data: bytes) -> str:
        return await self._watch("write", self.inner.create(key, data))

    async def read_versioned(self, key: str) -> Versioned:
        return await self._watch("read", self.inner.read_versioned(key))

    async def replace(self, key: str, data: bytes, *, version: str) -> str:
        return await self._watch("write", self.inner.replace(key, data, version=version))

    async def size(self, key: str) -> int:
        return await self._watch("stat", self.inner.size(key))

    async def exists(self, key: str) -> bool:
        return await self._watch("stat", self.inner.exists(key))

    async def delete(self, key: str) -> None:
        await self._watch("delete", self.inner.delete(key))

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        return await self._watch("list", self.inner.list(prefix))

    async def list_leftovers(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        return await self._watch("list", self.inner.list_leftovers(prefix))

    async def delete_leftover(self, key: str) -> None:
        await self._watch("delete", self.inner.delete_leftover(key))
