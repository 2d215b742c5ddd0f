"""The command line: exit codes, one-line errors, JSON logs, status output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tieredstore.cli.main import main
from tieredstore.hot.synth import SynthSpec, synthesize


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tieredstore.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_bad_usage_exits_3_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["synth", "--topics", "x"])
    assert info.value.code == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("tieredstore synth: error: argument --topics")
    with pytest.raises(SystemExit) as info:
        main(["no-such-command"])
    assert info.value.code == 3


def test_missing_store_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "run",
            "--once",
            "--store",
            str(tmp_path / "nope"),
            "--cold",
            str(tmp_path / "c"),
            "--cluster",
            "C",
            "--broker",
            "B",
            "--state-dir",
            str(tmp_path / "s"),
        ]
    )
    assert code == 3
    err = capsys.readouterr().err.strip()
    assert (
        err == f"tieredstore run: store directory does not exist (store.path={tmp_path / 'nope'})"
    )


@pytest.mark.slow
def test_run_once_json_logs_and_status(tmp_path: Path) -> None:
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=2, messages=300))
    common = [
        "--store",
        str(tmp_path / "store"),
        "--cluster",
        "C",
        "--broker",
        "B",
        "--state-dir",
        str(tmp_path / "state"),
    ]
    run = _cli("run", "--once", "--cold", str(tmp_path / "cold"), "--log-format", "json", *common)
    assert run.returncode == 0, run.stderr
    lines = [json.loads(line) for line in run.stderr.splitlines()]
    assert {"ts", "level", "logger", "message"} <= set(lines[0])
    assert any("catch-up done" in line["message"] for line in lines)
    status = _cli("status", "--json", *common)
    assert status.returncode == 0, status.stderr
    queues = json.loads(status.stdout)["queues"]
    assert [(q["topic"], q["queue"], q["state"]) for q in queues] == [
        ("SynthTopic0", 0, "ACTIVE"),
        ("SynthTopic0", 1, "ACTIVE"),
    ]
    assert all(q["cold_commit"] == q["hot_max"] and q["lag_messages"] == 0 for q in queues)
    table = _cli("status", *common)
    assert "SynthTopic0" in table.stdout


@pytest.mark.slow
def test_synth_then_inspect(tmp_path: Path) -> None:
    out = tmp_path / "s"
    assert _cli("synth", "--out", str(out), "--messages", "100", "--topics", "1").returncode == 0
    inspect = _cli("inspect", "--store", str(out), "--json")
    doc = json.loads(inspect.stdout)
    assert sum(q["max"] - q["min"] for q in doc["queues"]) == 100
    again = _cli("synth", "--out", str(out))
    assert again.returncode == 3
    assert "is not empty" in again.stderr


@pytest.mark.slow
def test_synth_writes_json_bodies_when_asked(tmp_path: Path) -> None:
    out = tmp_path / "s"
    made = _cli("synth", "--out", str(out), "--messages", "40", "--topics", "1",
                "--bodies", "json", "--body-size", "100:300", "--seed", "5")  # fmt: skip
    assert made.returncode == 0, made.stderr
    from tieredstore.hot.store import HotStore

    bodies = [s.record.body for s in HotStore(out).scan_commitlog()]
    assert len(bodies) == 40 and all(100 <= len(b) <= 300 for b in bodies)
    assert all(isinstance(json.loads(b)["eventType"], str) for b in bodies)
    assert json.loads((out / "synth.json").read_text())["spec"]["body_kind"] == "json"
    refused = _cli("synth", "--out", str(tmp_path / "x"), "--bodies", "json", "--body-size", "1")
    assert refused.returncode == 3 and "JSON bodies need at least 2 bytes" in refused.stderr


@pytest.mark.slow
def test_rebuild_metadata_from_the_cold_store(tmp_path: Path) -> None:
    synthesize(tmp_path / "store", SynthSpec(topics=2, queues=2, messages=800))
    common = ["--cluster", "C", "--broker", "B", "--cold", str(tmp_path / "cold")]
    run = _cli("run", "--once", "--store", str(tmp_path / "store"), "--state-dir",
               str(tmp_path / "state"), *common)  # fmt: skip
    assert run.returncode == 0, run.stderr
    rebuilt = _cli("rebuild-metadata", "--state-dir", str(tmp_path / "rebuilt"), *common)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "4 queues" in rebuilt.stdout
    again = _cli("rebuild-metadata", "--state-dir", str(tmp_path / "rebuilt"), *common)
    assert again.returncode == 1
    assert "a catalogue already exists" in again.stderr
    from tieredstore.metadata.catalogue import Catalogue

    def rows(state: Path) -> list[tuple[str, int, int, int]]:
        with Catalogue.open(state, cluster="C", broker="B", read_only=True) as cat:
            return [(r.topic, r.queue_id, r.cold_min, r.cold_commit) for r in cat.queues.all()]

    assert rows(tmp_path / "rebuilt") == rows(tmp_path / "state")


_THREADS_AFTER_NUMPY = (
    "import os, tieredstore.cli, numpy; "
    "print(len(os.listdir('/proc/self/task')), os.environ['OPENBLAS_NUM_THREADS'])"
)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_the_command_starts_no_blas_threads_and_keeps_the_users_setting() -> None:
    """numpy's OpenBLAS would start a spinning thread per core at import; the command
    never uses it. A value the user set is theirs."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", _THREADS_AFTER_NUMPY], env=env,
                          capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    assert done.stdout.split() == ["1", "1"]
    env["OPENBLAS_NUM_THREADS"] = "2"
    done = subprocess.run([sys.executable, "-c", _THREADS_AFTER_NUMPY], env=env,
                          capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    assert done.stdout.split()[1] == "2"
