"""The dispatcher's periodic jobs (retention, config backup, compaction): each runs every
interval on the injected clock until the dispatcher stops, under the catalogue lock unless
it takes that lock itself around its catalogue writes (compaction: its uploads must not
hold up the group commits). The lease's own loop is
:func:`tieredstore.dispatcher.lease.renewal.renew_until`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tieredstore.clock import Clock, sleep_until
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.errors import ColdStoreAccessError, LeaseLapsedError, RetryableError

__all__ = ["Periodic", "run_periodic"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Periodic:
    """A job the dispatcher runs every ``interval`` seconds while it runs (e.g. retention).

    ``job`` is awaited on the dispatcher's clock; a RetryableError is logged and the job
    runs again next interval; a FatalError stops the dispatcher (FAILED). ``locked``:
    the whole job runs under the catalogue lock; False for a job that takes the lock
    itself around each catalogue write.
    """

    name: str
    interval: float
    job: Callable[[], Awaitable[object]]
    locked: bool = True


async def run_periodic(
    job: Periodic, *, clock: Clock, stopping: asyncio.Event, lock: asyncio.Lock, metrics: Metrics
) -> None:
    """Run ``job`` every interval, under ``lock`` (if ``job.locked``), until ``stopping``
    is set.

    A retryable error or a lapsed lease (reclaimed by the next tick) is logged and
    counted, and the job runs again next interval; so is a cold store refusing the job
    (ColdStoreAccessError, e.g. a key without s3:DeleteObject stops expiry and gc: its
    one ERROR line is :mod:`tieredstore.dispatcher.cold_access`'s); any other error ends the loop.
    """
    while not stopping.is_set():
        await sleep_until(clock, stopping, job.interval)
        if stopping.is_set():
            return
        try:
            async with lock if job.locked else contextlib.nullcontext():
                await job.job()
        except (RetryableError, LeaseLapsedError) as exc:  # a lapse: reclaimed next run
            log.warning("%s failed, will run again: %s", job.name, exc)
            metrics.errors.labels(type(exc).__name__).inc()
        except ColdStoreAccessError as exc:  # its ERROR line: tieredstore.dispatcher.cold_access
            log.debug("%s refused, will run again: %s", job.name, exc)
            metrics.errors.labels(type(exc).__name__).inc()
