"""Run ``tieredstore run`` as a real subprocess (for crash, lease and signal tests), and
wait for a line it logs."""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from tests.support.sidecar.settings import location_args
from tieredstore.hot.synth import SyntheticStore

#: How a sidecar run ended under :func:`kill_after_objects`.
Ending = Literal["killed", "idle", "exited"]


def sidecar_cmd(store: Path, cold: Path | str, state: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "tieredstore.cli", "run", *location_args(store, cold, state),
        "--progress", "off", *extra,
    ]  # fmt: skip


def sidecar_env(**settings: str) -> dict[str, str]:
    """The environment with tieredstore settings (``TIEREDSTORE_*``) added."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIEREDSTORE_")}
    env.update(settings)
    env.setdefault("TIEREDSTORE_TIERING_SEGMENT_MAX_BYTES", "32K")
    env.setdefault("TIEREDSTORE_TIERING_READ_BATCH_BYTES", "8K")
    env.setdefault("TIEREDSTORE_HTTP_ENABLED", "false")
    # These sidecars serve no reads (a test that wants them sets it): one that serves
    # nothing starts without the web framework, and the campaigns start a hundred.
    env.setdefault("TIEREDSTORE_READS_ENABLED", "false")
    # Sidecars run side by side in tests: no fixed read API port (any free one).
    env.setdefault("TIEREDSTORE_READS_PORT", "0")
    return env


def start(
    store: Path, cold: Path | str, state: Path, *extra: str, log: Path, **env: str
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            sidecar_cmd(store, cold, state, *extra), env=sidecar_env(**env), stdout=out, stderr=out
        )


def kill9(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def count_files(cold: Path) -> int:
    return sum(1 for p in cold.rglob("*") if p.is_file()) if cold.exists() else 0


def kill_after_objects(
    proc: subprocess.Popen[bytes], cold: Path, count: int, *, bound_s: float = 60.0
) -> Ending:
    """SIGKILL once the sidecar has written ``count`` more files (``"killed"``).

    Killing after a seeded amount of *progress* (not after a time) lands mid-tiering on
    any machine, never while the process is still importing or waiting for the lease.
    A sidecar that ends first gives ``"exited"``; one that has nothing left to write is
    killed idle after ``bound_s`` (``"idle"``), which the campaigns do not count.
    """
    target = count_files(cold) + count
    give_up = time.monotonic() + bound_s
    while proc.poll() is None:
        if count_files(cold) >= target:
            kill9(proc)
            return "killed"
        if time.monotonic() > give_up:
            kill9(proc)
            return "idle"
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.05)  # watch the process, not the clock
    return "exited"


def crash_cycles(
    tmp_path: Path,
    rng: random.Random,
    *,
    cycles: int,
    batch: tuple[int, int],
    args: Sequence[str] = (),
    env: Mapping[str, str],
    most_objects: int = 30,
) -> int:
    """Crash a sidecar ``cycles`` times over the store in ``tmp_path / "store"``.

    Each cycle appends a seeded number of messages in ``batch`` (the broker keeps
    writing), starts ``tieredstore run *args`` on ``cold``/``state`` beside it and
    SIGKILLs it after a seeded 1–``most_objects`` objects written
    (:func:`kill_after_objects`). A sidecar that ends first must have exited 0. Returns
    how many were killed mid-run.
    """
    store, cold, state, log = (tmp_path / n for n in ("store", "cold", "state", "log"))
    kills = 0
    for _ in range(cycles):
        SyntheticStore.open(store).append(rng.randint(*batch))
        proc = start(store, cold, state, *args, log=log, **env)
        ending = kill_after_objects(proc, cold, rng.randint(1, most_objects))
        kills += ending == "killed"
        if ending == "exited":
            assert proc.returncode == 0, log.read_text()[-3000:]
    return kills


def wait_until(
    what: str,
    done: Callable[[], bool],
    proc: subprocess.Popen[bytes],
    log: Path,
    *,
    timeout: float = 60,
) -> None:
    """Block until ``done()``, or fail (an AssertionError with the end of ``log``) when
    ``proc`` exits first or ``timeout`` seconds pass. Waits on the process, never sleeps:
    a process that exits ends the wait at once."""
    deadline = time.monotonic() + timeout
    while not done():
        assert proc.poll() is None, f"exited while waiting for {what}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {what} in {timeout}s:\n{log.read_text()[-3000:]}"
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.05)


def wait_for_log(
    log: Path, pattern: str, proc: subprocess.Popen[bytes], timeout: float = 60
) -> None:
    """Block until ``pattern`` (a regex) appears in the log the process writes, or fail."""

    def seen() -> bool:
        return re.search(pattern, log.read_text(errors="replace")) is not None

    wait_until(repr(pattern), seen, proc, log, timeout=timeout)
