"""S3 specifics the contract suite cannot see: multipart use, aborts, error translation."""

from __future__ import annotations

import asyncio
import errno
import gc
import socket
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import botocore.exceptions
import pytest

from tests.support.moto import S3Bucket
from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.backends import S3Backend
from tieredstore.backends.options import BackendOptions
from tieredstore.backends.s3 import UPLOAD_MARK, parse_s3_url, translate_s3_error
from tieredstore.clock import VirtualClock
from tieredstore.cold.layout import broker_prefix, lease_key
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.dispatcher.maintenance.gc import GarbageKind, delete_garbage, scan_garbage
from tieredstore.errors import (
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    ConfigError,
    ObjectNotFoundError,
    ThrottledError,
    TieredStoreError,
)

MiB = 1 << 20


async def chunks_of(data: bytes, step: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), step):
        await asyncio.sleep(0)
        yield data[i : i + step]


def etag(bucket: S3Bucket, key: str) -> str:
    return str(bucket.client.head_object(Bucket=bucket.name, Key=key)["ETag"]).strip('"')


# --- multipart -------------------------------------------------------------------------


@pytest.mark.s3
async def test_small_objects_are_one_put(s3_bucket: S3Bucket) -> None:
    async with S3Backend(s3_bucket.url, s3_bucket.options(multipart_threshold=5 * MiB)) as b:
        await b.write("small", b"x" * (5 * MiB))
        await b.write_chunks("small-streamed", chunks_of(b"y" * (5 * MiB), MiB))

    assert "-" not in etag(s3_bucket, "small")
    assert "-" not in etag(s3_bucket, "small-streamed")


@pytest.mark.s3
async def test_objects_above_the_threshold_are_multipart(s3_bucket: S3Bucket) -> None:
    data = bytes(range(256)) * (11 * MiB // 256)
    async with S3Backend(s3_bucket.url, s3_bucket.options(multipart_threshold=5 * MiB)) as b:
        await b.write("whole", data)
        await b.write_chunks("streamed", chunks_of(data, 300_000))
        assert await b.read("whole") == data
        assert await b.read("streamed") == data

    # A multipart ETag ends in "-<parts>": 11 MiB in 5 MiB parts is 5 + 5 + 1.
    assert etag(s3_bucket, "whole").endswith("-3")
    assert etag(s3_bucket, "streamed").endswith("-3")


@pytest.mark.s3
async def test_a_file_is_one_put_or_parts_read_from_it(s3_bucket: S3Bucket, tmp_path: Path) -> None:
    data = bytes(range(256)) * (11 * MiB // 256)
    (tmp_path / "big").write_bytes(data)
    (tmp_path / "small").write_bytes(data[: 5 * MiB])
    checks: list[int] = []
    async with S3Backend(s3_bucket.url, s3_bucket.options(multipart_threshold=5 * MiB)) as b:
        for name in ("big", "small"):
            size = await b.write_file(
                name, tmp_path / name, chunk_bytes=MiB, check=lambda: checks.append(1)
            )
            assert await b.read(name) == (tmp_path / name).read_bytes()
            assert size == (tmp_path / name).stat().st_size

    assert etag(s3_bucket, "big").endswith("-3")  # three parts, the lease checked before each
    assert "-" not in etag(s3_bucket, "small")
    assert len(checks) == 3 + 1


@pytest.mark.s3
async def test_a_failed_stream_aborts_its_multipart_upload(s3_bucket: S3Bucket) -> None:
    async def failing() -> AsyncIterator[bytes]:
        yield b"x" * (12 * MiB)  # two parts uploaded before the failure
        raise OSError(errno.EIO, "producer failed")

    async with S3Backend(s3_bucket.url, s3_bucket.options(multipart_threshold=5 * MiB)) as b:
        with pytest.raises(OSError, match="producer failed"):
            await b.write_chunks("partial", failing())
        assert not await b.exists("partial")

    assert s3_bucket.client.list_multipart_uploads(Bucket=s3_bucket.name).get("Uploads", []) == []


@pytest.mark.s3
async def test_an_upload_a_killed_writer_left_is_a_leftover_gc_aborts(
    s3_bucket: S3Bucket,
) -> None:
    # A writer killed between its parts and its complete: S3 keeps (and bills) the parts.
    prefix = broker_prefix(CLUSTER, BROKER)
    key = f"{prefix}/Orders/0/COMMIT_LOG/00000000000000000000"
    c, bucket = s3_bucket.client, s3_bucket.name
    upload = c.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    c.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"p" * (5 * MiB))
    c.put_object(Bucket=bucket, Key=key, Body=b"an object of the same name")
    other = c.create_multipart_upload(Bucket=bucket, Key="elsewhere/x")["UploadId"]
    leftover = f"{key}{UPLOAD_MARK}{upload}"
    async with S3Backend(s3_bucket.url, s3_bucket.options()) as b:
        found = await b.list_leftovers(prefix + "/")
        assert [(i.key, i.size) for i in found] == [(leftover, 5 * MiB)]
        # The time it was initiated (moto answers one fixed date for every upload).
        (raw,) = [u for u in c.list_multipart_uploads(Bucket=bucket)["Uploads"] if u["Key"] == key]
        assert found[0].mtime == raw["Initiated"].timestamp()
        with pytest.raises(BackendError, match="not a leftover"):
            await b.delete_leftover(key)  # an object is never deleted this way
        report = await scan_garbage(b, cluster=CLUSTER, broker=BROKER, grace_s=60,
                                    now_ms=int(found[0].mtime * 1000) + 61_000)  # fmt: skip
        assert [(g.key, g.kind, g.size) for g in report.garbage] == [
            (leftover, GarbageKind.LEFTOVER, 5 * MiB)
        ]
        lease = Lease(b, lease_key(CLUSTER, BROKER), VirtualClock())
        await lease.acquire(wait=False)
        assert await delete_garbage(report, backend=b, lease=lease) == 1
        await b.delete_leftover(leftover)  # idempotent: already aborted
        assert await b.list_leftovers(prefix + "/") == []
        assert await b.read(key) == b"an object of the same name"

    remaining = c.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert [(u["Key"], u["UploadId"]) for u in remaining] == [("elsewhere/x", other)]


@pytest.mark.s3
async def test_prefix_roots_the_keys(s3_bucket: S3Bucket) -> None:
    async with S3Backend(f"{s3_bucket.url}/cold/root/", s3_bucket.options()) as b:
        await b.write("k/1", b"x")
        assert [i.key for i in await b.list()] == ["k/1"]
    reply = s3_bucket.client.get_object(Bucket=s3_bucket.name, Key="cold/root/k/1")
    with reply["Body"] as body:
        assert body.read() == b"x"


# --- lifecycle -------------------------------------------------------------------------


@pytest.mark.s3
async def test_close_releases_the_http_session(s3_bucket: S3Bucket) -> None:
    backend = S3Backend(s3_bucket.url, s3_bucket.options())
    await backend.write("k", b"x")
    await backend.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del backend
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


@pytest.mark.s3
async def test_use_after_close_is_an_error(s3_bucket: S3Bucket) -> None:
    backend = S3Backend(s3_bucket.url, s3_bucket.options())
    await backend.close()
    with pytest.raises(BackendError, match="closed"):
        await backend.read("k")
    with pytest.raises(BackendError, match="closed"):
        await backend.list()


# --- errors from a real endpoint -------------------------------------------------------


@pytest.mark.s3
async def test_missing_bucket_is_a_backend_error(s3_bucket: S3Bucket) -> None:
    async with S3Backend(f"s3://{s3_bucket.name}-missing", s3_bucket.options()) as b:
        with pytest.raises(BackendError, match="NoSuchBucket") as write_err:
            await b.write("k", b"x")
        with pytest.raises(BackendError, match="NoSuchBucket"):
            await b.read("k")
        with pytest.raises(BackendError, match="NoSuchBucket"):
            await b.list()
    assert not isinstance(write_err.value, ObjectNotFoundError)
    assert f"s3://{s3_bucket.name}-missing/k" in str(write_err.value)


@pytest.fixture
def free_port() -> int:
    """A loopback port nothing listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections (kernel backlog) but never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


@pytest.mark.s3
@pytest.mark.usefixtures("aws_env")
async def test_unreachable_endpoint_is_unavailable(free_port: int) -> None:
    options = BackendOptions(endpoint_url=f"http://127.0.0.1:{free_port}", connect_timeout=2)
    async with S3Backend("s3://bucket", options) as b:
        with pytest.raises(BackendUnavailableError):
            await b.write("k", b"x")
        with pytest.raises(BackendUnavailableError):
            await b.read("k")
        with pytest.raises(BackendUnavailableError):
            await b.list()


@pytest.mark.s3
@pytest.mark.usefixtures("aws_env")
async def test_an_endpoint_that_never_answers_times_out(silent_port: int) -> None:
    options = BackendOptions(endpoint_url=f"http://127.0.0.1:{silent_port}", read_timeout=0.2)
    async with S3Backend("s3://bucket", options) as b:
        with pytest.raises(BackendTimeoutError):
            await b.read("k")


# --- translation table -----------------------------------------------------------------


def client_error(code: str, status: int) -> botocore.exceptions.ClientError:
    reply = {
        "Error": {"Code": code, "Message": f"{code} says no"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return botocore.exceptions.ClientError(reply, "GetObject")


def as_s3fs_raises(error: Exception, builtin: OSError) -> OSError:
    """What s3fs raises: a builtin with the ClientError as its cause."""
    builtin.__cause__ = error
    return builtin


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (client_error("NoSuchKey", 404), ObjectNotFoundError),
        (client_error("404", 404), ObjectNotFoundError),
        (client_error("SlowDown", 503), ThrottledError),
        (client_error("ServiceUnavailable", 503), ThrottledError),
        (client_error("ThrottlingException", 400), ThrottledError),
        (client_error("TooManyRequests", 429), ThrottledError),
        (client_error("RequestTimeout", 400), BackendTimeoutError),
        (client_error("InternalError", 500), BackendUnavailableError),
        (client_error("BadGateway", 502), BackendUnavailableError),
        (client_error("AccessDenied", 403), BackendError),
        (client_error("NoSuchBucket", 404), BackendError),
        (client_error("InvalidArgument", 400), BackendError),
        (as_s3fs_raises(client_error("SlowDown", 503), OSError(errno.EBUSY, "x")), ThrottledError),
        (
            as_s3fs_raises(client_error("NoSuchKey", 404), FileNotFoundError("x")),
            ObjectNotFoundError,
        ),
        (as_s3fs_raises(client_error("NoSuchBucket", 404), FileNotFoundError("x")), BackendError),
        (as_s3fs_raises(client_error("AccessDenied", 403), PermissionError("x")), BackendError),
        (OSError(errno.EBUSY, "SlowDown"), ThrottledError),
        (FileNotFoundError("gone"), ObjectNotFoundError),
        (PermissionError("denied"), BackendError),
        (
            botocore.exceptions.EndpointConnectionError(endpoint_url="http://x"),
            BackendUnavailableError,
        ),
        (
            botocore.exceptions.ConnectionClosedError(endpoint_url="http://x"),
            BackendUnavailableError,
        ),
        (botocore.exceptions.ConnectTimeoutError(endpoint_url="http://x"), BackendTimeoutError),
        (botocore.exceptions.ReadTimeoutError(endpoint_url="http://x"), BackendTimeoutError),
        (TimeoutError(), BackendTimeoutError),
        (ConnectionResetError(), BackendUnavailableError),
        (botocore.exceptions.NoCredentialsError(), BackendError),
    ],
)
def test_translation(exc: Exception, expected: type[TieredStoreError]) -> None:
    translated = translate_s3_error(exc, "read", "s3://b/k")
    assert type(translated) is expected
    assert "s3://b/k" in str(translated)


# --- URLs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [
        ("s3://b", "b", ""),
        ("s3://b/", "b", ""),
        ("s3://b/p", "b", "p/"),
        ("s3://b/p/q/", "b", "p/q/"),
    ],
)
def test_parse_s3_url(url: str, bucket: str, prefix: str) -> None:
    assert parse_s3_url(url) == (bucket, prefix)


@pytest.mark.parametrize("url", ["s3://", "s3:///p", "s3://b/a/../c", "s3://b//x", "s3://b/p?x=1"])
def test_bad_s3_urls(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_s3_url(url)
