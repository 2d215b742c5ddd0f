"""A moto S3 server on loopback for tests and benchmarks: real S3 requests, conditional
ones included (``If-None-Match``, ``If-Match``), nothing ever reaching AWS.

* :func:`threaded_server`: moto in a thread of this process (the test suite's
  session-wide server);
* :class:`MotoServer`: moto in a process of its own, so it never shares the measuring
  process's GIL, counting requests from its access log (the benchmarks);
* :class:`S3Bucket`: one bucket on either, with backend options and a plain botocore
  client for looking behind the backend's back;
* the dummy credentials and region both use (:data:`AWS_ENV` for subprocesses);
* IAM on a :class:`MotoServer`: :func:`iam_key` makes a user held to a policy
  (:func:`s3_policy`: ``s3:*`` but what it denies) and its key, then :func:`enforce_auth`
  turns on moto's checking of signatures and policies, as on S3 (the access-fault tests).
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from tieredstore.backends.options import BackendOptions

__all__ = [
    "ACCESS_KEY",
    "AWS_ENV",
    "REGION",
    "SECRET_KEY",
    "IamKey",
    "MotoServer",
    "S3Bucket",
    "enforce_auth",
    "iam_key",
    "reset_moto",
    "s3_policy",
    "threaded_server",
]

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"
#: The environment a subprocess (a sidecar under test) needs to reach moto.
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": ACCESS_KEY,
    "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
    "AWS_DEFAULT_REGION": REGION,
}


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

    def fsspec_options(self) -> dict[str, Any]:
        """The same place and credentials as fsspec storage options (for s3fs: the
        verifier's ``storage_options``, the Spark data source's ``storage.*``)."""
        return {
            "endpoint_url": self.endpoint_url,
            "key": ACCESS_KEY,
            "secret": SECRET_KEY,
            "client_kwargs": {"region_name": REGION},
        }


def reset_moto(endpoint_url: str) -> None:
    """Drop every bucket and object (moto keeps them in memory)."""
    request = urllib.request.Request(f"{endpoint_url}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=30) as reply:
        reply.read()


def _one_request_per_key(app: Any) -> Any:
    """``app`` serving the requests for one key one at a time, each answered whole.

    S3 decides each conditional write (``If-None-Match: *``, ``If-Match``) atomically,
    and a read of an object being replaced returns the old object or the new one, whole.
    moto does neither across its request threads: it checks a condition and then
    stores, so two concurrent creates of one key can both pass on a busy host; and a
    replaced object's buffer is closed under a read still serving it (a 500, "I/O
    operation on closed file", seen on a lease record read while it was renewed).
    Serialising the requests of each path (``/bucket/key``; striped over 64 locks)
    gives the suite S3's guarantees while requests for other keys (a lease renewal
    beside a segment upload) still run side by side.

    The request body is read before the lock is taken and the response is sent after
    it is released: a client frozen mid-request (the SIGSTOP tests) holds no lock.
    """
    locks = tuple(threading.Lock() for _ in range(64))

    def wsgi(environ: dict[str, Any], start_response: Any) -> Any:
        stream = environ["wsgi.input"]
        length = environ.get("CONTENT_LENGTH")
        if length:
            environ["wsgi.input"] = io.BytesIO(stream.read(int(length)))
        elif environ.get("wsgi.input_terminated"):  # chunked: werkzeug ends the stream
            environ["wsgi.input"] = io.BytesIO(stream.read())
        with locks[hash(environ.get("PATH_INFO", "")) % len(locks)]:
            result = app(environ, start_response)
            try:
                return list(result)
            finally:
                if hasattr(result, "close"):
                    result.close()

    return wsgi


@contextmanager
def threaded_server() -> Iterator[str]:
    """Run moto in a thread on a free loopback port, each key's requests atomic as on S3
    (:func:`_one_request_per_key`); yield its endpoint URL."""
    from moto.moto_server import werkzeug_app
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from werkzeug.serving import make_server

    class _Server(ThreadedMotoServer):
        def _server_entry(self) -> None:
            app = werkzeug_app.DomainDispatcherApplication(werkzeug_app.create_backend_app)
            self._server = make_server(
                self._ip_address, self._port, _one_request_per_key(app), True,
                request_handler=werkzeug_app.MotoRequestHandler,
            )  # fmt: skip
            self._server_ready_event.set()
            self._server.serve_forever()

    server = _Server(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        # stop() shuts the serve loop down but leaves the listening socket open.
        if server._server is not None:
            server._server.server_close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class MotoServer:
    """A moto S3 server on loopback in its own process (so it never shares our GIL).

    ``with MotoServer(log) as moto: moto.endpoint_url``; :meth:`reset` forgets every
    bucket and object (moto keeps them in memory). ``env`` adds to the server's
    environment: ``{"INITIAL_NO_AUTH_ACTION_COUNT": "0"}`` makes it check every
    request's signature and IAM policies, as S3 does (the access-fault tests).
    """

    def __init__(self, log: Path, env: Mapping[str, str] | None = None) -> None:
        self.log = log
        self._env = {**os.environ, **(env or {})}
        self._mark = 0
        self.port = _free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> MotoServer:
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=out,
                stderr=out,
                env=self._env,
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                self.reset()
                return self
            except OSError:
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.__exit__(None, None, None)
                    raise RuntimeError(f"moto server did not start; see {self.log}") from None
                time.sleep(0.2)

    def requests(self) -> Counter[str]:
        """HTTP requests the server logged since the last call, by method.

        Read from its access log (``"PUT /bucket/key HTTP/1.1" 200``; some statuses are
        coloured with ANSI codes); the set-up probes of :meth:`reset` are excluded.
        """
        text = self.log.read_bytes()[self._mark :].decode(errors="replace")
        self._mark += len(text.encode())
        methods = re.findall(r'"(?:\x1b\[[0-9;]*m)*(GET|PUT|POST|HEAD|DELETE) (/[^ ]*) HTTP', text)
        return Counter(m for m, path in methods if not path.startswith("/moto-api"))

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def reset(self) -> None:
        """Drop every bucket and object."""
        reset_moto(self.endpoint_url)

    @property
    def pid(self) -> int | None:
        """The server process's id while it runs."""
        return self._proc.pid if self._proc is not None else None


@dataclass(frozen=True)
class IamKey:
    """An access key of an IAM user on an auth-enforcing moto server
    (:func:`iam_key`); ``env`` is the environment a command run with it needs."""

    access_key: str
    secret_key: str

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_DEFAULT_REGION": REGION}  # fmt: skip


def s3_policy(*denied: str) -> str:
    """An IAM policy document allowing ``s3:*`` on everything but the ``denied`` actions
    (``"s3:DeleteObject"``, ...), which an explicit Deny refuses, as on AWS."""
    statements: list[dict[str, Any]] = [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]
    if denied:
        statements.append({"Effect": "Deny", "Action": list(denied), "Resource": "*"})
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


def iam_key(endpoint_url: str, user: str, policy: str) -> IamKey:
    """Create IAM ``user`` with inline ``policy`` and an access key on the moto server at
    ``endpoint_url``: call it while the server does not check requests yet (before
    :func:`enforce_auth`); afterwards the key is held to the policy."""
    import botocore.session

    iam = botocore.session.get_session().create_client(
        "iam", endpoint_url=endpoint_url, region_name=REGION,
        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
    )  # fmt: skip
    try:
        iam.create_user(UserName=user)
        iam.put_user_policy(UserName=user, PolicyName=f"{user}-policy", PolicyDocument=policy)
        key = iam.create_access_key(UserName=user)["AccessKey"]
    finally:
        iam.close()
    return IamKey(str(key["AccessKeyId"]), str(key["SecretAccessKey"]))


def enforce_auth(endpoint_url: str) -> None:
    """From now on the moto server at ``endpoint_url`` checks every request's signature
    and IAM policies, as S3 does (moto's ``INITIAL_NO_AUTH_ACTION_COUNT`` set to 0)."""
    request = urllib.request.Request(
        f"{endpoint_url}/moto-api/reset-auth",
        data=b"0",
        method="POST",
        headers={"Content-Type": "text/plain"},  # else moto reads no body
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        reply.read()
