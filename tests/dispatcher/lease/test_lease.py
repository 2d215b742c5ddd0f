"""The writer lease on a real (memory) backend with a virtual clock."""

from __future__ import annotations

import asyncio

import pytest

from tieredstore.backends.base import Backend
from tieredstore.backends.forwarding import ForwardingBackend
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.clock import VirtualClock
from tieredstore.dispatcher.lease.lease import Lease, LeaseRecord, LeaseState, new_owner_id
from tieredstore.errors import LeaseHeldError, LeaseLapsedError, LeaseLostError

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
    refused = asyncio.create_task(b.acquire(wait=False))  # run --no-wait beside a holder
    await clock.advance(9)
    assert not refused.done()  # unchanged so far: it cannot tell yet
    await a.renew()  # the record changes: its holder lives
    await clock.advance(3)
    with pytest.raises(LeaseHeldError, match=r"holds the writer lease: it renewed it while"):
        await refused
    await a.release()
    await a.release()  # twice is safe
    state: LeaseState = a.state  # re-read: mypy narrowed it to HELD above
    assert state is LeaseState.RELEASED
    assert await b.acquire(wait=False) == 2  # released: taken at once, next epoch


async def test_expired_lease_is_taken_over_and_the_old_writer_stops(backend: MemoryBackend) -> None:
    clock = VirtualClock()
    a = Lease(backend, KEY, clock, renew_interval=10)
    await a.acquire(wait=False)
    b = Lease(backend, KEY, clock, renew_interval=10)
    taking = asyncio.create_task(b.acquire(wait=False))
    await clock.advance(30)  # a missed three renewals, as b saw on its own clock
    assert await taking == 2
    # a's own deadline (sent + ttl - one interval) passed long before b could take over.
    with pytest.raises(LeaseLapsedError, match="expired before renewal"):
        await a.ensure_held()
    assert a.state is LeaseState.LAPSED
    with pytest.raises(LeaseLostError, match=r"taken over by .* \(epoch 2\)"):
        await a.reclaim_if_lapsed()  # the swap on a's last version finds b's
    after: LeaseState = a.state  # re-read: mypy narrowed it above
    assert after is LeaseState.LOST
    with pytest.raises(LeaseLostError, match="lease is lost"):
        a.check()
    current = await b.read()
    assert current is not None and current.owner == b.owner


async def test_a_lapsed_lease_nobody_took_is_reclaimed_with_its_epoch(
    backend: MemoryBackend,
) -> None:
    clock = VirtualClock()
    a = Lease(backend, KEY, clock, renew_interval=10)
    await a.acquire(wait=False)
    clock.set_ms(clock.now_ms() + 25_000)  # paused past its deadline, not past the expiry
    with pytest.raises(LeaseLapsedError, match="writing waits until it is reclaimed"):
        a.check()
    assert a.state is LeaseState.LAPSED
    await a.reclaim_if_lapsed()
    reclaimed: LeaseState = a.state  # re-read: mypy narrowed it above
    assert reclaimed is LeaseState.HELD and a.epoch == 1
    a.check()
    assert a.deadline_ms == clock.monotonic_ms() + 20_000
    b = Lease(backend, KEY, clock, renew_interval=10)
    assert await b.try_acquire() is not None  # held (b has just started watching)
    await a.reclaim_if_lapsed()  # held: nothing to do
    assert a.state.value == "held"


async def test_a_lapsed_lease_is_reclaimed_even_after_its_record_expired_if_untaken(
    backend: MemoryBackend,
) -> None:
    """Expiry only allows others to take over; if none did, the version is still ours."""
    clock = VirtualClock()
    a = Lease(backend, KEY, clock, renew_interval=10)
    await a.acquire(wait=False)
    clock.set_ms(clock.now_ms() + 600_000)  # SIGSTOPped for ten minutes
    await a.renew()
    assert a.state is LeaseState.HELD and a.epoch == 1
    record = await a.read()
    assert record is not None and record.live(clock.now_ms())


async def test_a_released_lease_is_not_reclaimed(backend: MemoryBackend) -> None:
    clock = VirtualClock()
    a = Lease(backend, KEY, clock, renew_interval=10)
    await a.acquire(wait=False)
    await a.release()
    await a.reclaim_if_lapsed()  # released: nothing to reclaim
    with pytest.raises(LeaseLostError, match="lease is released"):
        await a.renew()


async def test_waiting_acquire_takes_over_after_expiry(backend: MemoryBackend) -> None:
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


async def test_a_renewal_that_loses_the_swap_stops_the_writer(backend: MemoryBackend) -> None:
    clock = VirtualClock()
    a = Lease(backend, KEY, clock, renew_interval=10)
    await a.acquire(wait=False)
    # Someone else writes the lease (an operator, a writer with a skewed clock).
    intruder = LeaseRecord("intruder", 2, clock.now_ms() + 30_000, clock.now_ms())
    await backend.write(KEY, intruder.to_json())
    with pytest.raises(LeaseLostError, match=r"taken over by intruder \(epoch 2\)"):
        await a.renew()
    assert a.state is LeaseState.LOST
    with pytest.raises(LeaseLostError, match="lease is lost: lease taken over"):
        a.check()
    await a.release()  # not held: touches nothing
    assert await a.read() == intruder


async def test_release_never_clobbers_a_new_holder(backend: MemoryBackend) -> None:
    clock = VirtualClock()
    a = Lease(backend, KEY, clock, renew_interval=10)
    await a.acquire(wait=False)
    b = Lease(backend, KEY, clock, renew_interval=10)
    assert await b.try_acquire() is not None  # b starts watching
    clock.set_ms(clock.now_ms() + 30_001)
    assert await b.try_acquire() is None  # unchanged for the lease time: taken over
    a.state = LeaseState.HELD  # a believes it still holds (a paused process)
    await a.release()  # the conditional write fails against b's version
    current = await b.read()
    assert current is not None and current.owner == b.owner and current.epoch == 2


class _LandsThenHangs(ForwardingBackend):
    """Swaps land, then their replies never come (until cancelled)."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.hang = False
        self.landed = asyncio.Event()

    async def replace(self, key: str, data: bytes, *, version: str) -> str:
        got = await self.inner.replace(key, data, version=version)
        if self.hang:
            self.landed.set()
            await asyncio.Event().wait()
        return got


async def test_a_renewal_cancelled_after_it_landed_does_not_keep_the_lease(
    backend: MemoryBackend,
) -> None:
    # A shutdown cancels the renewal loop while a renewal's write has landed: release
    # must still free the lease, or a waiting successor waits out the whole record.
    clock = VirtualClock()
    hanging = _LandsThenHangs(backend)
    a = Lease(hanging, KEY, clock, renew_interval=10)
    await a.acquire(wait=False)
    clock.set_ms(clock.now_ms() + 10_000)
    hanging.hang = True
    renewal = asyncio.create_task(a.renew())
    await asyncio.wait_for(hanging.landed.wait(), 10)
    renewal.cancel()
    with pytest.raises(asyncio.CancelledError):
        await renewal
    hanging.hang = False
    await a.release()
    record = await a.read()
    assert record is not None and record.owner == "" and record.epoch == 1
    b = Lease(backend, KEY, clock, renew_interval=10)
    assert await b.try_acquire() is None and b.epoch == 2


async def test_the_holder_stops_one_interval_before_others_may_take_over(
    backend: MemoryBackend,
) -> None:
    clock = VirtualClock()
    a = Lease(backend, KEY, clock, renew_interval=10)
    await a.acquire(wait=False)
    record = await a.read()
    assert record is not None
    assert a.deadline_ms == clock.monotonic_ms() + 20_000
    assert record.expires_at_ms == clock.now_ms() + 30_000
    b = Lease(backend, KEY, clock, renew_interval=10)
    assert await b.try_acquire() is not None  # a waiter's first look: the watch starts
    clock.set_ms(clock.now_ms() + 19_999)
    a.check()
    clock.set_ms(clock.now_ms() + 1)
    with pytest.raises(LeaseLapsedError, match="expired before renewal"):
        a.check()
    clock.set_ms(clock.now_ms() + 9_999)
    assert await b.try_acquire() is not None  # still one interval before b may take it
    clock.set_ms(clock.now_ms() + 1)
    assert await b.try_acquire() is None and b.epoch == 2


async def test_a_lost_reply_of_our_own_swap_still_holds(backend: MemoryBackend) -> None:
    from tieredstore.backends.faults import Fault, FaultyBackend
    from tieredstore.backends.retry import RetryingBackend, RetryPolicy

    clock = VirtualClock()
    faulty = FaultyBackend(backend, rate=1.0, faults=[Fault.LOST_ACK])
    faulty.enabled = False
    lossy = RetryingBackend(faulty, RetryPolicy(base_delay=0, max_delay=0), sleep=clock.sleep)
    a = Lease(lossy, KEY, clock, renew_interval=10)
    faulty.enabled = True  # every write lands, and its reply is lost once
    await a.acquire(wait=False)
    assert a.state is LeaseState.HELD
    clock.set_ms(clock.now_ms() + 10_000)
    await a.renew()
    assert a.state is LeaseState.HELD
    faulty.enabled = False
    record = await a.read()
    assert record is not None and record.owner == a.owner and record.epoch == 1


async def test_a_backend_without_atomic_writes_is_refused_unless_opted_in() -> None:
    import uuid

    from tieredstore.backends.fsspec_generic import FsspecBackend
    from tieredstore.errors import ConfigError

    generic = FsspecBackend(f"memory://lease-{uuid.uuid4().hex}")  # fsspec's, not ours
    assert not generic.conditional_writes
    with pytest.raises(ConfigError, match=r"cold\.allow_unconditional_writes = true"):
        await Lease(generic, KEY, VirtualClock()).acquire(wait=False)
    assert not await generic.exists(KEY)  # refused before writing anything
    weak = Lease(generic, KEY, VirtualClock(), allow_unconditional_writes=True)
    assert await weak.acquire(wait=False) == 1


async def test_two_renewals_at_once_from_one_holder_do_not_fence_it(
    backend: MemoryBackend,
) -> None:
    """The renewal loop and a job's hold_lease may find a renewal due at the same
    moment: they are one writer, so they take turns instead of racing each other's
    compare-and-swap (which the second would lose, fencing the holder itself)."""
    import asyncio

    from tieredstore.backends.forwarding import ForwardingBackend

    class Yielding(ForwardingBackend):  # a real store answers later: others run meanwhile
        async def replace(self, key: str, data: bytes, *, version: str) -> str:
            await asyncio.sleep(0)
            return await self.inner.replace(key, data, version=version)

    class Ticking(VirtualClock):  # every reading is a millisecond later: no two renewals
        def now_ms(self) -> int:  # write the same record
            self.set_ms(super().now_ms() + 1)
            return super().now_ms()

    clock = Ticking()
    a = Lease(Yielding(backend), KEY, clock, renew_interval=10)
    await a.acquire(wait=False)
    clock.set_ms(clock.now_ms() + 10_000)
    await asyncio.gather(a.renew(), a.renew(), a.renew())
    assert a.state is LeaseState.HELD
    record = await a.read()
    assert record is not None and record.owner == a.owner and record.epoch == 1
