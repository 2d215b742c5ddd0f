"""Credentials never reach the logs, even at debug level with S3 request logging on."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.moto import S3Bucket
from tests.support.sidecar.process import sidecar_cmd, sidecar_env
from tieredstore.hot.synth import SynthSpec, synthesize

pytestmark = pytest.mark.slow  # every test here takes over a second: not in make quick

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY-do-not-log"
SESSION = "FQoGZXIvYXdzEXAMPLE-session-token-do-not-log"


@pytest.mark.s3
def test_debug_logs_hold_no_credentials(tmp_path: Path, s3_bucket: S3Bucket) -> None:
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=1, messages=200))
    env = sidecar_env(
        AWS_ACCESS_KEY_ID="AKIAEXAMPLEKEYID",
        AWS_SECRET_ACCESS_KEY=SECRET,
        AWS_SESSION_TOKEN=SESSION,
        AWS_DEFAULT_REGION="us-east-1",
    )
    cmd = sidecar_cmd(tmp_path / "store", tmp_path / "unused", tmp_path / "state", "--once")
    cmd[cmd.index("--cold") + 1] = f"{s3_bucket.url}/secrets"
    cmd += ["--endpoint-url", s3_bucket.endpoint_url, "--log-level", "debug"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    output = done.stdout + done.stderr
    assert "catch-up done" in output
    assert len(output) > 1000  # debug logging really was on
    assert SECRET not in output
    assert SESSION not in output
