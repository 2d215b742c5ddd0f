"""``tieredstore check-cold``: each operation the sidecar needs, one line each, before the
first run. Against a local directory, and against ``auth_moto`` (IAM policies checked as
on S3) with a key allowed everything and one denied ``s3:DeleteObject``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fixtures_s3 import AuthMoto
from tests.support.moto import REGION, IamKey
from tieredstore.cli.main import main

OPS = ["list", "conditional create", "get", "delete"]


def _lines(out: str) -> list[tuple[str, str]]:
    """(operation, ok|FAILED) of each printed line."""
    parsed = []
    for line in out.splitlines():
        op, _, rest = line.partition("  ")
        parsed.append((op.strip(), rest.split()[0]))
    return parsed


def _use(monkeypatch: pytest.MonkeyPatch, key: IamKey) -> None:
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for name, value in key.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_a_local_store_passes_every_check_and_keeps_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cold = tmp_path / "cold"
    cold.mkdir()
    assert main(["check-cold", "--cold", str(cold)]) == 0
    out = capsys.readouterr().out
    assert _lines(out) == [(op, "ok") for op in OPS], out
    assert "a second create was refused" in out
    assert not [p for p in cold.rglob("*") if p.is_file()]  # its key is deleted again


@pytest.mark.s3
@pytest.mark.slow
def test_a_key_denied_delete_fails_that_line_only_and_exits_3(
    auth_moto: AuthMoto, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = auth_moto.new_bucket()
    cold = ["--cold", f"s3://{bucket}/tiered", "--endpoint-url", auth_moto.endpoint_url]
    _use(monkeypatch, auth_moto.admin)
    assert main(["check-cold", *cold]) == 0
    assert _lines(capsys.readouterr().out) == [(op, "ok") for op in OPS]
    _use(monkeypatch, auth_moto.no_delete)
    assert main(["check-cold", *cold]) == 3
    out = capsys.readouterr().out
    assert _lines(out) == [(op, "ok") for op in OPS[:3]] + [("delete", "FAILED")], out
    failed = out.splitlines()[-1]
    assert f"access denied: delete of s3://{bucket}/tiered/_check-cold/" in failed
    assert f"region {REGION}" in failed and "grant s3:DeleteObject" in failed
