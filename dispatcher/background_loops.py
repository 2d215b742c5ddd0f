"""The dispatcher's periodic jobs (retention, config backup): each runs every interval on
the injected clock, under the catalogue lock, until the dispatcher stops. The lease's own
loop is :func:`dispatcher.lease.renewal.renew_until`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from dispatcher.metrics import Metrics
from tieredstore.clock import Clock, sleep_until
from tieredstore.errors import LeaseLapsedError, RetryableError

__all__ = ["Periodic", "run_periodic"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Periodic:
    """A job the dispatcher runs every ``interval`` seconds while it runs (e.g. retention).

    ``job`` is awaited on the dispatcher's clock; a RetryableError is logged and the job
    runs again next interval; a FatalError stops the dispatcher (FAILED).
    """

    name: str
    interval: float
    job: Callable[[], Awaitable[object]]


async def run_periodic(
    job: Periodic, *, clock: Clock, stopping: asyncio.Event, lock: asyncio.Lock, metrics: Metrics
) -> None:
    """Run ``job`` every interval, under ``lock``, until ``stopping`` is set.

    A retryable error or a lapsed lease (reclaimed by the next tick) is logged and
    counted, and the job runs again next interval; any other error ends the loop.
    """
    while not stopping.is_set():
        await sleep_until(clock, stopping, job.interval)
        if stopping.is_set():
            return
        try:
            async with lock:
                await job.job()
        except (RetryableError, LeaseLapsedError) as exc:  # a lapse: reclaimed next run
            log.warning("%s failed, will run again: %s", job.name, exc)
            metrics.errors.labels(type(exc).__name__).inc()
