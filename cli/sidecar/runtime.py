"""Wiring: from validated settings to a running dispatcher (used by ``run`` and tests).

:func:`open_runtime` opens, in order, the backend, the hot store and the catalogue
(which takes the state directory's writer lock), and hands them, with the clock, the
metrics and the retry policy, to :func:`tieredstore.dispatcher.assembly.build_dispatcher`, the one
builder of the sidecar's object graph (the lease, the cold writer, the jobs, the
dispatcher and its parts). It is an async context manager that closes them all, in
reverse order, whatever happens — so a failed start leaves nothing held.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from tieredstore.backends import backend_options, open_cold
from tieredstore.backends.base import Backend
from tieredstore.backends.counting import CountingBackend
from tieredstore.backends.factory import reach_of
from tieredstore.backends.retry import RetryingBackend, RetryPolicy
from tieredstore.clock import Clock, SystemClock
from tieredstore.cold.layout import lease_key
from tieredstore.dispatcher.assembly import build_dispatcher
from tieredstore.dispatcher.cold_access import FILE_NAME as COLD_ACCESS_FILE
from tieredstore.dispatcher.cold_access import AccessWatchingBackend, ColdAccess
from tieredstore.dispatcher.dispatcher import Dispatcher
from tieredstore.dispatcher.maintenance.config_backup import ConfigBackup
from tieredstore.dispatcher.maintenance.retention import Retention, StepHook
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.dispatcher.replicas import ReplicaGroup
from tieredstore.dispatcher.tiering.batch.compaction import Compactor
from tieredstore.dispatcher.tiering.rounds import OnCommitted
from tieredstore.errors import BackendError, ColdStoreAccessError, ConfigError
from tieredstore.hot.store import HotStore
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.ratelimit import TokenBucket
from tieredstore.settings.in_force import SettingsInForce
from tieredstore.settings.loader import Settings

__all__ = ["Runtime", "check_cold_store", "open_runtime"]

log = logging.getLogger(__name__)


async def check_cold_store(settings: Settings) -> None:
    """Probe the cold store once (a listing of the lease key, with a few quick retries)
    before anything is created locally: ``run`` and the maintenance commands call it
    first, so a cold store that does not answer leaves no state dir behind.

    Raises ColdStoreUnreachableError (the one message every command gives for this
    fault) when it does not answer, ColdStoreAccessError (one message too) when it
    refuses us (credentials, permission, no such bucket, another region), and
    ConfigError naming ``cold.url`` for any other refusal, so a misconfigured sidecar
    stops at start.
    """
    policy = RetryPolicy(max_attempts=3, base_delay=0.5, max_delay=2.0)
    where = f"cold.url={settings.redacted()['cold.url']}"
    backend = open_cold(settings.cold, retry=policy)
    try:
        await backend.list(lease_key(settings.cold.cluster, settings.cold.broker))
    except ColdStoreAccessError:
        raise
    except BackendError as exc:
        raise ConfigError(f"cold store refused the first request: {exc}", where=where) from exc
    finally:
        await backend.close()


@dataclass(slots=True)
class Runtime:
    """Everything a running sidecar holds."""

    #: The settings in force, which the parts read at each use and a reload replaces.
    in_force: SettingsInForce
    backend: Backend
    hot: HotStore
    catalogue: Catalogue
    dispatcher: Dispatcher
    metrics: Metrics
    retention: Retention
    #: Paces segment uploads at ``tiering.max_bytes_per_second`` in force.
    upload_limit: TokenBucket
    #: Rewrites batch slices as segments.
    compactor: Compactor
    #: This sidecar's part in its broker group (reports, the limit).
    group: ReplicaGroup
    config_backup: ConfigBackup | None = None
    #: What the cold store refuses this sidecar now (``/healthz``, the log, the metric).
    access: ColdAccess | None = None

    @property
    def settings(self) -> Settings:
        """The settings in force now (:attr:`in_force`'s)."""
        return self.in_force.settings


def _counted(backend: Backend, metrics: Metrics) -> CountingBackend:
    return CountingBackend(
        backend,
        on_request=lambda op: metrics.backend_requests.labels(op).inc(),
        on_bytes=lambda op, n: metrics.backend_bytes.labels(op).inc(n),
    )


@asynccontextmanager
async def open_runtime(
    settings: Settings,
    *,
    clock: Clock | None = None,
    backend: Backend | None = None,
    retry: RetryPolicy | None = None,
    metrics: Metrics | None = None,
    on_segment: OnCommitted | None = None,
    on_deletion_step: StepHook | None = None,
) -> AsyncIterator[Runtime]:
    """Open every component for ``settings``; close them all on exit.

    ``backend`` replaces the one the URL names (tests inject fault-injecting wrappers);
    ``metrics`` lets such a wrapper count into the same registry. Requests and bytes are
    counted per attempt (inside the retry wrapper) for a backend opened here, per call
    for an injected one. The rest of the graph (the upload pacing, the jobs, the
    dispatcher; ``on_segment`` and ``on_deletion_step``) is
    :func:`~tieredstore.dispatcher.assembly.build_dispatcher`'s.
    """
    for warning in settings.deprecations():
        log.warning("%s", warning)
    clock = clock or SystemClock()
    metrics = metrics or Metrics()
    policy = retry or RetryPolicy()
    async with AsyncExitStack() as stack:
        access = ColdAccess(metrics, settings.state.dir / COLD_ACCESS_FILE)
        backend = AccessWatchingBackend(
            await _backend(settings, stack, backend, metrics, policy, clock), access
        )
        hot, catalogue = _open_stores(settings, stack)
        built = build_dispatcher(
            settings, backend=backend, hot=hot, catalogue=catalogue, clock=clock,
            metrics=metrics, retry=policy, on_segment=on_segment,
            on_deletion_step=on_deletion_step,
        )  # fmt: skip
        stack.push_async_callback(built.dispatcher.close)
        yield Runtime(
            built.in_force, backend, hot, catalogue, built.dispatcher, metrics, built.retention,
            upload_limit=built.upload_limit, compactor=built.compactor, group=built.group,
            config_backup=built.config_backup, access=access,
        )  # fmt: skip


def _open_stores(settings: Settings, stack: AsyncExitStack) -> tuple[HotStore, Catalogue]:
    """The hot store and the catalogue (closed with ``stack``) of :func:`open_runtime`."""
    commitlog_dir = settings.store.commitlog_dir or None
    hot = HotStore(
        settings.store.path, commitlog_dir=Path(commitlog_dir) if commitlog_dir else None
    )
    catalogue = Catalogue.open(
        settings.state.dir,
        cluster=settings.cold.cluster,
        broker=settings.cold.broker,
        cold_url=settings.cold.url,
    )
    stack.callback(catalogue.close)
    return hot, catalogue


async def _backend(
    settings: Settings,
    stack: AsyncExitStack,
    injected: Backend | None,
    metrics: Metrics,
    policy: RetryPolicy,
    clock: Clock,
) -> Backend:
    """The cold store as the sidecar uses it: counted per attempt inside the retries for
    a backend opened here (closed with ``stack``), counted per call for an injected one."""
    if injected is not None:
        return _counted(injected, metrics)
    inner = open_cold(settings.cold, retry=None)
    stack.push_async_callback(inner.close)
    return RetryingBackend(
        _counted(inner, metrics),
        policy,
        on_retry=lambda op, _attempt, _exc: metrics.retries.labels(op).inc(),
        sleep=clock.sleep,
        reach=reach_of(settings.cold.url, backend_options(settings.cold)),
    )
