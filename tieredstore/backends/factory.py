"""Open a backend from a URL: the one place that maps schemes to implementations.

=====================================  ======================================
URL                                    backend
=====================================  ======================================
``memory://<name>``                    :class:`MemoryBackend` (process-wide)
``file:///abs/path`` or a plain path   :class:`PosixBackend`
``s3://bucket/prefix``                 :class:`S3Backend`
any other scheme fsspec knows          :class:`FsspecBackend` (best effort)
=====================================  ======================================

With ``retry``, the backend is wrapped in :class:`RetryingBackend`; without it, every
call is tried once (S3's own SDK retries are off, see :mod:`tieredstore.backends.s3`).
A retried backend that runs out of attempts on connection errors or timeouts raises
:class:`~tieredstore.errors.ColdStoreUnreachableError`, whose one message names the
store, its endpoint, what was tried and the timeouts (:func:`~.retry.unreachable`);
:func:`probe` asks for one key that way (the verifier does, before Spark starts).

:func:`open_cold` is the one place a command or the sidecar builds the cold store a
:class:`~tieredstore.settings.declaration.ColdSettings` names (URL, endpoint, region, multipart
threshold); :func:`open_backend` is for a URL alone (an export target, tests).
"""

from __future__ import annotations

import re

from tieredstore.backends.base import Backend
from tieredstore.backends.fsspec_generic import FsspecBackend
from tieredstore.backends.memory import MemoryBackend
from tieredstore.backends.options import BackendOptions
from tieredstore.backends.posix import PosixBackend, posix_root_from_url
from tieredstore.backends.retry import OnRetry, Reach, RetryingBackend, RetryPolicy
from tieredstore.errors import ConfigError
from tieredstore.settings.declaration import ColdSettings

__all__ = [
    "BackendOptions",
    "backend_options",
    "canonical_cold_url",
    "open_backend",
    "open_cold",
    "probe",
    "reach_of",
]

#: The retry policy of one-shot commands (read, gc, repair, restore, export, ...).
COMMAND_RETRY = RetryPolicy()

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
# Schemes handled by a dedicated backend that fsspec also answers to; the generic
# adapter must not take them through an alias.
_ALIASES = {"s3a": "s3", "local": "file"}


def canonical_cold_url(url: str) -> str:
    """The one spelling of the cold store ``url`` names, for comparing two URLs.

    The catalogue records it and refuses another (:mod:`tieredstore.metadata.database`), so two
    spellings of one store must agree and two stores must not:

    * ``/data/cold/``, ``file:///data/cold``, ``file://localhost/data/cold`` →
      ``file:///data/cold``; ``cold`` run from ``/srv`` → ``file:///srv/cold``
    * ``s3a://bkt/p/``, ``s3://key:secret@bkt/p`` → ``s3://bkt/p``
    * ``memory://demo/`` → ``memory://demo``

    The scheme is lower-cased and its aliases resolved, credentials (userinfo) dropped
    (the result is stored and printed), trailing slashes removed. A POSIX path is made
    absolute and its symlinks resolved: it names the directory, however reached. The
    S3 endpoint is not part of it (a renamed endpoint host is the same store). Raises
    ConfigError for a URL :func:`open_backend` would refuse too (a remote ``file://``).
    """
    match = _SCHEME.match(url)
    if match is None or _ALIASES.get(match.group(1).lower(), match.group(1).lower()) == "file":
        rest = url if match is None else "file://" + url[match.end() :]
        root = posix_root_from_url(rest).resolve()
        return "file://" + str(root)  # resolved: no trailing slash but for "/" itself
    scheme = match.group(1).lower()
    scheme = _ALIASES.get(scheme, scheme)
    rest = re.sub(r"^[^/@]*@", "", url[match.end() :]).rstrip("/")
    return f"{scheme}://{rest}"


def open_backend(
    url: str,
    *,
    options: BackendOptions | None = None,
    retry: RetryPolicy | None = None,
    on_retry: OnRetry | None = None,
) -> Backend:
    """Return the backend for ``url`` (not yet connected: remote sessions open lazily).

    ``options`` configure S3 (and, via ``storage_options``, generic fsspec backends);
    memory and POSIX backends ignore them. ``on_retry`` is passed to the retry wrapper.
    An unknown scheme, or one whose fsspec package is missing, raises ConfigError.
    """
    opts = options or BackendOptions()
    match = _SCHEME.match(url)
    if match is None:
        if not url.strip():
            raise ConfigError("empty backend URL")
        backend: Backend = PosixBackend.from_url(url)
    else:
        scheme = match.group(1).lower()
        scheme = _ALIASES.get(scheme, scheme)
        if scheme == "memory":
            backend = MemoryBackend.from_url(url)
        elif scheme == "file":
            backend = PosixBackend.from_url("file://" + url[match.end() :])
        elif scheme == "s3":
            from tieredstore.backends.s3 import S3Backend  # s3fs & co. only when used

            backend = S3Backend("s3://" + url[match.end() :], opts)
        else:
            backend = FsspecBackend(url, opts.storage_options)
    if retry is None:
        return backend
    return RetryingBackend(backend, retry, on_retry=on_retry, reach=reach_of(url, opts))


def reach_of(url: str, options: BackendOptions) -> Reach:
    """How ``url`` is reached, as an unreachable store's message names it (no
    credentials). Only S3 has an endpoint and timeouts of its own."""
    match = _SCHEME.match(url)
    scheme = _ALIASES.get(match.group(1).lower(), match.group(1).lower()) if match else "file"
    shown = re.sub(r"^([^:/]+://)[^/@]*@", r"\1", url)
    if scheme != "s3":
        return Reach(shown)
    return Reach(shown, options.endpoint_url or "", options.connect_timeout, options.read_timeout)


async def probe(url: str, options: BackendOptions, key: str, *, retry: RetryPolicy) -> None:
    """List ``key`` once through a retried backend: ColdStoreUnreachableError when the
    store does not answer (its one message); other errors as the backend raises them."""
    backend = open_backend(url, options=options, retry=retry)
    try:
        await backend.list(key)
    finally:
        await backend.close()


def backend_options(cold: ColdSettings) -> BackendOptions:
    """Backend options from ``[cold]`` (credentials come from the AWS chain, never config)."""
    return BackendOptions(
        endpoint_url=cold.endpoint_url or None,
        region=cold.region or None,
        multipart_threshold=cold.multipart_threshold,
    )


def open_cold(
    cold: ColdSettings,
    *,
    retry: RetryPolicy | None = COMMAND_RETRY,
    on_retry: OnRetry | None = None,
) -> Backend:
    """The cold store ``[cold]`` names (``cold.url`` and its options); ``retry=None``
    gives the bare backend (the sidecar wraps it itself, to count requests inside)."""
    return open_backend(cold.url, options=backend_options(cold), retry=retry, on_retry=on_retry)
