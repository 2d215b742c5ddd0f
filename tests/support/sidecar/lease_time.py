"""Virtual time that keeps the lease: for the retention, GC and repair tests.

A test that moves a :class:`~tieredstore.clock.VirtualClock` by hours without the
sidecar's renewal loop would let the lease lapse; :func:`advance` renews it on the way,
as the loop would. It takes the lease itself (anything with ``renew_interval`` and
``async renew()``), not the sidecar that holds it.
"""

from __future__ import annotations

from typing import Protocol

from tieredstore.clock import VirtualClock

__all__ = ["Renewable", "advance"]


class Renewable(Protocol):
    """What :func:`advance` needs of a lease: its renew interval and a renewal."""

    @property
    def renew_interval(self) -> float: ...

    async def renew(self) -> None: ...


async def advance(lease: Renewable, clock: VirtualClock, seconds: float) -> None:
    """Move ``clock`` forward by ``seconds``, renewing ``lease`` every renew interval on
    the way, as the sidecar's renewal loop would."""
    step_ms = int(lease.renew_interval * 1000)
    target = clock.now_ms() + int(seconds * 1000)
    while clock.now_ms() < target:
        clock.set_ms(min(clock.now_ms() + step_ms, target))
        await lease.renew()
