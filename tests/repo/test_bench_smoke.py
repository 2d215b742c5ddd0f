"""The ``bench/`` scripts still run: each at a tiny size prints well-formed RESULT lines.

No timing is asserted (PASS or FAIL both count): these only keep the scripts from
rotting as the code they drive changes. The numbers live in BENCHMARKS.md.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
RESULT = re.compile(r"^RESULT (\w+) ratio=(\S+) target=(\S+) (PASS|FAIL)$")
TINY_STORE = ["--size", "2M", "--topics", "2", "--queues", "2"]
# 4 queues, 10 s segments, 1 simulated minute counted: a few seconds.
TINY_TRICKLE = ["--topics", "2", "--queues", "2", "--minutes", "1", "--age", "10s"]

CASES = [
    pytest.param("tiering_posix.py", [*TINY_STORE, "--cp-runs", "1"], id="tiering_posix"),
    pytest.param("tiering_s3.py", TINY_STORE, id="tiering_s3", marks=pytest.mark.s3),
    pytest.param("restore.py", [*TINY_STORE, "--read-runs", "1"], id="restore"),
    pytest.param("serving.py", TINY_STORE, id="serving"),
    pytest.param(
        "serving_consumer.py",
        ["--messages", "3000", "--hot-messages", "300", "--commitlog-file-size", str(1 << 20)],
        id="serving_consumer",
        marks=pytest.mark.broker,  # a real broker: about a minute, with the broker tests
    ),
    pytest.param(
        "verify_offsets.py",
        ["--units", "20000", "--queues", "2", "--segment-units", "5000", "--no-fixed-cost"],
        id="verify_offsets",
        marks=pytest.mark.spark,
    ),
    pytest.param(
        "verify_content.py",
        [*TINY_STORE, "--no-fixed-cost"],
        id="verify_content",
        marks=pytest.mark.spark,
    ),
    pytest.param(
        "verifier_throughput.py",
        [
            "--units",
            "20000",
            "--queues",
            "2",
            "--segment-units",
            "5000",
            "--messages",
            "2000",
            "--segment-messages",
            "500",
            "--repeats",
            "1",
            "--compare-master",
            "",  # no second Spark process for the scaling comparison
        ],
        id="verifier_throughput",
        marks=pytest.mark.spark,
    ),
    pytest.param(
        "analytics_scan.py",
        ["--messages", "2000", "--segment-messages", "500", "--runs", "1"],
        id="analytics_scan",
        marks=pytest.mark.spark,
    ),
    pytest.param(
        "verify_fleet.py",
        ["--brokers", "2", "--queues", "2", "--messages", "100"],
        id="verify_fleet",
        marks=pytest.mark.spark,
    ),
    pytest.param("cq_parse.py", ["--units", "30000"], id="cq_parse"),
    pytest.param(
        "compression.py",
        ["--size", "1M", "--topics", "2", "--queues", "2", "--repeat", "1"],
        id="compression",
    ),
    pytest.param(
        "fingerprint.py",
        ["--size", "2M", "--topics", "1", "--queues", "2", "--runs", "1"],
        id="fingerprint",
    ),
    pytest.param("record_checks.py", [*TINY_STORE, "--runs", "1"], id="record_checks"),
    pytest.param(
        "lag.py",
        ["--duration", "2", "--age", "0.5", "--tick", "0.2", "--topics", "1", "--queues", "2"],
        id="lag",
    ),
    pytest.param("requests.py", TINY_TRICKLE, id="requests"),
    pytest.param("requests.py", [*TINY_TRICKLE, "--cold", "posix"], id="requests_posix"),
    pytest.param(
        "requests.py", [*TINY_TRICKLE, "--cold", "s3"], id="requests_s3", marks=pytest.mark.s3
    ),
]


def result_lines(stdout: str) -> list[re.Match[str]]:
    """Every RESULT line; each must parse, and ratio must be a number."""
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    matches = []
    for line in lines:
        m = RESULT.match(line)
        assert m is not None, f"malformed RESULT line: {line!r}"
        float(m.group(2))
        matches.append(m)
    return matches


@pytest.mark.slow
@pytest.mark.parametrize(("script", "args"), CASES)
def test_script_prints_result_lines(script: str, args: list[str], tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args, "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = result_lines(proc.stdout)
    assert found, f"no RESULT line in:\n{proc.stdout}"
    assert proc.stdout.rstrip().splitlines()[-1].startswith("RESULT "), "RESULT must come last"
    assert all(m.group(1).startswith(script.removesuffix(".py")) for m in found)


def test_result_line_format_is_what_the_scripts_print(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("bench_common", BENCH / "_common.py")
    assert spec is not None and spec.loader is not None
    common = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_common", common)  # dataclasses look it up
    spec.loader.exec_module(common)
    result_line = common.result_line
    line = result_line("x", 0.5, ">=0.8", passed=False)
    assert line == "RESULT x ratio=0.5 target=>=0.8 FAIL"
    assert result_lines(line)
    with pytest.raises(ValueError, match="spaces"):
        result_line("x", 0.5, ">= 0.8", passed=True)
