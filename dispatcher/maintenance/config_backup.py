"""Backing up the broker's ``config/`` into its cold prefix, so a restore gets it back.

Every pass (:meth:`ConfigBackup.run_pass`; the sidecar runs one when it starts and then
every ``config_backup.interval``) reads each of ``topics.json``,
``subscriptionGroup.json``, ``consumerOffset.json`` and ``delayOffset.json`` from the
broker's config directory and, when its bytes differ from the newest copy, stores them
byte for byte as a new version (``_config/<file>/<stamp>-<sha256[:16]>``, see
:mod:`tieredstore.cold.layout`). Only the ``history`` newest versions of each file are kept;
older ones are deleted. Each write and delete first makes sure the writer lease is
still held (:func:`~tieredstore.dispatcher.lease.guard.hold_lease`).

A missing file is skipped (the broker writes some only once they have content). A file
that does not parse as the broker's JSON (:mod:`tieredstore.formats.fastjson_dialect`) is not
copied: the previous good copy stays the newest, and a warning says why. The broker
replaces these files by rename, so a read never sees half a file.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

from tieredstore.backends.base import Backend
from tieredstore.clock import Clock
from tieredstore.cold.configcopies import list_copies
from tieredstore.cold.layout import CONFIG_FILES, config_copy_key
from tieredstore.dispatcher.lease.guard import hold_lease
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.errors import CorruptDataError, RetryableError
from tieredstore.formats.fastjson_dialect import loads

__all__ = ["BackupReport", "ConfigBackup"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class BackupReport:
    """What one pass did: files copied (new versions), old versions deleted, skipped."""

    copied: list[str] = field(default_factory=list)
    pruned: int = 0
    skipped: list[str] = field(default_factory=list)


class ConfigBackup:
    """Copies ``config_dir``'s broker files to cold on change (see the module docstring)."""

    def __init__(
        self,
        *,
        config_dir: Path,
        backend: Backend,
        lease: Lease,
        clock: Clock,
        cluster: str,
        broker: str,
        history: int,
    ) -> None:
        if history < 1:
            raise ValueError(f"history must keep at least one version, got {history}")
        self.config_dir = config_dir
        self.backend = backend
        self.lease = lease
        self.clock = clock
        self.cluster = cluster
        self.broker = broker
        self.history = history
        self._latest: dict[str, str] = {}  # file -> digest prefix of its newest copy

    def _read(self, name: str) -> bytes | None:
        try:
            return (self.config_dir / name).read_bytes()
        except FileNotFoundError:
            return None

    async def _newest_digest(self, name: str) -> str | None:
        if name not in self._latest:
            copies = await list_copies(self.backend, self.cluster, self.broker, name)
            if not copies:
                return None
            self._latest[name] = copies[-1].digest
        return self._latest[name]

    async def _copy(self, name: str, data: bytes, report: BackupReport) -> None:
        digest = hashlib.sha256(data).hexdigest()
        if await self._newest_digest(name) == digest[:16]:
            return
        try:
            loads(data, where=str(self.config_dir / name))
        except CorruptDataError as exc:
            log.warning("config backup: not copying %s: %s", name, exc)
            report.skipped.append(name)
            return
        key = config_copy_key(self.cluster, self.broker, name, self.clock.now_ms(), digest)
        await hold_lease(self.lease)
        await self.backend.write(key, data)
        self._latest[name] = digest[:16]
        report.copied.append(name)
        log.info("config backup: %s changed, copied to %s", name, key)

    async def _prune(self, name: str, report: BackupReport) -> None:
        copies = await list_copies(self.backend, self.cluster, self.broker, name)
        for old in copies[: max(len(copies) - self.history, 0)]:
            await hold_lease(self.lease)
            await self.backend.delete(old.key)
            report.pruned += 1

    async def run_pass(self) -> BackupReport:
        """Copy every changed file, then trim each copied file's history."""
        report = BackupReport()
        for name in CONFIG_FILES:
            data = await asyncio.to_thread(self._read, name)
            if data is None:
                continue
            await self._copy(name, data, report)
            if name in report.copied:
                await self._prune(name, report)
        return report

    async def run_pass_logged(self) -> BackupReport:
        """:meth:`run_pass` for the sidecar's start: a transient failure is logged, not
        raised (the periodic job tries again); anything else propagates."""
        try:
            return await self.run_pass()
        except RetryableError as exc:
            log.warning("config backup failed, will run again: %s", exc)
            return BackupReport()
