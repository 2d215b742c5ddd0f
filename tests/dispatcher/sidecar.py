"""Run ``tieredstore run`` as a real subprocess (for crash, lease and signal tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.dispatcher.helpers import BROKER, CLUSTER


def sidecar_cmd(store: Path, cold: Path, state: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tieredstore.cli",
        "run",
        "--store",
        str(store),
        "--cold",
        str(cold),
        "--state-dir",
        str(state),
        "--cluster",
        CLUSTER,
        "--broker",
        BROKER,
        "--progress",
        "off",
        *extra,
    ]


def sidecar_env(**settings: str) -> dict[str, str]:
    """The environment with tieredstore settings (``TIEREDSTORE_*``) added."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIEREDSTORE_")}
    env.update(settings)
    env.setdefault("TIEREDSTORE_TIERING_SEGMENT_MAX_BYTES", "32K")
    env.setdefault("TIEREDSTORE_TIERING_READ_BATCH_BYTES", "8K")
    env.setdefault("TIEREDSTORE_HTTP_ENABLED", "false")
    return env


def start(
    store: Path, cold: Path, state: Path, *extra: str, log: Path, **env: str
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            sidecar_cmd(store, cold, state, *extra), env=sidecar_env(**env), stdout=out, stderr=out
        )


def kill9(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
