"""The README's examples run as printed, on a synthetic store and local paths.

Every ``tieredstore`` command line in the README's shell blocks runs in order, with only
its places replaced (the store, the cold URL, the state dir, the output folders and the
TOML file, which is docs/sidecar.toml with those places); each must exit 0. A ``run``
without ``--once`` is a sidecar: it must come up, tier, and stop on SIGTERM with exit 0.
``make`` targets must exist; ``spark-submit`` gets its flags checked by the verifier's
own parser. Then the Python example (the Spark data source) runs in this session
against what was tiered. A README example that drifts from the code fails here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tieredstore.cold.batch import BATCH_MAGIC
from tieredstore.hot.synth import SynthSpec, synthesize

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
BIN = Path(sys.executable).parent
SPEC = SynthSpec(topics=2, queues=2, messages=400, body_min=20, body_max=200, seed=5)


def shell_lines(text: str) -> list[str]:
    """The commands of every ```sh block: continuations joined, comments dropped."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(shlex.join(words))
    return commands


def places(tmp: Path) -> dict[str, str]:
    """The README's places, each mapped to a local one under ``tmp``."""
    return {
        "/var/lib/rocketmq/store": str(tmp / "store"),
        "s3://bucket/tiered": str(tmp / "cold"),
        "/var/lib/tieredstore": str(tmp / "state"),
        "/var/tmp/verify": str(tmp / "verify"),
        "s3://lake/rocketmq": str(tmp / "lake"),
        "sidecar.toml": str(tmp / "sidecar.toml"),
    }


def localise(command: str, where: dict[str, str]) -> list[str]:
    for printed, local in where.items():
        command = command.replace(printed, local)
    return shlex.split(command)


def sidecar_toml(tmp: Path) -> str:
    """docs/sidecar.toml with this test's places."""
    text = (REPO / "docs" / "sidecar.toml").read_text()
    text = re.sub(r'(?m)^path = ".*?"', f'path = "{tmp / "store"}"', text, count=1)
    text = re.sub(r'(?m)^url = ".*?"', f'url = "{tmp / "cold"}"', text, count=1)
    return re.sub(r'(?m)^dir = ".*?"', f'dir = "{tmp / "state"}"', text, count=1)


def test_the_readme_has_the_examples_this_file_runs() -> None:
    commands = shell_lines(README.read_text())
    assert [c.split()[:2] for c in commands if c.startswith("tieredstore")] == [
        ["tieredstore", "check-cold"],
        ["tieredstore", "run"],
        ["tieredstore", "run"],
        ["tieredstore", "run"],
        ["tieredstore", "status"],
        ["tieredstore", "verify"],
        ["tieredstore", "verify"],
        ["tieredstore", "export"],
    ]


def test_make_targets_and_the_spark_submit_flags_exist() -> None:
    makefile = (REPO / "Makefile").read_text()
    for command in shell_lines(README.read_text()):
        words = shlex.split(command)
        if words[0] == "make":
            assert re.search(rf"(?m)^{words[1]}:", makefile), command
        if words[0] == "spark-submit":
            script = next(i for i, w in enumerate(words) if w.endswith("__main__.py"))
            assert (REPO / words[script]).is_file()
            flags = words[script + 1 :]
            done = subprocess.run(
                [sys.executable, "-m", "tieredstore.verifier", *flags, "--help"],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            named = {w for w in flags if w.startswith("--")}
            assert named <= set(re.findall(r"--[a-z-]+", done.stdout)), named


def _epoch(cold: Path) -> int:
    """The writer lease's epoch in ``cold`` (0: no lease yet)."""
    found = [json.loads(p.read_text())["epoch"] for p in cold.rglob("_lease.json")]
    return max(found, default=0)


def _tiered(cold: Path) -> bool:
    """Whether anything is committed in ``cold``: a manifest, or a batch object (a batch
    fence, written at start, begins with ``{``, not with the batch magic)."""
    if any(cold.rglob("MANIFEST/*.json")):
        return True
    return any(p.read_bytes()[:8] == BATCH_MAGIC for p in cold.rglob("_batches/*.batch"))


def _sidecar(argv: list[str], where: dict[str, str], env: dict[str, str]) -> None:
    """A ``run`` without ``--once``: it takes the lease and tiers (next to ``status``),
    then stops on SIGTERM with exit 0."""
    cold = Path(where["s3://bucket/tiered"])
    before = _epoch(cold)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while _epoch(cold) <= before or not _tiered(cold):
            assert proc.poll() is None, proc.communicate()[0].decode()[-2000:]
            assert time.monotonic() < deadline, "no lease taken or nothing tiered in 120 s"
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.5)  # returns at once if the sidecar exits
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=120)[0].decode()
        assert proc.returncode == 0, out[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_every_tieredstore_command_runs_as_printed(tmp_path: Path, spark: SparkSession) -> None:
    synthesize(tmp_path / "store", SPEC)
    (tmp_path / "sidecar.toml").write_text(sidecar_toml(tmp_path))
    where = places(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIEREDSTORE_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env['PATH']}"
    env["TIEREDSTORE_TIERING_SEGMENT_MAX_AGE"] = "1s"  # a first segment soon
    env["TIEREDSTORE_HTTP_ENABLED"] = env["TIEREDSTORE_READS_ENABLED"] = "false"  # no ports
    for command in shell_lines(README.read_text()):
        if not command.startswith("tieredstore "):
            continue
        argv = localise(command, where)
        if argv[1] == "run" and "--once" not in argv:
            _sidecar(argv, where, env)
            continue
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{command}\n{done.stderr[-2000:]}"
    report = json.loads((tmp_path / "verify" / "report.json").read_text())
    assert report["verdict"] == "CLEAN"
    assert any((tmp_path / "lake").rglob("*.parquet"))
    _python_example(tmp_path, spark)


def _python_example(tmp_path: Path, spark: SparkSession) -> None:
    """The data-source example, on this session (``getOrCreate`` returns it)."""
    code = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)[0]
    code = code.replace("s3://bucket/tiered", str(tmp_path / "cold"))
    code = code.replace("'TradeOrders'", "'SynthTopic0'").replace(".show()", ".collect()")
    scope: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), scope)  # our own README
    df = scope["df"]  # after a filtered query, still every message (no stale pruning)
    assert df.count() == SPEC.messages  # type: ignore[attr-defined]
