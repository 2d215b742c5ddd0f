"""S3 test fixtures: one moto server on loopback per session, a fresh bucket per test.

Registered for the whole suite through ``pytest_plugins`` in ``tests/conftest.py``.

* ``moto_server`` (session): the endpoint URL of a ``ThreadedMotoServer`` bound to
  ``127.0.0.1`` on a free port.
* ``aws_env``: dummy AWS credentials and region in the environment, profile and IMDS
  lookups disabled; monkeypatch restores the environment afterwards.
* ``s3_bucket``: resets moto (``POST /moto-api/reset``), creates a new bucket and returns
  an :class:`S3Bucket` describing it, with a plain (sync) botocore client for looking
  behind the backend's back.
"""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import botocore.session
import pytest
from moto.server import ThreadedMotoServer

from tieredstore.backends.options import BackendOptions

__all__ = ["S3Bucket", "aws_env", "moto_client", "moto_server", "s3_bucket"]

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Bucket:
    """A bucket on the moto server; ``url`` is ``s3://<name>``.

    ``client`` is a sync botocore S3 client on the same server (fine in tests, never
    from the event loop in library code).
    """

    endpoint_url: str
    name: str
    client: Any

    @property
    def url(self) -> str:
        return f"s3://{self.name}"

    def options(self, **changes: Any) -> BackendOptions:
        """Backend options pointing at moto, with explicit dummy credentials."""
        base = BackendOptions(
            endpoint_url=self.endpoint_url,
            region=REGION,
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
        )
        return replace(base, **changes)


def _reset_moto(endpoint_url: str) -> None:
    request = urllib.request.Request(f"{endpoint_url}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=30) as reply:
        reply.read()


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        # stop() shuts the serve loop down but leaves the listening socket open.
        if server._server is not None:
            server._server.server_close()


@pytest.fixture(scope="session")
def moto_client(moto_server: str) -> Iterator[Any]:
    client = botocore.session.get_session().create_client(
        "s3",
        endpoint_url=moto_server,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def s3_bucket(moto_server: str, moto_client: Any, aws_env: None) -> S3Bucket:
    _reset_moto(moto_server)
    bucket = S3Bucket(moto_server, f"test-{uuid.uuid4().hex[:16]}", moto_client)
    moto_client.create_bucket(Bucket=bucket.name)
    return bucket
