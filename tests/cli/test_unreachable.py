"""One fault, one message: every command that reads the cold store says the same thing
when it does not answer (a closed port on loopback), exits 3 and leaves nothing behind."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tieredstore.backends.factory import reach_of
from tieredstore.backends.faults import Fault, FaultyBackend
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.backends.options import BackendOptions
from tieredstore.backends.retry import Reach, RetryingBackend, RetryPolicy, unreachable
from tieredstore.errors import BackendTimeoutError, ColdStoreUnreachableError, ThrottledError
from tieredstore.hot.synth import SynthSpec, synthesize


def test_the_message_names_store_endpoint_what_was_tried_and_the_timeouts() -> None:
    reach = Reach("s3://bkt/tiered", "http://127.0.0.1:9", 10.0, 60.0)
    exc = BackendTimeoutError("read failed: ReadTimeoutError: slow", where="s3://bkt/tiered/k")
    err = unreachable(reach, "read", exc, attempts=6, elapsed_s=8.14)
    assert str(err) == (
        "cold store s3://bkt/tiered unreachable at endpoint http://127.0.0.1:9: read of "
        "s3://bkt/tiered/k failed 6 times in 8.1 s (connect timeout 10 s, read timeout 60 s); "
        "last error: ReadTimeoutError: slow"
    )
    assert "its default endpoint" in str(unreachable(Reach("s3://b"), "list", exc, attempts=1,
                                                     elapsed_s=0))  # fmt: skip


def test_reach_hides_credentials_and_knows_only_s3_endpoints() -> None:
    opts = BackendOptions(endpoint_url="http://minio:9000", connect_timeout=3)
    assert reach_of("s3://key:secret@bkt/p", opts) == Reach("s3://bkt/p", "http://minio:9000",
                                                            3, 60)  # fmt: skip
    assert reach_of("/data/cold", opts) == Reach("/data/cold")


async def test_a_retried_backend_gives_up_with_the_one_message() -> None:
    reset_memory_stores()
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    down = FaultyBackend(MemoryBackend("down"), rate=1.0, faults=[Fault.TIMEOUT])
    policy = RetryPolicy(max_attempts=3, base_delay=0.1, max_delay=0.1)
    backend = RetryingBackend(down, policy, sleep=sleep, reach=Reach("memory://down"))
    with pytest.raises(ColdStoreUnreachableError, match=r"^cold store memory://down unreachable"
                       r" at its default endpoint: list of .* failed 3 times in"):  # fmt: skip
        await backend.list("x")
    assert len(slept) == 2
    slow = FaultyBackend(MemoryBackend("slow"), rate=1.0, faults=[Fault.THROTTLE])
    throttled = RetryingBackend(slow, policy, sleep=sleep, reach=Reach("memory://slow"))
    with pytest.raises(ThrottledError):  # back-pressure, not an unreachable store
        await throttled.list("x")


def _closed_port() -> str:
    with socket.socket() as s:  # bound then released: nobody listens there
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.slow
def test_every_command_says_the_same_thing_and_leaves_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    synthesize(store, SynthSpec(topics=1, queues=1, messages=10))
    endpoint = _closed_port()
    cold = ["--cold", "s3://bkt/tiered", "--endpoint-url", endpoint, "--cluster", "C",
            "--broker", "B"]  # fmt: skip
    commands = {
        "run": ["run", "--once", "--store", str(store), "--state-dir", str(tmp_path / "st")],
        "verify": ["verify", "--hot", str(store), "--out", str(tmp_path / "report")],
        "read": ["read", "--topic", "SynthTopic0", "--queue", "0", "--offset", "0"],
        "export": ["export", "--format", "parquet", "--out", str(tmp_path / "lake")],
        "restore": ["restore", "--out", str(tmp_path / "restored")],
        "lease": ["lease", "show"],
        "gc": ["gc", "--store", str(store), "--state-dir", str(tmp_path / "st-gc")],
        "expire": ["expire", "--store", str(store), "--state-dir", str(tmp_path / "st-ex")],
        "repair": [
            "repair",
            "--topic",
            "SynthTopic0",
            "--queue",
            "0",
            "--store",
            str(store),
            "--state-dir",
            str(tmp_path / "st-rp"),
        ],
        "resume": [
            "resume",
            "--topic",
            "SynthTopic0",
            "--queue",
            "0",
            "--store",
            str(store),
            "--state-dir",
            str(tmp_path / "st-rs"),
        ],
        "rebuild-metadata": ["rebuild-metadata", "--state-dir", str(tmp_path / "st-rb")],
    }
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
    procs = {
        name: subprocess.Popen([sys.executable, "-m", "tieredstore.cli", *args, *cold],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for name, args in commands.items()
    }  # fmt: skip
    try:
        done = {name: (p.wait(timeout=120), p.communicate()[1]) for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    shape = re.compile(
        rf"^tieredstore ([\w-]+): (could not run: )?cold store s3://bkt/tiered unreachable at "
        rf"endpoint {re.escape(endpoint)}: (list|read) of s3://bkt/tiered/\S+ failed \d+ times "
        r"in [\d.]+ s \(connect timeout 10 s, read timeout 60 s\); last error: "
        r"EndpointConnectionError: .*\n$"
    )
    for name, (code, err) in done.items():
        assert code == 3, (name, err)
        assert shape.match(err), (name, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]  # no state dir, no output
