"""Logging setup for the command line: human-readable text or one JSON object per line."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Callable

from tieredstore.humanize import iso_time

__all__ = ["JsonFormatter", "RedactingFilter", "before_each_line", "configure_logging"]

_TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts (ISO-8601 UTC), level, logger, message, extras."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "ts": iso_time(int(record.created) * 1000 + int(record.msecs), timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


#: Header and query fields that carry credentials in S3 request logs.
_SECRET_FIELDS = re.compile(
    r"(?i)(x-amz-security-token[:=]\s*|X-Amz-Security-Token=|Signature=|"
    r"aws_secret_access_key[\"']?\s*[:=]\s*[\"']?|aws_session_token[\"']?\s*[:=]\s*[\"']?)"
    r"[^\s&\"',;]+"
)
_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")


class RedactingFilter(logging.Filter):
    """Masks credentials in every record a handler emits.

    Two nets: the values of the AWS secret environment variables wherever they appear,
    and any credential-bearing field (session token, signature) by pattern, so a
    library that logs requests (botocore at debug level) cannot leak them.
    """

    def __init__(self) -> None:
        super().__init__()
        self.secrets = [os.environ[v] for v in _SECRET_ENV if len(os.environ.get(v, "")) >= 8]

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return _SECRET_FIELDS.sub(lambda m: m.group(1) + "***", text)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = self.redact(message)
        if clean != message or record.args:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self.redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


#: Called before each log line is written (e.g. to end a progress line on the same stream).
_BEFORE_LINE: list[Callable[[], None]] = []


def before_each_line(hook: Callable[[], None]) -> Callable[[], None]:
    """Call ``hook`` before every log line :func:`configure_logging`'s handler writes.

    A progress display that rewrites one stderr line registers its "end the line" here,
    so a log line never starts in the middle of it (``…(111.9 MB/s)2026-11-25 … INFO``).
    Survives a reconfiguration (SIGHUP). Returns the function that unregisters it.
    """
    _BEFORE_LINE.append(hook)

    def remove() -> None:
        if hook in _BEFORE_LINE:
            _BEFORE_LINE.remove(hook)

    return remove


class _LineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stderr handler that runs the :func:`before_each_line` hooks first."""

    def emit(self, record: logging.LogRecord) -> None:
        for hook in list(_BEFORE_LINE):
            hook()
        super().emit(record)


def configure_logging(fmt: str = "text", level: str = "info") -> None:
    """Send logs to stderr in ``fmt`` (text | json) at ``level``; replaces handlers.

    Every line passes :class:`RedactingFilter`; botocore's request signer never logs
    below INFO (its debug output is the canonical request, credentials and all).
    """
    handler = _LineHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(_TEXT_FORMAT))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Third-party chatter (HTTP clients) stays at WARNING unless debugging.
    for noisy in ("aiobotocore", "botocore", "s3fs", "fsspec", "urllib3", "py4j"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
    logging.getLogger("botocore.auth").setLevel(logging.INFO)
