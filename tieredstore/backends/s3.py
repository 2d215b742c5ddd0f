"""An S3 backend on s3fs's async API (AWS, MinIO, moto, any S3-compatible endpoint).

``s3://bucket/prefix`` roots the backend at ``prefix/`` inside ``bucket``. Only s3fs's
async ``_``-prefixed coroutines are used, on a filesystem created with
``asynchronous=True``, so nothing blocks the event loop; requests go through
``_call_s3`` with explicit ``Bucket``/``Key``, so no key is ever re-parsed as a path
(s3fs paths treat ``?versionId=`` specially). The aiobotocore client is
created on first use (or in ``__aenter__``) and closed by :meth:`S3Backend.close`; using
the backend after ``close`` raises BackendError.

Writes: an object of at most ``multipart_threshold`` bytes is one ``PutObject``; a larger
one is a multipart upload with parts of ``max(threshold, 5 MiB)`` (S3's minimum part
size), completed only when every part is in — both are atomic on S3, so readers never
see a prefix. A failed or cancelled multipart upload is aborted. ``write_chunks`` streams:
it holds at most one part in memory and starts a multipart upload only once the stream
outgrows the threshold. An upload nobody could abort (the writer was killed) is a
*leftover*: ``list_leftovers`` lists it and ``delete_leftover`` aborts it, so ``gc``
reaps it past its grace like a POSIX temp file.

Conditional writes: ``create`` is a PutObject with ``If-None-Match: *`` and ``replace``
one with ``If-Match: <ETag>``; S3 (and moto 5) evaluate the condition atomically with the
write. Versions are ETags. A 412 PreconditionFailed (or, for ``replace``, a missing
object) becomes ConditionFailedError; a 409 ConditionalRequestConflict (a concurrent
conditional write in progress) is retryable, and the retry then sees who won.

Retries: each request is tried exactly once here (s3fs and botocore retries are turned
off). Wrap the backend in :class:`~tieredstore.backends.retry.RetryingBackend` to retry,
so every retry is counted in one place and throttling is visible.

Error translation — s3fs turns some botocore errors into builtins (keeping the
``ClientError`` as ``__cause__``) and passes others through, so both layers are read:

==========================================  ==========================
S3 reply / exception                        tieredstore error
==========================================  ==========================
NoSuchKey, 404 (HEAD), FileNotFoundError    ObjectNotFoundError
PreconditionFailed, 412                     ConditionFailedError
ConditionalRequestConflict, 409             BackendUnavailableError
SlowDown, 503, 429, Throttling*             ThrottledError
RequestTimeout, connect/read timeouts       BackendTimeoutError
other 5xx, connection refused/reset         BackendUnavailableError
no credentials, InvalidAccessKeyId,        ColdStoreAccessError
SignatureDoesNotMatch, ExpiredToken,
AccessDenied, 403, NoSuchBucket,
PermanentRedirect, 301 (another region)
other 4xx, other botocore errors            BackendError
==========================================  ==========================

A :class:`~tieredstore.errors.ColdStoreAccessError` (:class:`~tieredstore.errors.AccessFault`)
is one line naming the store, its endpoint and region, the operation and key refused,
where the credentials came from (explicit options, or the AWS chain: environment,
profile, instance role; which one when botocore found any) and what to do, e.g.::

    cold store s3://bkt/tiered: access denied: delete of s3://bkt/tiered/k refused
    (AccessDenied (403): Access Denied); endpoint http://minio:9000, region us-east-1,
    credentials from the environment (AWS_ACCESS_KEY_ID); grant s3:DeleteObject on
    s3://bkt/tiered/* to this key, or run `tieredstore check-cold` to see what it may do
"""

from __future__ import annotations

import asyncio
import builtins
import enum
import errno
import os
from collections.abc import AsyncIterable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Self, cast
from urllib.parse import urlsplit

import aiohttp
import botocore.exceptions
import s3fs

from tieredstore.backends.base import (
    Backend,
    ObjectInfo,
    Versioned,
    check_open,
    failure_error,
    usable_key,
)
from tieredstore.backends.key_rules import check_key, check_prefix, check_range
from tieredstore.backends.options import BackendOptions
from tieredstore.errors import (
    AccessFault,
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    ColdStoreAccessError,
    ConditionFailedError,
    ConfigError,
    ObjectNotFoundError,
    StoreError,
    ThrottledError,
    TieredStoreError,
)

__all__ = ["UPLOAD_MARK", "S3Backend", "access_fault", "parse_s3_url", "translate_s3_error"]

MIN_PART_SIZE: Final = 5 << 20
MAX_PARTS: Final = 10_000

_NOT_FOUND_CODES: Final = frozenset({"NoSuchKey", "NotFound", "404"})
#: Between an object key and an upload id in the key of a leftover multipart upload:
#: ``q/COMMIT_LOG/...#upload=<id>`` (an abort never deletes an object, whatever the key).
UPLOAD_MARK: Final = "#upload="
_THROTTLE_CODES: Final = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "TooManyRequests",
        "TooManyRequestsException",
        "ServiceUnavailable",
        "503",
        "429",
    }
)
_TIMEOUT_CODES: Final = frozenset({"RequestTimeout", "RequestTimeoutException"})
_ACCESS_CODES: Final = {
    "InvalidAccessKeyId": AccessFault.BAD_CREDENTIALS,
    "SignatureDoesNotMatch": AccessFault.BAD_CREDENTIALS,
    "ExpiredToken": AccessFault.BAD_CREDENTIALS,
    "InvalidToken": AccessFault.BAD_CREDENTIALS,
    "TokenRefreshRequired": AccessFault.BAD_CREDENTIALS,
    "InvalidClientTokenId": AccessFault.BAD_CREDENTIALS,
    "AccessDenied": AccessFault.DENIED,
    "AllAccessDisabled": AccessFault.DENIED,
    "403": AccessFault.DENIED,
    "NoSuchBucket": AccessFault.NO_BUCKET,
    "PermanentRedirect": AccessFault.WRONG_REGION,
    "AuthorizationHeaderMalformed": AccessFault.WRONG_REGION,
    "IllegalLocationConstraintException": AccessFault.WRONG_REGION,
    "301": AccessFault.WRONG_REGION,
}
_NO_CREDENTIALS: Final = (
    botocore.exceptions.NoCredentialsError,
    botocore.exceptions.PartialCredentialsError,
    botocore.exceptions.CredentialRetrievalError,
)
#: The IAM action each backend operation needs, for the advice of an access denied.
_ACTIONS: Final = {
    "list": "s3:ListBucket",
    "read": "s3:GetObject",
    "stat": "s3:GetObject",
    "write": "s3:PutObject",
    "delete": "s3:DeleteObject",
    "abort": "s3:AbortMultipartUpload",
}
_FAULT_WORDS: Final = {
    AccessFault.NO_CREDENTIALS: "no credentials",
    AccessFault.BAD_CREDENTIALS: "credentials refused",
    AccessFault.DENIED: "access denied",
    AccessFault.NO_BUCKET: "no such bucket",
    AccessFault.WRONG_REGION: "bucket in another region",
}
#: botocore's credential provider names, as the operator knows them.
_CREDENTIAL_SOURCES: Final = {
    "env": "the environment (AWS_ACCESS_KEY_ID)",
    "shared-credentials-file": "the shared credentials file (profile)",
    "config-file": "the AWS config file (profile)",
    "iam-role": "the instance role",
    "container-role": "the container role",
    "assume-role": "an assumed role (profile)",
    "sso": "AWS SSO (profile)",
    "explicit": "explicit options",
}
_CHAIN: Final = (
    "the AWS chain: environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), profile "
    "(AWS_PROFILE, ~/.aws/credentials, ~/.aws/config), instance role"
)
# Everything an s3fs/aiobotocore call is known to raise for a failed request. Other
# exceptions (TypeError, ...) are bugs and propagate untranslated.
_S3_FAILURES: Final = (
    OSError,  # builtins from s3fs, TimeoutError, aiohttp connection errors
    botocore.exceptions.BotoCoreError,
    botocore.exceptions.ClientError,
    aiohttp.ClientError,
)

_TIMEOUTS: Final = (
    botocore.exceptions.ConnectTimeoutError,
    botocore.exceptions.ReadTimeoutError,
    TimeoutError,  # asyncio, aiohttp and fsspec timeouts subclass it
)
_UNAVAILABLE: Final = (
    botocore.exceptions.ConnectionError,  # EndpointConnectionError: refused, DNS
    botocore.exceptions.HTTPClientError,  # connection closed mid-request
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    ConnectionError,
)


def parse_s3_url(url: str) -> tuple[str, str]:
    """Split ``s3://bucket/prefix`` into ``(bucket, "prefix/")``; the prefix may be ``""``."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ConfigError(f"not an s3://bucket/prefix URL: {url!r}")
    if parts.query or parts.fragment:
        raise ConfigError(f"s3 URL must not have a query or fragment: {url!r}")
    prefix = parts.path.removeprefix("/").rstrip("/")
    if prefix:
        try:
            check_key(prefix, url)
        except BackendError as exc:
            raise ConfigError(f"bad prefix in s3 URL {url!r}: {exc.message}") from exc
        prefix += "/"
    return parts.netloc, prefix


class _State(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class _S3Failure:
    """What a failed request said: the S3 error code and HTTP status, when known."""

    code: str
    status: int
    message: str
    #: The bucket's region when the reply names it (``x-amz-bucket-region``), else "".
    region: str = ""


class S3Backend(Backend):
    """Objects under ``s3://bucket/prefix``; see the module docstring for the contract."""

    def __init__(self, url: str, options: BackendOptions | None = None) -> None:
        opts = options or BackendOptions()
        self.bucket, self._prefix = parse_s3_url(url)
        self.url = f"s3://{self.bucket}/{self._prefix}".rstrip("/")
        self.multipart_threshold = opts.multipart_threshold
        self.part_size = max(opts.multipart_threshold, MIN_PART_SIZE)
        self._fs = _make_filesystem(opts)
        self._endpoint = opts.endpoint_url
        self._region = opts.region
        self._explicit_credentials = opts.access_key is not None
        self._state = _State.OPEN
        #: Called before every S3 request with its kind (read, stat, write, delete, list,
        #: abort): a multipart write makes several, a listing one per page. Set by
        #: :class:`~tieredstore.backends.counting.CountingBackend`.
        self.on_request: Callable[[str], None] | None = None

    async def __aenter__(self) -> Self:
        check_open(self._state is _State.CLOSED, self.url)
        with self._s3_errors("connect", f"{self.bucket}/{self._prefix}"):
            await self._fs.set_session()
        return self

    async def close(self) -> None:
        """Close the aiobotocore client and its HTTP sessions. Safe to call twice."""
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        client = self._fs._s3
        if client is not None:
            self._fs._s3 = None
            await client.close()

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        path = self._path(key)
        check_range(key, start, end, self.url)
        if end is not None and end <= start:
            await self.size(key)  # an empty range of a missing object still raises
            return b""
        bucket, full_key = path.split("/", 1)
        ranged = {"Range": f"bytes={start}-{'' if end is None else end - 1}"}
        try:
            with self._s3_errors("read", path):
                reply = await self._fs._call_s3(
                    "get_object",
                    Bucket=bucket,
                    Key=full_key,
                    **(ranged if start or end is not None else {}),
                )
                body = reply["Body"]
                try:
                    return cast(bytes, await body.read())
                finally:
                    body.close()
        except BackendError as exc:
            if not _is_invalid_range(exc):
                raise
            # 416: the range starts at or past the end (or the object is empty).
            await self.size(key)
            return b""

    async def write(self, key: str, data: bytes) -> None:
        path = self._path(key)
        if len(data) <= self.multipart_threshold:
            await self._put(path, bytes(data))
            return
        part_size = max(self.part_size, -(-len(data) // MAX_PARTS))
        view = memoryview(data)
        async with _MultipartUpload(self, path) as upload:
            for offset in range(0, len(view), part_size):
                await upload.add(bytes(view[offset : offset + part_size]))

    async def write_file(
        self, key: str, path: Path, *, chunk_bytes: int, check: Callable[[], None]
    ) -> int:
        """One PUT of the file if it is within the threshold, else a multipart upload
        read part by part from the file: one part in memory, never the whole object
        twice (as buffering a stream of chunks does). ``check`` runs before each part;
        ``chunk_bytes`` is unused (parts are ``part_size``)."""
        size = (await asyncio.to_thread(os.stat, path)).st_size
        target = self._path(key)
        part_size = size if size <= self.multipart_threshold else self.part_size
        part_size = max(part_size, -(-size // MAX_PARTS), 1)
        parts = range(0, size, part_size)
        if len(parts) <= 1:
            check()
            await self._put(target, await asyncio.to_thread(_read_part, path, 0, size))
            return size
        async with _MultipartUpload(self, target) as upload:
            for offset in parts:
                check()
                want = min(part_size, size - offset)
                await upload.add(await asyncio.to_thread(_read_part, path, offset, want))
        return size

    async def write_chunks(self, key: str, chunks: AsyncIterable[bytes]) -> int:
        """Stream ``chunks`` to S3: one PUT if the total stays within the threshold."""
        path = self._path(key)
        buffer = bytearray()
        total = 0
        iterator = aiter(chunks)
        async for chunk in iterator:
            buffer += chunk
            total += len(chunk)
            if total > self.multipart_threshold:
                break
        else:
            await self._put(path, bytes(buffer))
            return total
        async with _MultipartUpload(self, path) as upload:
            await upload.add_full_parts(buffer)
            async for chunk in iterator:  # resumes where the loop above stopped
                buffer += chunk
                total += len(chunk)
                await upload.add_full_parts(buffer)
            if buffer:
                await upload.add(bytes(buffer))
        return total

    async def create(self, key: str, data: bytes) -> str:
        path = self._path(key)
        return await self._put(path, bytes(data), IfNoneMatch="*")

    async def read_versioned(self, key: str) -> Versioned:
        path = self._path(key)
        bucket, full_key = path.split("/", 1)
        with self._s3_errors("read", path):
            reply = await self._fs._call_s3("get_object", Bucket=bucket, Key=full_key)
            body = reply["Body"]
            try:
                data = cast(bytes, await body.read())
            finally:
                body.close()
        return Versioned(data, str(reply["ETag"]))

    async def replace(self, key: str, data: bytes, *, version: str) -> str:
        path = self._path(key)
        try:
            return await self._put(path, bytes(data), IfMatch=version)
        except ObjectNotFoundError as exc:
            raise ConditionFailedError(
                "object to replace does not exist", where=f"s3://{path}"
            ) from exc

    async def size(self, key: str) -> int:
        path = self._path(key)
        bucket, full_key = path.split("/", 1)
        with self._s3_errors("stat", path):
            head = await self._fs._call_s3("head_object", Bucket=bucket, Key=full_key)
        return int(head["ContentLength"])

    async def delete(self, key: str) -> None:
        path = self._path(key)
        bucket, full_key = path.split("/", 1)
        with self._s3_errors("delete", path):
            await self._fs._call_s3("delete_object", Bucket=bucket, Key=full_key)

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        check_prefix(prefix, self.url)
        check_open(self._state is _State.CLOSED, self.url)
        where = f"{self.bucket}/{self._prefix}{prefix}"
        found: builtins.list[ObjectInfo] = []
        token: dict[str, str] = {}
        while True:
            with self._s3_errors("list", where):
                page = await self._fs._call_s3(
                    "list_objects_v2", Bucket=self.bucket, Prefix=self._prefix + prefix, **token
                )
            for item in page.get("Contents", []):
                key = str(item["Key"])[len(self._prefix) :]
                if key and not key.endswith("/"):  # "folder" markers are not objects
                    found.append(
                        ObjectInfo(key, int(item["Size"]), item["LastModified"].timestamp())
                    )
            if not page.get("IsTruncated"):
                break
            token = {"ContinuationToken": str(page["NextContinuationToken"])}
        found.sort(key=lambda info: info.key)
        return found

    async def list_leftovers(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        """Multipart uploads under ``prefix`` never completed nor aborted (a writer killed
        mid-upload): S3 keeps, and bills, their parts until they are aborted. Each is
        listed as ``<key>`` + :data:`UPLOAD_MARK` + ``<upload id>``, with the bytes of
        its parts and the time it was initiated."""
        check_prefix(prefix, self.url)
        check_open(self._state is _State.CLOSED, self.url)
        where = f"{self.bucket}/{self._prefix}{prefix}"
        found: builtins.list[ObjectInfo] = []
        marker: dict[str, str] = {}
        while True:
            with self._s3_errors("list", where):
                page = await self._fs._call_s3("list_multipart_uploads", Bucket=self.bucket,
                                               Prefix=self._prefix + prefix, **marker)  # fmt: skip
            for upload in page.get("Uploads", []):
                key, upload_id = str(upload["Key"]), str(upload["UploadId"])
                size = await self._parts_size(key, upload_id)
                found.append(ObjectInfo(f"{key[len(self._prefix) :]}{UPLOAD_MARK}{upload_id}",
                                        size, upload["Initiated"].timestamp()))  # fmt: skip
            if not page.get("IsTruncated"):
                break
            marker = {"KeyMarker": str(page["NextKeyMarker"]),
                      "UploadIdMarker": str(page["NextUploadIdMarker"])}  # fmt: skip
        found.sort(key=lambda info: info.key)
        return found

    async def delete_leftover(self, key: str) -> None:
        """Abort the multipart upload ``key`` names (:meth:`list_leftovers`); one already
        completed or aborted is not an error. An abort never touches an object."""
        object_key, mark, upload_id = key.rpartition(UPLOAD_MARK)
        if not mark or not object_key or not upload_id:
            await super().delete_leftover(key)  # refuses: not an upload
        path = self._path(object_key)
        bucket, full_key = path.split("/", 1)
        try:
            with self._s3_errors("delete", path):
                await self._fs._call_s3("abort_multipart_upload", Bucket=bucket, Key=full_key,
                                        UploadId=upload_id)  # fmt: skip
        except (ObjectNotFoundError, BackendError) as exc:
            failure = _client_failure(exc)
            if isinstance(exc, ObjectNotFoundError) or (failure and failure.code == "NoSuchUpload"):
                return  # completed or aborted meanwhile
            raise

    async def _parts_size(self, full_key: str, upload_id: str) -> int:
        """Bytes held by the parts of one upload (its first 1,000 parts)."""
        with self._s3_errors("list", f"{self.bucket}/{full_key}"):
            page = await self._fs._call_s3("list_parts", Bucket=self.bucket, Key=full_key,
                                           UploadId=upload_id)  # fmt: skip
        return sum(int(part["Size"]) for part in page.get("Parts", []))

    async def _put(self, path: str, data: bytes, **condition: str) -> str:
        """One PutObject (``condition``: ``IfNoneMatch`` / ``IfMatch``); return the ETag."""
        bucket, full_key = path.split("/", 1)
        with self._s3_errors("write", path):
            reply = await self._fs._call_s3(
                "put_object", Bucket=bucket, Key=full_key, Body=data, **condition
            )
        return str(reply.get("ETag", ""))

    def _path(self, key: str) -> str:
        checked = usable_key(key, self.url, closed=self._state is _State.CLOSED)
        return f"{self.bucket}/{self._prefix}{checked}"

    @contextmanager
    def _s3_errors(self, op: str, path: str) -> Iterator[None]:
        """Translate a failed request on ``bucket/key`` ``path`` into our errors."""
        if self.on_request is not None and op != "connect":
            self.on_request(op)
        try:
            yield
        except _S3_FAILURES as exc:
            fault = access_fault(exc)
            if fault is not None:
                raise _refused(self, fault, op, f"s3://{path}", exc) from exc
            raise translate_s3_error(exc, op, f"s3://{path}") from exc


class _MultipartUpload:
    """One multipart upload: parts added in order, completed on clean exit, else aborted."""

    def __init__(self, backend: S3Backend, path: str) -> None:
        self._backend = backend
        self._path = path
        self._bucket, self._key = path.split("/", 1)
        self._upload_id = ""
        self._parts: builtins.list[dict[str, Any]] = []

    async def __aenter__(self) -> _MultipartUpload:
        reply = await self._call("write", "create_multipart_upload")
        self._upload_id = str(reply["UploadId"])
        return self

    async def add_full_parts(self, buffer: bytearray) -> None:
        """Upload and remove every whole part at the front of ``buffer``."""
        size = self._backend.part_size
        while len(buffer) >= size:
            await self.add(bytes(buffer[:size]))
            del buffer[:size]

    async def add(self, data: bytes) -> None:
        number = len(self._parts) + 1
        if number > MAX_PARTS:
            raise BackendError(
                f"object exceeds {MAX_PARTS} parts of {self._backend.part_size} bytes",
                where=f"s3://{self._path}",
            )
        reply = await self._call("write", "upload_part", PartNumber=number, Body=data)
        self._parts.append({"PartNumber": number, "ETag": reply["ETag"]})

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None:
            await self._abort()
            return
        try:
            await self._call(
                "write", "complete_multipart_upload", MultipartUpload={"Parts": self._parts}
            )
        except TieredStoreError:
            await self._abort()
            raise

    async def _abort(self) -> None:
        # Best effort: the error that got us here matters more, and a bucket lifecycle
        # rule reaps uploads an abort could not reach (an abort after a complete that
        # did succeed fails with NoSuchUpload, which is fine).
        try:
            await self._call("abort", "abort_multipart_upload")
        except TieredStoreError:
            return

    async def _call(self, op: str, method: str, **kwargs: Any) -> dict[str, Any]:
        upload = {"UploadId": self._upload_id} if self._upload_id else {}
        with self._backend._s3_errors(op, self._path):
            reply = await self._backend._fs._call_s3(
                method, Bucket=self._bucket, Key=self._key, **upload, **kwargs
            )
        return cast(dict[str, Any], reply)


def _make_filesystem(opts: BackendOptions) -> Any:
    client_kwargs = {"region_name": opts.region} if opts.region else {}
    fs = s3fs.S3FileSystem(
        asynchronous=True,
        skip_instance_cache=True,
        use_listings_cache=False,
        endpoint_url=opts.endpoint_url,
        key=opts.access_key,
        secret=opts.secret_key,
        token=opts.session_token,
        client_kwargs=client_kwargs,
        config_kwargs={
            "connect_timeout": opts.connect_timeout,
            "read_timeout": opts.read_timeout,
            "retries": {"total_max_attempts": 1},
        },
    )
    # s3fs retries in its own loop with real sleeps; RetryingBackend owns retries here.
    fs.retries = 1
    return fs


def _read_part(path: Path, offset: int, size: int) -> bytes:
    """``size`` bytes of a local file from ``offset``; a short file is an error."""
    try:
        with open(path, "rb", buffering=0) as f:
            f.seek(offset)
            data = f.read(size)
    except OSError as exc:
        raise StoreError(
            f"cannot read the file to upload: {exc.strerror}", where=str(path)
        ) from exc
    if len(data) != size:
        raise StoreError(f"file ends early ({offset + len(data)} bytes)", where=str(path))
    return data


def _refused(
    backend: S3Backend, fault: AccessFault, op: str, where: str, exc: BaseException
) -> ColdStoreAccessError:
    """The one message of an access fault of ``backend`` (module docstring)."""
    failure = _client_failure(exc)
    if failure is None:
        said = f"{type(exc).__name__}: {exc}"
    else:  # a HEAD's reply has no body: its code is the status
        code = "HTTP" if failure.code == str(failure.status) else failure.code
        said = f"{code} ({failure.status}){': ' + failure.message if failure.message else ''}"
    client = backend._fs._s3
    region = backend._region or (client.meta.region_name if client is not None else None)
    where_to = f"endpoint {backend._endpoint or 'AWS default'}, region {region or 'not set'}"
    if fault is AccessFault.NO_CREDENTIALS:
        credentials = f"no credentials found in {_CHAIN}"
    elif backend._explicit_credentials:
        credentials = "credentials from explicit options (access_key/secret_key)"
    else:
        method = _credential_method(client)
        source = _CREDENTIAL_SOURCES.get(method, method) if method else ""
        credentials = f"credentials from {source or _CHAIN}"
    hint = _advice(fault, op, backend.bucket, backend.url, failure)
    return ColdStoreAccessError(
        f"cold store {backend.url}: {_FAULT_WORDS[fault]}: {op} of {where} refused ({said}); "
        f"{where_to}, {credentials}; {hint}",
        fault=fault,
        op=op,
    )


def access_fault(exc: BaseException) -> AccessFault | None:
    """The access fault behind a failed request (itself or a cause), or None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, _NO_CREDENTIALS):
            return AccessFault.NO_CREDENTIALS
        seen = seen.__cause__
    failure = _client_failure(exc)
    if failure is None:
        return None
    fault = _ACCESS_CODES.get(failure.code)
    if fault is None and failure.status == 301:
        return AccessFault.WRONG_REGION
    if fault is None and failure.status == 403:
        return AccessFault.DENIED
    return fault


def _credential_method(client: Any) -> str:
    """How botocore found ``client``'s credentials (``env``, ``iam-role``, ...), or ""."""
    signer = getattr(client, "_request_signer", None)
    credentials = getattr(signer, "_credentials", None)
    return str(getattr(credentials, "method", "") or "")


def _advice(fault: AccessFault, op: str, bucket: str, url: str, failure: _S3Failure | None) -> str:
    """What to do about ``fault``, in one clause."""
    check = "or run `tieredstore check-cold` to see what this key may do"
    if fault is AccessFault.NO_CREDENTIALS:
        return (
            "export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, set AWS_PROFILE, "
            "or give this host an instance role"
        )
    if fault is AccessFault.BAD_CREDENTIALS:
        return f"check the key id and secret (rotated? an expired session token?), {check}"
    if fault is AccessFault.DENIED:
        action = _ACTIONS.get(op, f"the right to {op}")
        return f"grant {action} on {url}/* to this key in the bucket or IAM policy, {check}"
    if fault is AccessFault.NO_BUCKET:
        return f"create bucket {bucket} or correct cold.url (--cold)"
    region = failure.region if failure is not None else ""
    named = f" ({region})" if region else ""
    return f"set cold.region (or AWS_DEFAULT_REGION) to the bucket's region{named}"


def translate_s3_error(exc: BaseException, op: str, where: str) -> TieredStoreError:
    """Map an s3fs/botocore/aiohttp failure of ``op`` on ``where`` to our hierarchy."""
    failure = _client_failure(exc)
    if failure is not None:
        return _from_reply(failure, op, where)
    known = failure_error(exc, op, where, timeouts=_TIMEOUTS, unavailable=_UNAVAILABLE)
    if known is not None:
        return known
    text = f"{op} failed: {type(exc).__name__}: {exc}"
    if isinstance(exc, OSError) and exc.errno == errno.EBUSY:
        return ThrottledError(text, where=where)  # s3fs's rendering of SlowDown/503
    return BackendError(text, where=where)


def _from_reply(failure: _S3Failure, op: str, where: str) -> TieredStoreError:
    text = f"{op} failed: {failure.code} ({failure.status}): {failure.message}"
    if failure.code in _NOT_FOUND_CODES:
        return ObjectNotFoundError("no such object", where=where)
    if failure.code == "PreconditionFailed" or failure.status == 412:
        return ConditionFailedError(f"{op}: the write condition failed", where=where)
    if failure.code == "ConditionalRequestConflict" or failure.status == 409:
        return BackendUnavailableError(text, where=where)
    if failure.code in _THROTTLE_CODES or failure.status in (429, 503):
        return ThrottledError(text, where=where)
    if failure.code in _TIMEOUT_CODES:
        return BackendTimeoutError(text, where=where)
    if failure.status >= 500:
        return BackendUnavailableError(text, where=where)
    return BackendError(text, where=where)


def _client_failure(exc: BaseException) -> _S3Failure | None:
    """The S3 reply behind ``exc``: itself or a cause, as s3fs chains translated errors."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, botocore.exceptions.ClientError):
            error = seen.response.get("Error", {})
            meta = seen.response.get("ResponseMetadata", {})
            headers = meta.get("HTTPHeaders", {}) or {}
            return _S3Failure(
                code=str(error.get("Code", "")),
                status=int(meta.get("HTTPStatusCode", 0) or 0),
                message=str(error.get("Message", "")),
                region=str(error.get("Region") or headers.get("x-amz-bucket-region", "")),
            )
        seen = seen.__cause__
    return None


def _is_invalid_range(exc: BackendError) -> bool:
    failure = _client_failure(exc)
    return failure is not None and (failure.code == "InvalidRange" or failure.status == 416)
