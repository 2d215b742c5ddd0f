"""The writer lease on a real (memory) backend with a virtual clock."""

from __future__ import annotations

import pytest

from dispatcher.lease import Lease, LeaseRecord, LeaseState, new_owner_id
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.clock import VirtualClock
from tieredstore.errors import LeaseHeldError, LeaseLostError

KEY = "212d6b50_DefaultCluster/broker-a/_lease.json"


@pytest.fixture
def backend() -> MemoryBackend:
    reset_memory_stores()
    return MemoryBackend("lease")


def test_owner_ids_are_unique_and_name_the_host() -> None:
    a, b = new_owner_id(), new_owner_id()
    assert a != b
    assert "@" in a


async def test_acquire_renew_release_and_epochs(backend: MemoryBackend) -> None:
    clock = VirtualClock()
    a = Lease(backend, KEY, clock, renew_interval=10)
    assert await a.acquire(wait=False) == 1
    assert a.state is LeaseState.HELD
    b = Lease(backend, KEY, clock, renew_interval=10)
    with pytest.raises(LeaseHeldError, match=r"holds the writer lease for 30s more"):
        await b.acquire(wait=False)
    clock.set_ms(clock.now_ms() + 9_000)
    await a.renew()  # extends to now + 30 s
    clock.set_ms(clock.now_ms() + 29_000)
    with pytest.raises(LeaseHeldError):
        await b.acquire(wait=False)
    await a.release()
    await a.release()  # twice is safe
    state: LeaseState = a.state  # re-read: mypy narrowed it to HELD above
    assert state is LeaseState.RELEASED
    assert await b.acquire(wait=False) == 2  # released: taken at once, next epoch


async def test_expired_lease_is_taken_over_and_the_old_writer_stops(backend: MemoryBackend) -> None:
    clock = VirtualClock()
    a = Lease(backend, KEY, clock, renew_interval=10)
    await a.acquire(wait=False)
    clock.set_ms(clock.now_ms() + 30_001)  # a missed three renewals
    b = Lease(backend, KEY, clock, renew_interval=10)
    assert await b.acquire(wait=False) == 2
    with pytest.raises(LeaseLostError, match="lease taken over by"):
        await a.ensure_held()
    assert a.state is LeaseState.LOST
    with pytest.raises(LeaseLostError):
        await a.renew()


async def test_a_writer_that_let_its_lease_lapse_counts_as_lost(backend: MemoryBackend) -> None:
    clock = VirtualClock()
    a = Lease(backend, KEY, clock, renew_interval=10)
    await a.acquire(wait=False)
    clock.set_ms(clock.now_ms() + 30_000)
    with pytest.raises(LeaseLostError, match="expired before renewal"):
        await a.ensure_held()


async def test_waiting_acquire_takes_over_after_expiry(backend: MemoryBackend) -> None:
    import asyncio

    clock = VirtualClock()
    a = Lease(backend, KEY, clock, renew_interval=10)
    await a.acquire(wait=False)
    b = Lease(backend, KEY, clock, renew_interval=10)
    waiter = asyncio.create_task(b.acquire(wait=True))
    await clock.advance(20)
    assert not waiter.done()
    await clock.advance(11)
    assert await waiter == 2


def test_lease_record_json_round_trip_and_corruption() -> None:
    rec = LeaseRecord("o@h", 3, 100, 50)
    assert LeaseRecord.from_json(rec.to_json(), where="k") == rec
    from tieredstore.errors import CorruptManifestError

    with pytest.raises(CorruptManifestError, match=r"lease object is not valid: .*\(k\)"):
        LeaseRecord.from_json(b"{}", where="k")
