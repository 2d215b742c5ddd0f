"""A token bucket on the injected clock: at most ``rate`` bytes per second, on average.

The bucket holds up to ``burst`` tokens (one second's worth of ``rate`` unless told
otherwise) and starts full. :meth:`TokenBucket.reserve` takes ``n`` tokens at once and
says how long the caller must wait before sending them; the balance may go negative
(debt), so a chunk larger than the burst is still let through, just later, and callers
that share the bucket queue up behind each other's debt. Over any interval ``T`` at most
``burst + rate * T`` bytes are let through.

``rate == 0`` means unlimited: nothing ever waits. The rate is a number, which
:meth:`TokenBucket.set_rate` changes, or a function the bucket reads at each use (the
sidecar's: ``tiering.max_bytes_per_second`` in the settings in force, which a ``SIGHUP``
reload replaces). Either way a new rate applies from the next reservation; waits already
handed out are not recomputed.

Time comes from a :class:`~tieredstore.clock.Clock`; tests drive it with
:class:`~tieredstore.clock.VirtualClock` and never sleep for real.
"""

from __future__ import annotations

from collections.abc import Callable

from tieredstore.clock import Clock

__all__ = ["TokenBucket"]


class TokenBucket:
    """Bytes per second, enforced by making callers wait (see the module doc)."""

    def __init__(
        self, clock: Clock, rate: int | Callable[[], int], *, burst: int | None = None
    ) -> None:
        """``rate``: bytes per second, or a function giving them, read at each use."""
        self._source = rate if callable(rate) else None
        first = rate() if callable(rate) else rate
        if first < 0:
            raise ValueError(f"rate must be >= 0, got {first}")
        if burst is not None and burst <= 0:
            raise ValueError(f"burst must be > 0, got {burst}")
        self._clock = clock
        self._fixed_burst = burst
        self._rate = first
        self._tokens = float(self.burst)
        self._at_ms = clock.now_ms()

    @property
    def rate(self) -> int:
        """Bytes per second now (read from the function if given one); 0 = unlimited."""
        self._follow()
        return self._rate

    @property
    def burst(self) -> int:
        """The most tokens the bucket holds: ``burst`` if given, else one second of rate."""
        return self._fixed_burst if self._fixed_burst is not None else self._rate

    @property
    def tokens(self) -> float:
        """The balance now (negative while reservations are in debt)."""
        self._refill()
        return self._tokens

    def set_rate(self, rate: int) -> None:
        """Use ``rate`` from now on (0 = unlimited). Going from unlimited to a limit
        starts with a full bucket; otherwise the balance is kept, capped at the burst.

        Raises ValueError for a bucket built on a rate function (it follows that)."""
        if self._source is not None:
            raise ValueError("this bucket reads its rate from a function; change that")
        self._apply(rate)

    def _follow(self) -> None:
        """Take up the rate function's value if it changed (as :meth:`set_rate` would)."""
        if self._source is not None and (rate := self._source()) != self._rate:
            self._apply(rate)

    def _apply(self, rate: int) -> None:
        if rate < 0:
            raise ValueError(f"rate must be >= 0, got {rate}")
        self._refill()
        was_unlimited = self._rate == 0
        self._rate = rate
        self._tokens = float(self.burst) if was_unlimited else min(self._tokens, self.burst)

    def reserve(self, n: int) -> float:
        """Take ``n`` tokens now; return the seconds to wait before using them (>= 0)."""
        if n < 0:
            raise ValueError(f"cannot reserve {n} tokens")
        self._follow()
        if self._rate == 0:
            return 0.0
        self._refill()
        self._tokens -= n
        return 0.0 if self._tokens >= 0 else -self._tokens / self._rate

    async def acquire(self, n: int) -> float:
        """Reserve ``n`` tokens and sleep (on the clock) until they may be used; return
        the seconds waited."""
        wait = self.reserve(n)
        if wait > 0:
            await self._clock.sleep(wait)
        return wait

    def _refill(self) -> None:
        now = self._clock.now_ms()
        elapsed = max(now - self._at_ms, 0) / 1000
        self._at_ms = now
        if self._rate:
            self._tokens = min(self._tokens + elapsed * self._rate, float(self.burst))
