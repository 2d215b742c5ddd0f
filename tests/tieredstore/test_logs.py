"""Log formatting and credential redaction."""

from __future__ import annotations

import json
import logging

import pytest

from tieredstore.logs import JsonFormatter, RedactingFilter


def _record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("t", logging.INFO, __file__, 1, msg, args, None)


def test_redacts_secret_env_values_and_credential_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "supersecretvalue123")
    f = RedactingFilter()
    rec = _record(
        "key=%s tok x-amz-security-token:ABCDEF123 Signature=deadbeef00", "supersecretvalue123"
    )
    assert f.filter(rec)
    text = rec.getMessage()
    assert "supersecretvalue123" not in text
    assert "ABCDEF123" not in text
    assert "deadbeef00" not in text
    assert "x-amz-security-token:***" in text
    plain = _record("nothing to hide in offset %d", 42)
    f.filter(plain)
    assert plain.getMessage() == "nothing to hide in offset 42"


def test_json_formatter_one_object_per_line() -> None:
    line = JsonFormatter().format(_record("hello %s", "world"))
    doc = json.loads(line)
    assert doc["message"] == "hello world"
    assert doc["level"] == "info"
    assert doc["ts"].endswith("Z")
