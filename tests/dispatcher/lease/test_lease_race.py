"""Simultaneous starts: contenders racing for one lease never both believe they hold it.

Each round, several sidecars (each with its own backend instance: its own POSIX
descriptors and worker threads, or its own S3 client) claim the lease at the same
instant — a fresh broker prefix, a released lease, an expired one. The compare-and-swap
lets exactly one win; every other contender is told who holds it, and the epoch moves
by exactly one.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from tests.support.moto import S3Bucket
from tieredstore.backends import open_backend
from tieredstore.backends.base import Backend
from tieredstore.clock import VirtualClock
from tieredstore.dispatcher.lease.lease import Lease, LeaseState
from tieredstore.errors import LeaseHeldError, LeaseLostError

pytestmark = pytest.mark.slow  # every test here takes over a second: not in make quick

KEY = "212d6b50_DefaultCluster/broker-a/_lease.json"
CONTENDERS = 4
ROUNDS = 12

Opener = Callable[[], Backend]


@pytest.fixture(params=["memory", "posix", pytest.param("s3", marks=pytest.mark.s3)])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    if request.param == "memory":
        name = f"memory://race-{uuid.uuid4().hex}"
        return lambda: open_backend(name)
    if request.param == "posix":
        return lambda: open_backend(str(tmp_path / "cold"))
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    return lambda: open_backend(f"{bucket.url}/race", options=bucket.options())


@pytest.fixture
async def backends(opener: Opener) -> AsyncIterator[list[Backend]]:
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(opener()) for _ in range(CONTENDERS)]


async def _race(leases: list[Lease]) -> list[Lease]:
    """All contenders claim at once; return the winners."""
    outcomes = await asyncio.gather(*(lease.try_acquire() for lease in leases))
    return [lease for lease, holder in zip(leases, outcomes, strict=True) if holder is None]


async def test_contenders_never_both_hold_the_lease(backends: list[Backend]) -> None:
    clock = VirtualClock()
    leases = [Lease(b, KEY, clock, renew_interval=1) for b in backends]
    for n in range(ROUNDS):
        winners = await _race(leases)
        assert len(winners) == 1, f"round {n}: {len(winners)} contenders hold the lease"
        (winner,) = winners
        assert winner.epoch == n + 1
        assert [lease.state for lease in leases].count(LeaseState.HELD) == 1
        record = await winner.read()
        assert record is not None and record.owner == winner.owner
        # The losers are refused while it lives (what `run --no-wait` reports).
        loser = leases[(leases.index(winner) + 1) % CONTENDERS]
        refused = asyncio.create_task(loser.acquire(wait=False))
        await clock.settle()
        await winner.renew()
        await clock.advance(1)
        with pytest.raises(LeaseHeldError):
            await refused
        # Next round from a released lease, or one whose holder fell silent.
        leases = [Lease(b, KEY, clock, renew_interval=1) for b in backends]
        if n % 2:
            await winner.release()
        else:
            for lease in leases:  # each starts watching the silent holder's record
                assert await lease.try_acquire() is not None
            await clock.advance(3)


async def test_a_renewal_racing_a_takeover_has_one_winner(backends: list[Backend]) -> None:
    """The old holder renews at the instant others claim its (expired) lease: the
    swaps all name the same version, so exactly one of them lands."""
    clock = VirtualClock()
    for _ in range(ROUNDS // 2):
        holder = Lease(backends[0], KEY, clock, renew_interval=1)
        await holder.acquire(wait=True)
        others = [Lease(b, KEY, clock, renew_interval=1) for b in backends[1:]]
        for other in others:  # each starts watching the holder's record
            assert await other.try_acquire() is not None
        clock.set_ms(clock.now_ms() + 3_001)  # silent for the others ...
        holder.deadline_ms = clock.monotonic_ms() + 1  # ... while the holder still renews

        kept, *claims = await asyncio.gather(_renewed(holder), *(o.try_acquire() for o in others))
        held = int(kept is True) + sum(1 for c in claims if c is None)
        assert held == 1
        current = await holder.read()
        winner = (
            holder if kept else next(o for o, c in zip(others, claims, strict=True) if c is None)
        )
        assert current is not None and current.owner == winner.owner
        await winner.release()


async def _renewed(lease: Lease) -> bool:
    """Renew; False when the swap lost (LeaseLostError)."""
    try:
        await lease.renew()
    except LeaseLostError:
        return False
    return True
