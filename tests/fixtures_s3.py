"""S3 test fixtures: one moto server on loopback per session, a fresh bucket per test.

Registered for the whole suite through ``pytest_plugins`` in ``tests/conftest.py``.

* ``moto_server`` (session): the endpoint URL of a ``ThreadedMotoServer`` bound to
  ``127.0.0.1`` on a free port.
* ``aws_env``: dummy AWS credentials and region in the environment, profile and IMDS
  lookups disabled; monkeypatch restores the environment afterwards.
* ``s3_bucket``: resets moto (``POST /moto-api/reset``), creates a new bucket and returns
  an :class:`S3Bucket` describing it, with a plain (sync) botocore client for looking
  behind the backend's back.
* ``auth_moto`` (session): a SEPARATE moto server, in a process of its own, that checks
  every request's signature and IAM policies as S3 does (the default one above does not,
  and stays so): IAM users with keys allowed everything, denied ``s3:ListBucket``,
  denied ``s3:DeleteObject``; :meth:`AuthMoto.new_bucket` makes a bucket.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import botocore.session
import pytest

from tests.support.moto import (
    ACCESS_KEY,
    REGION,
    SECRET_KEY,
    IamKey,
    MotoServer,
    S3Bucket,
    enforce_auth,
    iam_key,
    reset_moto,
    s3_policy,
    threaded_server,
)

__all__ = ["AuthMoto", "auth_moto", "aws_env", "moto_client", "moto_server", "s3_bucket"]


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    with threaded_server() as endpoint_url:
        yield endpoint_url


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
    reset_moto(moto_server)
    bucket = S3Bucket(moto_server, f"test-{uuid.uuid4().hex[:16]}", moto_client)
    moto_client.create_bucket(Bucket=bucket.name)
    return bucket


@dataclass(frozen=True)
class AuthMoto:
    """The auth-enforcing moto server and its IAM keys (``auth_moto``)."""

    endpoint_url: str
    admin: IamKey  # allowed everything, IAM included
    no_list: IamKey  # s3:* but s3:ListBucket
    no_delete: IamKey  # s3:* but s3:DeleteObject

    def client(self, service: str, key: IamKey | None = None) -> Any:
        """A sync botocore client signed with ``key`` (the admin's by default)."""
        key = key or self.admin
        return botocore.session.get_session().create_client(
            service, endpoint_url=self.endpoint_url, region_name=REGION,
            aws_access_key_id=key.access_key, aws_secret_access_key=key.secret_key,
        )  # fmt: skip

    def new_user(self, policy: str) -> tuple[str, IamKey]:
        """A fresh IAM user held to ``policy`` and its access key (made by the admin)."""
        user = f"user-{uuid.uuid4().hex[:12]}"
        iam = self.client("iam")
        try:
            iam.create_user(UserName=user)
            self.set_policy(user, policy, iam)
            key = iam.create_access_key(UserName=user)["AccessKey"]
        finally:
            iam.close()
        return user, IamKey(str(key["AccessKeyId"]), str(key["SecretAccessKey"]))

    def set_policy(self, user: str, policy: str, iam: Any = None) -> None:
        """Replace ``user``'s policy (a policy changed while a sidecar runs)."""
        client = iam or self.client("iam")
        try:
            client.put_user_policy(UserName=user, PolicyName="policy", PolicyDocument=policy)
        finally:
            if iam is None:
                client.close()

    def new_bucket(self) -> str:
        """Create a fresh bucket (as the admin); return its name."""
        name = f"auth-{uuid.uuid4().hex[:16]}"
        client = self.client("s3")
        try:
            client.create_bucket(Bucket=name)
        finally:
            client.close()
        return name


@pytest.fixture(scope="session")
def auth_moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthMoto]:
    log = tmp_path_factory.mktemp("auth-moto") / "moto.log"
    with MotoServer(log) as server:
        url = server.endpoint_url
        admin = iam_key(url, "admin", '{"Version": "2012-10-17", "Statement": '
                        '[{"Effect": "Allow", "Action": "*", "Resource": "*"}]}')  # fmt: skip
        no_list = iam_key(url, "no-list", s3_policy("s3:ListBucket"))
        no_delete = iam_key(url, "no-delete", s3_policy("s3:DeleteObject"))
        enforce_auth(url)
        yield AuthMoto(url, admin, no_list, no_delete)
