"""The lease's loop: renew the writer lease every renew interval while the sidecar writes.

The lease itself (compare-and-swap, epochs, takeover) is :mod:`tieredstore.dispatcher.lease.lease`;
holding it across a destructive job is :mod:`tieredstore.dispatcher.lease.guard`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tieredstore.clock import Clock, sleep_until
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.errors import ColdStoreAccessError, RetryableError

__all__ = ["renew_until", "renewing"]

T = TypeVar("T")

log = logging.getLogger(__name__)


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

    A retryable failure, or the cold store refusing the renewal (keys rotated, a policy
    changed: ColdStoreAccessError), is logged and retried next interval (a lease that
    lapses meanwhile is reclaimed once the store takes writes again); any other error
    ends the loop with it (the caller stops the dispatcher).
    """
    while not done.is_set():
        await sleep_until(clock, done, lease.renew_interval)
        if done.is_set():
            return
        try:
            await lease.renew()
        except (RetryableError, ColdStoreAccessError) as exc:  # a refusal may be lifted
            log.warning("lease renewal failed, will retry: %s", exc)
        else:
            on_renewed()


async def renewing(
    lease: Lease,
    clock: Clock,
    work: Awaitable[T],
    *,
    on_renewed: Callable[[], None] = lambda: None,
) -> T:
    """Await ``work`` while renewing the lease as :func:`renew_until` does, for work
    that may outlast it before the loop that renews it starts (the start-up reconcile,
    heal and jobs of a large cold store, on a busy host).

    A renewal that fails for good (LeaseLostError: another writer took over) cancels
    ``work``, waits until it has returned and raises that error; an error of ``work``
    is raised as it is. Renewing stops once ``work`` has returned either way.
    """
    finished = asyncio.Event()
    renew = asyncio.create_task(
        renew_until(lease, clock, finished, on_renewed=on_renewed), name="lease renewal"
    )
    job = asyncio.ensure_future(work)
    try:
        await asyncio.wait({job, renew}, return_when=asyncio.FIRST_COMPLETED)
        if not job.done():  # the renewal ended first, so it failed for good: raise that
            renew.result()
        return job.result()
    finally:  # the work unfinished (renewal failed, or cancelled from outside) goes too
        finished.set()
        job.cancel()
        renew.cancel()
        await asyncio.gather(job, renew, return_exceptions=True)
