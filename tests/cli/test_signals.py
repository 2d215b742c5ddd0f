"""Ctrl-C and SIGTERM are honoured by ``run --once`` and the tools: they stop within
``shutdown.deadline`` (or promptly), never report success, exit 128 + the signal, and
say so in one line without a traceback. Real processes, real signals; each test waits
for a line the process writes (never a sleep) before it sends the signal."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.sidecar.process import (
    sidecar_cmd,
    sidecar_env,
    start,
    wait_for_log,
    wait_until,
)
from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.hot.synth import SynthSpec, synthesize

pytestmark = pytest.mark.slow  # every test here takes over a second: not in make quick

#: slow enough that the whole pass takes minutes, so only the signal can end it early
SLOW = {"TIEREDSTORE_TIERING_MAX_BYTES_PER_SECOND": "64K", "TIEREDSTORE_SHUTDOWN_DEADLINE": "1s"}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("signals") / "store"
    synthesize(root, SynthSpec(topics=2, queues=2, messages=8000))
    return root


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_run_once_stops_within_the_deadline_and_says_it_did_not_finish(
    store: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    log, cold, state = tmp_path / "run.log", tmp_path / "cold", tmp_path / "state"
    proc = start(store, cold, state, "--once", "--progress", "on", log=log, **SLOW)
    try:
        wait_for_log(log, r"tiered \d+ segments?", proc)  # the pass is under way
        proc.send_signal(sig)
        signalled = time.monotonic()
        code = proc.wait(timeout=60)
        stopped_after = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert code == 128 + sig, text[-2000:]
    assert stopped_after < 15, f"took {stopped_after:.1f}s for a 1 s shutdown.deadline"
    assert "Traceback" not in text and "catch-up done" not in text
    again_key = "Ctrl-C" if sig is signal.SIGINT else sig.name
    assert re.search(
        rf"{sig.name}: (finishing \d+ uploads?, at most 1\.0 s; {again_key} again to abandon "
        r"them|stopping \(no upload in flight\))",
        text,
    ), text[-2000:]
    assert re.fullmatch(
        rf"tieredstore run: stopped by {sig.name}: (\d+ uploads? in flight abandoned "
        r"uncommitted \(never read; `tieredstore gc` removes them\), )?\d+ segments? "
        r"committed; \d+ messages in \d+ queues? left: run again to tier them",
        text.splitlines()[-1],
    ), text[-2000:]
    # The progress line was ended before the log lines that followed it.
    assert not re.search(r"tiered \d+ segments?[^\n]*(INFO|WARNING|ERROR) ", text), text[-2000:]
    # What was committed stays; a second run finishes the rest and succeeds.
    again = subprocess.run(
        sidecar_cmd(store, cold, state, "--once"),
        env=sidecar_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert re.search(
        r"catch-up done: ([1-9]\d* segments?|\d+ segments?, [1-9]\d* batch slices?)", again.stderr
    )


def test_a_second_ctrl_c_abandons_the_uploads_in_flight(store: Path, tmp_path: Path) -> None:
    """A minute's deadline, slow uploads: the first Ctrl-C says what it finishes and how
    long it may take; the second ends the wait at once, and the last line says so."""
    log, cold, state = tmp_path / "run.log", tmp_path / "cold", tmp_path / "state"
    env = {**SLOW, "TIEREDSTORE_SHUTDOWN_DEADLINE": "60s"}
    proc = start(store, cold, state, "--once", "--progress", "on", log=log, **env)
    try:
        wait_for_log(log, r"tiered \d+ segments?", proc)
        proc.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        wait_for_log(log, r"SIGINT: (finishing|stopping)", proc)
        if "SIGINT: finishing" in log.read_text():
            assert re.search(r"finishing \d+ uploads?, at most 1 m 00 s; Ctrl-C again to "
                             r"abandon them", log.read_text())  # fmt: skip
            proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        stopped_after = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert code == 130, text[-2000:]
    assert stopped_after < 15, f"took {stopped_after:.1f}s after the second Ctrl-C"
    # The uploads may all finish between the two signals on a busy host ("abandoning 0
    # uploads"): the last line names abandoned uploads exactly when there were some.
    abandoned = re.search(r"SIGINT again: abandoning (\d+) uploads? in flight", text)
    if abandoned is not None:
        named = " in flight abandoned uncommitted " in text.splitlines()[-1]
        assert named == (int(abandoned[1]) > 0), text[-2000:]
    assert "Traceback" not in text


@pytest.fixture(scope="module")
def tiered(store: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``store`` tiered once: (store, cold)."""
    root = tmp_path_factory.mktemp("tiered")
    done = subprocess.run(
        sidecar_cmd(store, root / "cold", root / "state", "--once"),
        env=sidecar_env(),
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return store, root / "cold"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_verify_stops_on_a_signal_to_its_process_group_in_one_line(
    tiered: tuple[Path, Path], tmp_path: Path, sig: signal.Signals
) -> None:
    """As Ctrl-C in a terminal does: the signal reaches the driver, the JVM and Spark's
    Python workers; only the driver speaks, once."""
    store, cold = tiered
    out, log = tmp_path / "report", tmp_path / "verify.log"
    cmd = [
        sys.executable, "-m", "tieredstore.cli",
        "verify", "--hot", str(store), "--cold", str(cold), "--cluster", CLUSTER,
        "--broker", BROKER, "--level", "content", "--out", str(out), "--master", "local[2]",
    ]  # fmt: skip
    with log.open("wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=sink, start_new_session=True)
    try:
        # spark.log appears when the JVM is starting: Spark is under way
        wait_until("spark.log", (out / "spark.log").exists, proc, log, timeout=120)
        os.killpg(proc.pid, sig)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert code == 128 + sig, text
    assert text == f"tieredstore verify: interrupted by {sig.name}; no report written\n"
    assert not (out / "report.html").exists()


def _interrupt_when(proc: subprocess.Popen[bytes], ready: Callable[[], bool], sig: int) -> int:
    """Once ``ready()`` (the tool wrote its first output), freeze the process, queue
    ``sig``, and let it go: the signal lands mid-work however fast the machine is."""
    deadline = time.monotonic() + 120
    while not ready():
        assert proc.poll() is None, "finished before it was interrupted"
        assert time.monotonic() < deadline
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.01)
    proc.send_signal(signal.SIGSTOP)
    proc.send_signal(sig)
    proc.send_signal(signal.SIGCONT)
    return proc.wait(timeout=60)


def _tool(*args: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "tieredstore.cli", *args], stdout=sink, stderr=sink
        )


def _cold_args(cold: Path) -> list[str]:
    return ["--cold", str(cold), "--cluster", CLUSTER, "--broker", BROKER]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_restore_stops_in_one_line_and_a_rerun_resumes_it(
    tiered: tuple[Path, Path], tmp_path: Path, sig: signal.Signals
) -> None:
    _, cold = tiered
    out, log = tmp_path / "restored", tmp_path / "restore.log"
    proc = _tool("restore", *_cold_args(cold), "--out", str(out), "--progress", "on", log=log)
    code = _interrupt_when(proc, lambda: "restored " in log.read_text(errors="replace"), sig)
    text = log.read_text()
    assert code == 128 + sig, text
    assert text.splitlines()[-1] == (
        f"tieredstore restore: interrupted by {sig.name}; run the same command again to "
        "resume where it stopped"
    )
    assert "Traceback" not in text and "into" not in text  # no success line
    again = subprocess.run(
        [sys.executable, "-m", "tieredstore.cli", "restore", *_cold_args(cold), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("resumed and restored 8,000 messages")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_export_stops_in_one_line_and_a_rerun_finishes_it(
    tiered: tuple[Path, Path], tmp_path: Path, sig: signal.Signals
) -> None:
    _, cold = tiered
    out, log = tmp_path / "parquet", tmp_path / "export.log"
    args = ["export", "--format", "parquet", *_cold_args(cold), "--out", str(out)]
    proc = _tool(*args, "--jobs", "1", log=log)
    code = _interrupt_when(proc, lambda: any(out.rglob("*.parquet")), sig)
    text = log.read_text()
    assert code == 128 + sig, text
    assert text == (
        f"tieredstore export: interrupted by {sig.name}; run it again to continue where it "
        "stopped (exported segments are kept)\n"
    )
    again = subprocess.run(
        [sys.executable, "-m", "tieredstore.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    counts = re.search(r"exported (\d+) segments .*; (\d+) of (\d+) selected", again.stdout)
    assert counts, again.stdout
    # Every selected segment is exported now: newly, or by the interrupted run.
    assert int(counts[1]) + int(counts[2]) == int(counts[3]) and int(counts[1]) > 0


def test_restores_progress_line_is_ended_before_a_log_line(
    tiered: tuple[Path, Path], tmp_path: Path
) -> None:
    _, cold = tiered
    done = subprocess.run(
        [sys.executable, "-m", "tieredstore.cli", "restore", *_cold_args(cold),
         "--out", str(tmp_path / "r"), "--progress", "on"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "INFO    tieredstore.restore.configs: restored config/topics.json" in done.stderr
    assert not re.search(r"restored \d+/[^\n]*(INFO|WARNING|ERROR) ", done.stderr), done.stderr
