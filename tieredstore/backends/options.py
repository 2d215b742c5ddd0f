"""Connection options for backends that talk to a remote store."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tieredstore.errors import ConfigError
from tieredstore.settings.declaration import ColdSettings

__all__ = ["DEFAULT_MULTIPART_THRESHOLD", "BackendOptions"]

#: The ``cold.multipart_threshold`` setting's default, in bytes (declared there only).
DEFAULT_MULTIPART_THRESHOLD: Final[int] = ColdSettings.default_of("multipart_threshold")


@dataclass(frozen=True)
class BackendOptions:
    """How to reach a remote store; every field has a working default.

    * ``endpoint_url`` / ``region``: ``None`` means AWS and the region from the usual
      AWS environment/profile chain.
    * ``access_key`` / ``secret_key`` / ``session_token``: ``None`` means the AWS
      credential chain (environment, profile, instance role). They are excluded from
      ``repr``/``str``, so logging the options never prints a secret.
    * ``multipart_threshold``: S3 objects of at most this many bytes are one PUT; larger
      ones are multipart uploads with parts of ``max(threshold, 5 MiB)``.
    * ``connect_timeout`` / ``read_timeout``: seconds per request; exceeding them raises
      :class:`~tieredstore.errors.BackendTimeoutError`.
    * ``storage_options``: extra keyword arguments for a generic fsspec filesystem
      (``gs://``, ``az://``, ...); not used by memory, POSIX or S3. Hidden from ``repr``
      because it may hold credentials.
    """

    endpoint_url: str | None = None
    region: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    multipart_threshold: int = DEFAULT_MULTIPART_THRESHOLD
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    storage_options: Mapping[str, Any] = field(default_factory=dict, repr=False, hash=False)

    def __post_init__(self) -> None:
        if self.multipart_threshold <= 0:
            raise ConfigError(
                f"multipart_threshold must be positive, got {self.multipart_threshold}"
            )
        for name in ("connect_timeout", "read_timeout"):
            value = getattr(self, name)
            if value <= 0:
                raise ConfigError(f"{name} must be positive seconds, got {value}")
        if (self.access_key is None) != (self.secret_key is None):
            raise ConfigError("access_key and secret_key must be given together")
