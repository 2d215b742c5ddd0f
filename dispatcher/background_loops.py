"""The dispatcher's background loops: lease renewal and periodic jobs, and the sleeps on
the injected clock they share (each wakes early when its event is set)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from dispatcher.lease.lease import Lease
from dispatcher.metrics import Metrics
from tieredstore.clock import Clock
from tieredstore.errors import LeaseLapsedError, RetryableError

__all__ = ["Periodic", "renew_until", "run_periodic", "sleep_until", "wait_at_most"]

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


async def sleep_until(clock: Clock, event: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` on ``clock``, or less if ``event`` is set meanwhile."""
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    stopper = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (sleeper, stopper):
            t.cancel()


async def wait_at_most(
    clock: Clock, task: asyncio.Future[Any], seconds: float, *, cut: asyncio.Event | None = None
) -> None:
    """Wait up to ``seconds`` (on ``clock``) for ``task`` to end, or until ``cut`` is set
    (a second Ctrl-C: stop waiting now); ``task`` is not cancelled."""
    timer = asyncio.ensure_future(clock.sleep(seconds))
    cutter = asyncio.ensure_future(cut.wait()) if cut is not None else None
    try:
        waits = {task, timer} if cutter is None else {task, timer, cutter}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        timer.cancel()
        if cutter is not None:
            cutter.cancel()


async def renew_until(
    lease: Lease,
    clock: Clock,
    done: asyncio.Event,
    *,
    on_renewed: Callable[[], None] = lambda: None,
) -> None:
    """Renew the lease every ``lease.renew_interval`` until ``done`` (every write has
    returned — not merely a stop asked: segments still draining must stay fenced);
    ``on_renewed`` is called after each renewal that landed.

    A retryable failure is logged and retried next interval; any other error ends the
    loop with it (the caller stops the dispatcher).
    """
    while not done.is_set():
        await sleep_until(clock, done, lease.renew_interval)
        if done.is_set():
            return
        try:
            await lease.renew()
        except RetryableError as exc:
            log.warning("lease renewal failed, will retry: %s", exc)
        else:
            on_renewed()


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
