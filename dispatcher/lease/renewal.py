"""The lease's loop: renew the writer lease every renew interval while the sidecar writes.

The lease itself (compare-and-swap, epochs, takeover) is :mod:`tieredstore.dispatcher.lease.lease`;
holding it across a destructive job is :mod:`tieredstore.dispatcher.lease.guard`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from tieredstore.clock import Clock, sleep_until
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.errors import ColdStoreAccessError, RetryableError

__all__ = ["renew_until"]

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
