"""Helpers for the retention, GC and repair tests: virtual time that keeps the lease."""

from __future__ import annotations

from tieredstore.cli.sidecar.runtime import Runtime
from tieredstore.clock import VirtualClock


async def advance(rt: Runtime, clock: VirtualClock, seconds: float) -> None:
    """Move ``clock`` forward by ``seconds``, renewing the lease every renew interval on
    the way, as the sidecar's renewal loop would (without the loop, virtual hours would
    let the lease lapse)."""
    step_ms = int(rt.dispatcher.lease.renew_interval * 1000)
    target = clock.now_ms() + int(seconds * 1000)
    while clock.now_ms() < target:
        clock.set_ms(min(clock.now_ms() + step_ms, target))
        await rt.dispatcher.lease.renew()
