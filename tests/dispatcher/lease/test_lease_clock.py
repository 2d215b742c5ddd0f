"""Lease liveness never trusts a clock of another host, and ``lease break`` frees a
dead holder's lease (fencing it) but never a live one's.

A holder's wall clock may be a day ahead or behind; waiters judge it only by whether
its record changes, on their own monotonic clock (injected: a virtual clock).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.clock import VirtualClock
from tieredstore.cold.layout import lease_key
from tieredstore.dispatcher.lease.admin import BreakOutcome, break_lease, describe_lease
from tieredstore.dispatcher.lease.guard import hold_lease
from tieredstore.dispatcher.lease.lease import Lease, LeaseRecord, LeaseState
from tieredstore.errors import LeaseHeldError, LeaseLostError

KEY = lease_key("C", "B")
DAY_MS = 86_400_000


class SkewedClock:
    """Another host's clock: the same passing time, its wall clock ``skew_ms`` off."""

    def __init__(self, base: VirtualClock, skew_ms: int) -> None:
        self.base, self.skew_ms = base, skew_ms

    def now_ms(self) -> int:
        return self.base.now_ms() + self.skew_ms

    def monotonic_ms(self) -> int:
        return self.base.monotonic_ms() + 123_456  # its own origin: never compared

    async def sleep(self, seconds: float) -> None:
        await self.base.sleep(seconds)


@pytest.fixture
def backend() -> MemoryBackend:
    reset_memory_stores()
    return MemoryBackend("lease-clock")


async def _holder(backend: MemoryBackend, clock: VirtualClock, skew_ms: int) -> Lease:
    holder = Lease(backend, KEY, SkewedClock(clock, skew_ms), renew_interval=10)
    assert await holder.acquire(wait=False) == 1
    return holder


@pytest.mark.parametrize("wait", [True, False], ids=["run", "no-wait"])
async def test_a_dead_holder_a_day_ahead_is_taken_over_after_the_lease_time(
    backend: MemoryBackend, wait: bool
) -> None:
    """Old code: "holds the writer lease for 86430s more" (no-wait), or a day's wait."""
    clock = VirtualClock()
    await _holder(backend, clock, +DAY_MS)  # then it dies: never renews
    waiter = Lease(backend, KEY, clock, renew_interval=10)
    taking = asyncio.create_task(waiter.acquire(wait=wait))
    await clock.advance(29.9)
    assert not taking.done()  # not before the lease time on the waiter's clock
    await clock.advance(0.2)
    assert await taking == 2
    record = await waiter.read()
    assert record is not None and record.owner == waiter.owner


async def test_a_live_holder_a_day_behind_is_never_taken_over(backend: MemoryBackend) -> None:
    """Old code took it at once: its record looked a day expired."""
    clock = VirtualClock()
    holder = await _holder(backend, clock, -DAY_MS)
    waiter = Lease(backend, KEY, clock, renew_interval=10)
    waiting = asyncio.create_task(waiter.acquire(wait=True))
    no_wait = Lease(backend, KEY, clock, renew_interval=10)
    refused = asyncio.create_task(no_wait.acquire(wait=False))
    for _ in range(12):  # two minutes of renewals every 10 s
        await clock.advance(10)
        await hold_lease(holder)
    assert not waiting.done()
    with pytest.raises(LeaseHeldError, match=r"holds the writer lease: it renewed it while"):
        await refused
    assert holder.state is LeaseState.HELD and holder.epoch == 1
    waiting.cancel()


async def test_a_holder_renews_by_its_monotonic_clock_when_its_wall_clock_steps_back(
    backend: MemoryBackend,
) -> None:
    """Old code decided "renewal due" by the wall clock: stepped back a day, the job never
    renewed and its lease lapsed under it."""
    clock = VirtualClock()
    skewed = SkewedClock(clock, 0)
    holder = Lease(backend, KEY, skewed, renew_interval=10)
    await holder.acquire(wait=False)
    skewed.skew_ms = -DAY_MS  # an operator or NTP steps the wall clock back
    await clock.advance(10)
    await hold_lease(holder)
    record = await holder.read()
    assert record is not None and record.renewals == 1
    await clock.advance(15)
    holder.check()  # renewed above: the deadline moved on


async def test_a_renewal_always_changes_the_record_even_under_a_stopped_clock(
    backend: MemoryBackend,
) -> None:
    clock = VirtualClock()
    holder = Lease(backend, KEY, clock, renew_interval=10)
    await holder.acquire(wait=False)
    before = await holder.read_versioned()
    await holder.renew()  # same millisecond: same wall-clock times
    after = await holder.read_versioned()
    assert before is not None and after is not None
    assert before.record.renewed_at_ms == after.record.renewed_at_ms
    assert after.version != before.version and after.record.renewals == 1


async def test_break_fences_a_dead_holder_a_day_ahead(backend: MemoryBackend) -> None:
    clock = VirtualClock()
    dead = await _holder(backend, clock, +DAY_MS)
    breaker = Lease(backend, KEY, clock, renew_interval=10)
    watched: list[float] = []
    breaking = asyncio.create_task(
        break_lease(breaker, on_watch=lambda seen: watched.append(seen.left_s))
    )
    await clock.advance(29.9)
    assert not breaking.done() and watched == [30.0]
    await clock.advance(0.2)
    report = await breaking
    assert report.outcome is BreakOutcome.BROKEN and report.epoch == 2
    assert report.describe().startswith(f"broke the writer lease of {dead.owner} (epoch 1)")
    record = await breaker.read()
    assert record is not None and record.owner == "" and record.epoch == 2  # fenced
    with pytest.raises(LeaseLostError, match="taken over by nobody"):
        await dead.renew()  # the old holder, back: fenced, writes nothing more
    successor = Lease(backend, KEY, clock, renew_interval=10)
    assert await successor.acquire(wait=False) == 3  # released: taken at once
    # Breaking a released or absent lease does nothing.
    await successor.release()
    again = await break_lease(Lease(backend, KEY, clock))
    assert again.outcome is BreakOutcome.NOTHING_HELD
    assert (await breaker.read()) == (await successor.read())


async def test_break_is_refused_while_the_holder_renews(backend: MemoryBackend) -> None:
    clock = VirtualClock()
    holder = await _holder(backend, clock, +DAY_MS)  # its clock is wrong, but it lives
    breaking = asyncio.create_task(break_lease(Lease(backend, KEY, clock)))
    await clock.advance(10)
    await hold_lease(holder)
    await clock.advance(3)
    with pytest.raises(LeaseHeldError, match=r"still renews the writer lease .*not broken"):
        await breaking
    holder.check()
    record = await holder.read()
    assert record is not None and record.owner == holder.owner and record.epoch == 1


async def test_break_is_refused_when_the_record_changes_as_it_swaps(
    backend: MemoryBackend,
) -> None:
    """The holder renews between the breaker's last reading and its swap: the swap names
    the version it watched, so it fails and nothing is broken."""

    class RenewsFirst(MemoryBackend):
        renew: Lease | None = None

        async def replace(self, key: str, data: bytes, *, version: str) -> str:
            if self.renew is not None and json.loads(data)["owner"] == "":
                holder, self.renew = self.renew, None
                await holder.renew()
            return await super().replace(key, data, version=version)

    clock = VirtualClock()
    racy = RenewsFirst("lease-clock")
    holder = await _holder(racy, clock, 0)
    racy.renew = holder  # it renews (late: reclaiming its lapse) just before the swap
    breaking = asyncio.create_task(break_lease(Lease(racy, KEY, clock)))
    await clock.advance(31)
    with pytest.raises(LeaseHeldError, match="changed as it was being broken"):
        await breaking
    assert holder.state is LeaseState.HELD


def test_show_says_where_the_holders_clock_is() -> None:
    now = 1_700_000_000_000
    lines = describe_lease(LeaseRecord("w@h", 4, now + DAY_MS + 30_000, now + DAY_MS), now_ms=now)
    assert "holder:     w@h" in lines and "epoch:      4" in lines
    assert any("+86400s from this host's" in line for line in lines)
    assert describe_lease(None, now_ms=now)[0].startswith("no lease record")


# -- the commands, as real processes ------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "tieredstore.cli", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def _write_record(cold: Path, record: LeaseRecord) -> Path:
    path = cold / KEY
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(record.to_json())
    return path


@pytest.mark.slow
def test_run_no_wait_and_lease_break_against_a_record_a_day_ahead(tmp_path: Path) -> None:
    """A dead holder's record, written a day ahead, stating a 1.5 s lease time (as a
    holder with ``lease.renew_interval = 0.5s`` writes): ``run --once --no-wait`` takes
    over once it stayed unchanged 1.5 s on its own clock; ``lease break --force`` too."""
    from tieredstore.hot.synth import SynthSpec, synthesize

    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=1, messages=20))
    cold = tmp_path / "cold"
    ahead = time.time_ns() // 1_000_000 + DAY_MS
    path = _write_record(cold, LeaseRecord("dead@elsewhere", 7, ahead + 1_500, ahead))
    common = ["--cold", str(cold), "--cluster", "C", "--broker", "B"]
    shown = _cli("lease", "show", *common)
    assert shown.returncode == 0 and "holder:     dead@elsewhere" in shown.stdout
    run = _cli("run", "--once", "--no-wait", "--store", str(tmp_path / "store"),
               "--state-dir", str(tmp_path / "state"), *common)  # fmt: skip
    assert run.returncode == 0, run.stderr
    after = LeaseRecord.from_json(path.read_bytes(), where="t")
    assert (after.owner, after.epoch) == ("", 8)  # taken at epoch 8, released at the end
    _write_record(cold, LeaseRecord("dead@elsewhere", 9, ahead + 1_500, ahead))
    refused = _cli("lease", "break", *common)
    assert refused.returncode == 3 and "--force" in refused.stderr
    broken = _cli("lease", "break", "--force", *common)
    assert broken.returncode == 0, broken.stderr
    assert "broke the writer lease of dead@elsewhere (epoch 9)" in broken.stdout
    after = LeaseRecord.from_json(path.read_bytes(), where="t")
    assert (after.owner, after.epoch) == ("", 10)
