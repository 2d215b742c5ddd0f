"""Wiring: from validated settings to a running dispatcher (used by ``run`` and tests).

:func:`open_runtime` opens, in order, the backend, the hot store, the catalogue (which
takes the state directory's writer lock) and builds the lease, the cold writer and the
dispatcher. It is an async context manager that closes them all, in reverse order,
whatever happens — so a failed start leaves nothing held.

Jobs the dispatcher runs besides tiering: the retention pass and the config backup
(:mod:`dispatcher.maintenance.config_backup`), each once at start (retention: finishing interrupted
expiries) and then periodically.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from dispatcher import stopped_file
from dispatcher.dispatcher import Dispatcher, Periodic
from dispatcher.lease.lease import Lease
from dispatcher.maintenance.config_backup import ConfigBackup
from dispatcher.maintenance.retention import Retention, RetentionPolicy, StepHook
from dispatcher.metrics import Metrics
from dispatcher.tiering.cold_writer import ColdWriter
from dispatcher.tiering.planner import SegmentPlan
from metadata.catalogue import Catalogue
from tieredstore.backends import backend_options, open_cold
from tieredstore.backends.base import Backend
from tieredstore.backends.counting import CountingBackend
from tieredstore.backends.factory import reach_of
from tieredstore.backends.retry import RetryingBackend, RetryPolicy
from tieredstore.backends.throttled import ThrottledBackend
from tieredstore.clock import Clock, SystemClock
from tieredstore.cold.layout import lease_key
from tieredstore.errors import BackendError, ConfigError
from tieredstore.hot.store import HotStore
from tieredstore.ratelimit import TokenBucket
from tieredstore.settings.loader import Settings

__all__ = ["Runtime", "check_cold_store", "lease_for", "open_runtime"]

log = logging.getLogger(__name__)


async def check_cold_store(settings: Settings) -> None:
    """Probe the cold store once (a listing of the lease key, with a few quick retries)
    before anything is created locally: ``run`` and the maintenance commands call it
    first, so a cold store that does not answer leaves no state dir behind.

    Raises ColdStoreUnreachableError (the one message every command gives for this
    fault) when it does not answer, and ConfigError naming ``cold.url`` when it refuses
    us (no such bucket, access denied), so a misconfigured sidecar stops at start.
    """
    policy = RetryPolicy(max_attempts=3, base_delay=0.5, max_delay=2.0)
    where = f"cold.url={settings.redacted()['cold.url']}"
    backend = open_cold(settings.cold, retry=policy)
    try:
        await backend.list(lease_key(settings.cold.cluster, settings.cold.broker))
    except BackendError as exc:
        raise ConfigError(f"cold store refused the first request: {exc}", where=where) from exc
    finally:
        await backend.close()


@dataclass(slots=True)
class Runtime:
    """Everything a running sidecar holds."""

    settings: Settings
    backend: Backend
    hot: HotStore
    catalogue: Catalogue
    dispatcher: Dispatcher
    metrics: Metrics
    retention: Retention
    #: Paces segment uploads (``tiering.max_bytes_per_second``); a reload sets its rate.
    upload_limit: TokenBucket
    config_backup: ConfigBackup | None = None


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
    on_segment: Callable[[SegmentPlan], None] | None = None,
    on_deletion_step: StepHook | None = None,
) -> AsyncIterator[Runtime]:
    """Open every component for ``settings``; close them all on exit.

    ``backend`` replaces the one the URL names (tests inject fault-injecting wrappers);
    ``metrics`` lets such a wrapper count into the same registry. Requests and bytes are
    counted per attempt (inside the retry wrapper) for a backend opened here, per call
    for an injected one. Segment uploads (the cold writer's writes) are paced by the
    ``tiering.max_bytes_per_second`` token bucket; lease and retention calls are not.
    The dispatcher runs the retention pass every ``retention.interval`` and finishes
    interrupted expiries when it starts; ``on_deletion_step`` observes each step of a
    segment deletion.
    """
    for warning in settings.deprecations():
        log.warning("%s", warning)
    clock = clock or SystemClock()
    metrics = metrics or Metrics()
    policy = retry or RetryPolicy()
    upload_limit = TokenBucket(clock, settings.tiering.max_bytes_per_second)
    metrics.upload_rate_limit.set(upload_limit.rate)
    async with AsyncExitStack() as stack:
        backend = await _backend(settings, stack, backend, metrics, policy, clock)
        runtime = _assemble(
            settings, backend, stack, clock, metrics, policy, upload_limit,
            on_segment, on_deletion_step,
        )  # fmt: skip
        stack.push_async_callback(runtime.dispatcher.close)
        yield runtime


def lease_for(settings: Settings, backend: Backend, clock: Clock) -> Lease:
    """The broker's writer lease as ``settings`` configure it (not acquired yet)."""
    return Lease(
        backend,
        lease_key(settings.cold.cluster, settings.cold.broker),
        clock,
        renew_interval=settings.lease.renew_interval,
        allow_unconditional_writes=settings.cold.allow_unconditional_writes,
    )


def _assemble(
    settings: Settings,
    backend: Backend,
    stack: AsyncExitStack,
    clock: Clock,
    metrics: Metrics,
    policy: RetryPolicy,
    upload_limit: TokenBucket,
    on_segment: Callable[[SegmentPlan], None] | None,
    on_deletion_step: StepHook | None,
) -> Runtime:
    """Build the hot store, catalogue (closed with ``stack``), lease, writer, jobs and
    dispatcher of :func:`open_runtime`."""
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
    lease = lease_for(settings, backend, clock)
    paced = ThrottledBackend(backend, upload_limit, on_wait=metrics.upload_throttled.inc)
    writer = _cold_writer(settings, paced, hot, catalogue, lease, clock, policy, metrics)
    retention = Retention(
        hot=hot, backend=backend, catalogue=catalogue, lease=lease, clock=clock,
        policy=RetentionPolicy.of(settings.retention), metrics=metrics, on_step=on_deletion_step,
    )  # fmt: skip
    backup = _config_backup(settings, backend, lease, clock)
    periodic, startup = _jobs(settings, retention, backup)
    dispatcher = Dispatcher(
        hot=hot,
        backend=backend,
        catalogue=catalogue,
        lease=lease,
        writer=writer,
        clock=clock,
        tiering=settings.tiering,
        spool_dir=settings.state.dir / "spool",
        metrics=metrics,
        on_segment=on_segment,
        periodic=periodic,
        startup=startup,
        stopped_path=settings.state.dir / stopped_file.FILE_NAME,
    )
    return Runtime(
        settings,
        backend,
        hot,
        catalogue,
        dispatcher,
        metrics,
        retention,
        upload_limit=upload_limit,
        config_backup=backup,
    )


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


def _cold_writer(
    settings: Settings,
    backend: Backend,
    hot: HotStore,
    catalogue: Catalogue,
    lease: Lease,
    clock: Clock,
    policy: RetryPolicy,
    metrics: Metrics,
) -> ColdWriter:
    """The segment writer; its uploads go through ``backend`` (the paced one)."""
    return ColdWriter(
        backend,
        hot,
        catalogue,
        cluster=settings.cold.cluster,
        broker=settings.cold.broker,
        writer_id=lease.owner,
        clock=clock,
        batch_bytes=settings.tiering.read_batch_bytes,
        retry=policy,
        on_retry=lambda op: metrics.retries.labels(op).inc(),
    )


def _jobs(
    settings: Settings, retention: Retention, backup: ConfigBackup | None
) -> tuple[list[Periodic], list[Callable[[], Awaitable[object]]]]:
    """The dispatcher's periodic jobs and the jobs it runs once at start."""
    periodic = [Periodic("retention", settings.retention.interval, retention.run_pass)]
    startup: list[Callable[[], Awaitable[object]]] = [retention.resume]
    if backup is not None:
        periodic.append(Periodic("config backup", settings.config_backup.interval, backup.run_pass))
        startup.append(backup.run_pass_logged)
    return periodic, startup


def _config_backup(
    settings: Settings, backend: Backend, lease: Lease, clock: Clock
) -> ConfigBackup | None:
    """The config backup job (None when ``config_backup.enabled`` is false)."""
    if not settings.config_backup.enabled:
        return None
    config_dir = settings.store.config_dir or settings.store.path / "config"
    return ConfigBackup(
        config_dir=Path(config_dir),
        backend=backend,
        lease=lease,
        clock=clock,
        cluster=settings.cold.cluster,
        broker=settings.cold.broker,
        history=settings.config_backup.history,
    )
