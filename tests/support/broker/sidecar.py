"""A real ``tieredstore run`` sidecar tiering the test broker's store while it runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.broker.rocketmq import LocalCluster, wait_until
from tieredstore.backends import open_backend
from tieredstore.cold.history import EntryKind, load_history

#: ``cold.compression = "zstd"`` in frames of 16 KiB (a segment of the tests' 256 KiB has
#: several): the tiering, serving and restore tests run compressed; plain objects stay
#: covered by the tests without a broker.
COMPRESSED = {"TIEREDSTORE_COLD_COMPRESSION": "zstd", "TIEREDSTORE_COLD_FRAME_SIZE": "16K"}


@dataclass
class LiveSidecar:
    """The sidecar process and where it writes: cold dir, state dir, log."""

    proc: subprocess.Popen[bytes]
    cold: Path
    state: Path
    log: Path
    cluster: str
    broker: str

    @classmethod
    @contextlib.contextmanager
    def start(
        cls,
        cluster: LocalCluster,
        workdir: Path,
        *,
        overrides: Mapping[str, str] | None = None,
        cold: Path | None = None,
        started: str = "lease acquired",
    ) -> Iterator[LiveSidecar]:
        """Start tiering ``cluster``'s store into ``workdir/cold``; SIGTERM it on exit.

        Small segments and a short tick so the live traffic is cut into many segments;
        ``%RETRY%`` topics are included so the broker's v2 (long topic) records are tiered.
        ``overrides`` adds or replaces ``TIEREDSTORE_*`` environment settings; ``cold``
        another cold directory (the replicas of a broker group share one); ``started``
        the log text that says it started (a standby of a group never holds the lease).
        """
        cold = cold or workdir / "cold"
        state, log = workdir / "state", workdir / "sidecar.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIEREDSTORE_")}
        env.update(
            TIEREDSTORE_TIERING_SEGMENT_MAX_BYTES="256K",
            TIEREDSTORE_TIERING_SEGMENT_MAX_AGE="2s",
            TIEREDSTORE_TIERING_TICK_INTERVAL="200ms",
            TIEREDSTORE_TIERING_INCLUDE_RETRY="true",
            TIEREDSTORE_HTTP_ENABLED="false",
            # Any free port for the read API (a test that needs a known one overrides it).
            TIEREDSTORE_READS_PORT="0",
        )
        env.update(overrides or {})
        names = (cluster.settings.cluster, cluster.settings.broker_name)
        cmd = [
            sys.executable, "-m", "tieredstore.cli", "run", "--progress", "off",
            "--store", str(cluster.store_root), "--cold", str(cold), "--state-dir", str(state),
            "--cluster", names[0], "--broker", names[1],
        ]  # fmt: skip
        with log.open("ab") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=out)
        sidecar = cls(proc, cold, state, log, *names)
        try:
            sidecar.wait_started(started)
            yield sidecar
        finally:
            sidecar.stop()

    def wait_started(self, text: str = "lease acquired") -> None:
        """Wait until the sidecar logs ``text`` (by default: it holds its lease; its
        catalogue is open and migrated by then, so a test that reads it read-only never
        meets a schema mid-migration)."""
        wait_until(
            lambda: self.proc.poll() is not None or text in self.log.read_text(errors="replace"),
            timeout=120,
            what=f"the sidecar to log {text!r}",
        )
        if self.proc.poll() is not None:
            raise RuntimeError(f"sidecar exited with {self.proc.returncode}: {self.log_tail()}")

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit code (kills after 60 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def pause(self) -> None:
        """SIGSTOP: the process keeps its state but does nothing until :meth:`resume`."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def http_url(self) -> str | None:
        """The HTTP API's URL from the log line it prints on start (None before that)."""
        found = re.search(
            r"HTTP API listening on (http://\S+)", self.log.read_text(errors="replace")
        )
        return found.group(1) if found else None

    def reads_url(self) -> str:
        """The read API's URL from the log line it prints on start."""
        found = re.search(
            r"read API listening on (http://\S+)", self.log.read_text(errors="replace")
        )
        if found is None:
            raise RuntimeError(f"the sidecar serves no read API: {self.log_tail()}")
        return found.group(1)

    def commit_logs(self) -> list[tuple[int, int | None]]:
        """Each committed per-queue segment's COMMIT_LOG: (its payload's size, its stored
        size when it is compressed, else None); batch slices are left out."""

        async def read() -> list[tuple[int, int | None]]:
            async with open_backend(str(self.cold)) as backend:
                history = await load_history(backend, self.cluster, self.broker)
            return [
                (link.commit_log.size, None if framed is None else framed.stored_size)
                for link in history.links()
                if link.kind is EntryKind.SEGMENT
                for framed in (link.commit_log.framed,)
            ]

        return asyncio.run(read())

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]
