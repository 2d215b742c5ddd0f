"""open_backend: schemes to implementations, options, and one-line config errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tieredstore import backends
from tieredstore.backends import (
    BackendOptions,
    FsspecBackend,
    MemoryBackend,
    PosixBackend,
    S3Backend,
    open_backend,
)
from tieredstore.errors import ConfigError


def test_public_names() -> None:
    assert set(backends.__all__) == {
        "Backend",
        "BackendOptions",
        "FsspecBackend",
        "MemoryBackend",
        "ObjectInfo",
        "OnRetry",
        "PosixBackend",
        "RetryPolicy",
        "RetryingBackend",
        "S3Backend",
        "backend_options",
        "open_backend",
        "open_cold",
        "reset_memory_stores",
    }


def test_open_cold_builds_the_backend_the_settings_name(tmp_path: Path) -> None:
    """The one place commands and the sidecar build their cold store."""
    from tieredstore.settings.loader import load_settings

    settings = load_settings(
        env={},
        overrides={
            "store.path": str(tmp_path),
            "cold.url": "s3://bucket/prefix",
            "cold.cluster": "c",
            "cold.broker": "b",
            "cold.endpoint_url": "http://127.0.0.1:9",
            "cold.region": "eu-west-1",
            "cold.multipart_threshold": "8M",
            "state.dir": str(tmp_path / "state"),
        },
    )
    options = backends.backend_options(settings.cold)
    assert (options.endpoint_url, options.region, options.multipart_threshold) == (
        "http://127.0.0.1:9",
        "eu-west-1",
        8 << 20,
    )
    wrapped = backends.open_cold(settings.cold)
    assert isinstance(wrapped, backends.RetryingBackend)
    assert isinstance(wrapped.inner, backends.S3Backend)
    bare = backends.open_cold(settings.cold, retry=None)
    assert isinstance(bare, backends.S3Backend) and bare.url == "s3://bucket/prefix"


async def test_schemes_choose_backends(tmp_path: Path) -> None:
    assert isinstance(open_backend("memory://x"), MemoryBackend)
    assert isinstance(open_backend(str(tmp_path)), PosixBackend)
    assert isinstance(open_backend(tmp_path.as_uri()), PosixBackend)
    s3 = open_backend("s3://bucket/prefix", options=BackendOptions(multipart_threshold=1 << 20))
    assert isinstance(s3, S3Backend)
    assert (s3.bucket, s3.url, s3.multipart_threshold) == ("bucket", "s3://bucket/prefix", 1 << 20)
    await s3.close()
    # No request is made until first use, so an unresolvable host is fine here.
    generic = open_backend("https://example.invalid/cold")
    assert isinstance(generic, FsspecBackend)
    assert generic.is_async
    await generic.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nosuchscheme://x/y", "unknown storage scheme 'nosuchscheme'"),
        ("gs://bucket/x", "needs a package"),
        ("s3://", "not an s3://bucket/prefix URL"),
        ("memory://", "needs a name"),
        ("", "empty"),
    ],
)
def test_bad_urls_are_one_line_config_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        open_backend(url)
    assert "\n" not in str(raised.value)


def test_options_never_show_secrets() -> None:
    options = BackendOptions(
        access_key="AKIDSECRET",
        secret_key="s3cr3t-value",
        session_token="tok3n-value",
        storage_options={"token": "other-s3cr3t"},
    )
    shown = repr(options) + str(options)
    for secret in ("AKIDSECRET", "s3cr3t-value", "tok3n-value", "other-s3cr3t"):
        assert secret not in shown


@pytest.mark.parametrize(
    "kwargs",
    [
        {"multipart_threshold": 0},
        {"connect_timeout": 0},
        {"read_timeout": -1},
        {"access_key": "only-the-key"},
    ],
)
def test_bad_options_are_config_errors(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        BackendOptions(**kwargs)  # type: ignore[arg-type]
