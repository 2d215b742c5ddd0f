"""Wiring: from validated settings to a running dispatcher (used by ``run`` and tests).

:func:`open_runtime` opens, in order, the backend, the hot store, the catalogue (which
takes the state directory's writer lock) and builds the lease, the cold writer and the
dispatcher. It is an async context manager that closes them all, in reverse order,
whatever happens — so a failed start leaves nothing held.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from dispatcher.coldio import ColdWriter
from dispatcher.lease import Lease
from dispatcher.metrics import Metrics
from dispatcher.planner import Limits, SegmentPlan
from dispatcher.retention import Retention, RetentionPolicy, StepHook
from dispatcher.service import Dispatcher, DispatcherConfig, Periodic
from dispatcher.topic_filter import TopicFilter
from metadata.catalogue import Catalogue
from tieredstore.backends import open_backend
from tieredstore.backends.base import Backend
from tieredstore.backends.options import BackendOptions
from tieredstore.backends.retry import RetryingBackend, RetryPolicy
from tieredstore.clock import Clock, SystemClock
from tieredstore.config import Settings
from tieredstore.hotstore import HotStore
from tieredstore.layout import lease_key

__all__ = ["Runtime", "backend_options", "dispatcher_config", "open_runtime"]


def backend_options(settings: Settings) -> BackendOptions:
    """Backend options from settings (credentials come from the AWS chain, never config)."""
    return BackendOptions(
        endpoint_url=settings["cold.endpoint_url"] or None,
        region=settings["cold.region"] or None,
        multipart_threshold=settings["cold.multipart_threshold"],
    )


def dispatcher_config(settings: Settings) -> DispatcherConfig:
    return DispatcherConfig(
        limits=Limits(
            max_bytes=settings["tiering.segment_max_bytes"],
            max_messages=settings["tiering.segment_max_messages"],
            max_age_ms=int(settings["tiering.segment_max_age"] * 1000),
        ),
        tick_interval=settings["tiering.tick_interval"],
        concurrency=settings["tiering.concurrency"],
        read_batch_bytes=settings["tiering.read_batch_bytes"],
        init_policy=settings["tiering.init_policy"],
        guard=settings["tiering.guard"] == "checkpoint",
        guard_age_ms=int(settings["tiering.guard_age"] * 1000),
        topic_filter=TopicFilter.from_settings(settings),
        lease_renew_interval=settings["lease.renew_interval"],
    )


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
    ``metrics`` lets such a wrapper count into the same registry.
    The dispatcher runs the retention pass every ``retention.interval`` and finishes
    interrupted expiries when it starts; ``on_deletion_step`` observes each step of a
    segment deletion.
    """
    clock = clock or SystemClock()
    metrics = metrics or Metrics()
    policy = retry or RetryPolicy()
    async with AsyncExitStack() as stack:
        if backend is None:
            inner = open_backend(settings.cold_url, options=backend_options(settings))
            stack.push_async_callback(inner.close)
            backend = RetryingBackend(
                inner,
                policy,
                on_retry=lambda op, _attempt, _exc: metrics.retries.labels(op).inc(),
                sleep=clock.sleep,
            )
        commitlog_dir = settings["store.commitlog_dir"] or None
        hot = HotStore(
            settings.store_path, commitlog_dir=Path(commitlog_dir) if commitlog_dir else None
        )
        catalogue = Catalogue.open(
            settings.state_dir, cluster=settings.cluster, broker=settings.broker
        )
        stack.callback(catalogue.close)
        lease = Lease(
            backend,
            lease_key(settings.cluster, settings.broker),
            clock,
            renew_interval=settings["lease.renew_interval"],
        )
        writer = ColdWriter(
            backend,
            hot,
            catalogue,
            cluster=settings.cluster,
            broker=settings.broker,
            writer_id=lease.owner,
            clock=clock,
            batch_bytes=settings["tiering.read_batch_bytes"],
            retry=policy,
            on_retry=lambda op: metrics.retries.labels(op).inc(),
        )
        retention = Retention(
            hot=hot,
            backend=backend,
            catalogue=catalogue,
            lease=lease,
            clock=clock,
            policy=RetentionPolicy.from_settings(settings),
            metrics=metrics,
            on_step=on_deletion_step,
        )
        dispatcher = Dispatcher(
            hot=hot,
            backend=backend,
            catalogue=catalogue,
            lease=lease,
            writer=writer,
            clock=clock,
            config=dispatcher_config(settings),
            metrics=metrics,
            on_segment=on_segment,
            periodic=(Periodic("retention", settings["retention.interval"], retention.run_pass),),
            startup=(retention.resume,),
        )
        stack.push_async_callback(dispatcher.close)
        yield Runtime(settings, backend, hot, catalogue, dispatcher, metrics, retention)
