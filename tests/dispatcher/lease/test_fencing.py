"""No writer can replace committed cold data: the three races of a rolling restart.

Two sidecars (A, then B) share one cold store — POSIX, and S3 on the moto server with its
real conditional requests — and one injected clock. A's backend sits behind a
:class:`~tests.support.sidecar.stall.Stall`, so the test decides exactly when A's requests
land:

* **stalled upload**: A is paused mid-upload past its lease; B takes over and commits;
  then A's upload lands.
* **late manifest**: A passed its lease check and its manifest create is stuck; B takes
  over and commits the same offsets; then A's create lands (or, in the other order, A's
  lands first and B adopts it).
* **stale batch** (``tiering.batching``): A's batch create is stuck; B takes over and
  fences the next batch sequence; A's batch either landed first (B adopts it) or loses
  to B's fence (A stops as fenced).
* **frozen manifest create under slices** (issue 46): A (per-queue segments) is frozen
  inside its manifest create at offset S; B takes over with batching on and commits
  ``[S, ...)`` as batch slices; then A's create goes out: B took the manifest key of S
  for its epoch before its first slice there, so A's manifest never lands.
* **gc over a frozen batch create** (issue 46): A's batch create is stuck; ``gc --grace
  0`` takes the lease and fences the batch sequence; A's batch never lands after it.
* **SIGTERM while uploading**: A is asked to stop with a slow upload in flight while B
  waits for the lease; A keeps renewing while it drains, abandons the upload at its
  deadline and releases the lease only after the upload returned; the abandoned request
  lands after B committed.

Afterwards every committed manifest's objects match their sizes and digests and cover
the hot store exactly, the Spark verifier says CLEAN at content level, and a fenced A
has logged and counted it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.support.moto import S3Bucket
from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tests.support.sidecar.stall import Stall
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.backends import open_backend
from tieredstore.backends.base import Backend
from tieredstore.backends.options import BackendOptions
from tieredstore.cli.sidecar.runtime import Runtime, open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.cold.batch import BatchFence, BatchHead
from tieredstore.cold.history import EntryKind, load_history, read_batch
from tieredstore.cold.layout import QueuePath, batch_key, parse_object_key
from tieredstore.cold.manifest import FenceMarker, Manifest, read_stored
from tieredstore.dispatcher.assembly import lease_for
from tieredstore.dispatcher.lease.lease import Lease, LeaseState
from tieredstore.dispatcher.maintenance.gc import delete_garbage, scan_garbage
from tieredstore.errors import LeaseLostError
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec
from tieredstore.verifier.job import verify
from tieredstore.verifier.vocabulary import Level, Verdict, VerifyOptions

pytestmark = pytest.mark.spark

SPEC = SynthSpec(topics=2, queues=2, messages=600, body_min=50, body_max=1500, seed=14)
RENEW_S = 10  # lease: 30 s; the holder's own deadline: 20 s after a renewal was sent
WAIT_S = 60.0  # upper bound for a stall to be reached (real seconds; never slept)


@dataclass(frozen=True)
class Cold:
    """One cold store under test: its URL, backend options, settings and verifier options."""

    url: str
    options: BackendOptions = field(default_factory=BackendOptions)
    settings: dict[str, object] = field(default_factory=dict)
    storage: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(params=["posix", pytest.param("s3", marks=pytest.mark.s3)])
def cold(request: pytest.FixtureRequest, tmp_path: Path) -> Cold:
    if request.param == "posix":
        return Cold(str(tmp_path / "cold"))
    bucket: S3Bucket = request.getfixturevalue("s3_bucket")
    return Cold(
        f"{bucket.url}/fencing",
        bucket.options(),
        {"cold__endpoint_url": bucket.endpoint_url},
        bucket.fsspec_options(),
    )


def nth(op: str, part: str, n: int) -> Callable[[str, str], bool]:
    """A trigger matching the ``n``-th call of ``op`` on a key containing ``part``."""
    seen = 0

    def trigger(called: str, key: str) -> bool:
        nonlocal seen
        if called == op and part in key:
            seen += 1
        return called == op and part in key and seen == n

    return trigger


@asynccontextmanager
async def sidecar(
    name: str,
    cold: Cold,
    store: Path,
    tmp_path: Path,
    clock: VirtualClock,
    wrap: Any = None,
    **extra: object,
) -> AsyncIterator[tuple[Runtime, Backend]]:
    """An opened runtime named ``name`` on its own backend instance and state dir."""
    async with AsyncExitStack() as stack:
        inner = await stack.enter_async_context(open_backend(cold.url, options=cold.options))
        backend = wrap(inner) if wrap else inner
        settings = settings_for(
            store,
            cold.url,
            tmp_path / f"state-{name}",
            lease__renew_interval=f"{RENEW_S}s",
            tiering__guard="none",
            **cold.settings,
            **extra,
        )
        rt = await stack.enter_async_context(open_runtime(settings, clock=clock, backend=backend))
        if isinstance(backend, Stall):
            stack.callback(backend.release)  # never leave a held call behind a failure
        yield rt, inner


def fenced(rt: Runtime) -> float:
    return sum(
        s.value
        for m in rt.metrics.registry.collect()
        if m.name == "tieredstore_fenced"
        for s in m.samples
        if s.name.endswith("_total")
    )


def lease_held(rt: Runtime) -> float:
    (value,) = [
        s.value
        for m in rt.metrics.registry.collect()
        if m.name == "tieredstore_lease_held"
        for s in m.samples
    ]
    return value


async def check_exact(backend: Backend, store: Path, spark: SparkSession, cold: Cold) -> None:
    """Every manifest's objects match; cold covers hot exactly; the verifier says CLEAN."""
    await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)
    result = await asyncio.to_thread(
        verify,
        spark,
        VerifyOptions(
            hot=store, cold_url=cold.url, cluster=CLUSTER, broker=BROKER,
            now_ms=time.time_ns() // 1_000_000, level=Level.CONTENT,
            storage_options=cold.storage,
        ),
    )  # fmt: skip
    assert result.verdict is Verdict.CLEAN, [str(a) for a in result.anomalies][:10]


async def first_done(parked: Coroutine[Any, Any, None], task: asyncio.Task[None]) -> None:
    """Return when ``parked`` returns or ``task`` is done; ``task`` is never cancelled."""
    waiter = asyncio.ensure_future(parked)
    try:
        await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


async def take_over(b: Runtime, clock: VirtualClock) -> None:
    """B starts beside A and watches A's lease record; A renews nothing while stalled,
    so B takes over once the record stayed unchanged for the lease time on B's clock.

    Time moves only while B sleeps between its looks at the record, never while B's
    read or swap is in flight: a swap sent at T gives B a deadline counted from T, and
    time moved past it meanwhile would lapse B's new lease before it wrote anything."""
    starting = asyncio.create_task(b.dispatcher.start(wait_for_lease=False))

    def watching() -> bool:
        return b.dispatcher.lease.state is not LeaseState.HELD and not starting.done()

    async def until_held() -> None:  # then no further: B's own deadline runs on it
        while watching():
            await clock.parked_or_done(starting)
            if watching():
                await clock.advance(1)

    await asyncio.wait_for(until_held(), WAIT_S)
    await asyncio.wait_for(starting, WAIT_S)
    assert b.dispatcher.lease.epoch == 2


async def test_stalled_upload_past_lease_expiry(
    cold: Cold, store: Path, tmp_path: Path, spark: SparkSession, caplog: pytest.LogCaptureFixture
) -> None:
    clock = VirtualClock()
    stall = None

    def wrap(inner: Backend) -> Stall:
        nonlocal stall
        stall = Stall(inner, nth("write_chunks", "/COMMIT_LOG/", 3))  # A pauses, whole
        return stall

    async with (
        sidecar("a", cold, store, tmp_path, clock, wrap) as (a, _),
        sidecar("b", cold, store, tmp_path, clock) as (b, backend),
    ):
        assert stall is not None
        await a.dispatcher.start(wait_for_lease=False)
        a_pass = asyncio.create_task(a.dispatcher.catch_up())
        await asyncio.wait_for(stall.stalled.wait(), WAIT_S)
        await take_over(b, clock)
        await asyncio.wait_for(b.dispatcher.catch_up(), WAIT_S)
        stall.release()  # A wakes up: its upload lands, beside B's objects
        with pytest.raises(LeaseLostError):
            await asyncio.wait_for(a_pass, WAIT_S)
        assert fenced(a) == 1
        assert lease_held(a) == 0 and lease_held(b) == 1  # a fenced sidecar holds nothing
        assert "fenced:" in caplog.text
        await check_exact(backend, store, spark, cold)


async def test_a_paused_sidecar_whose_lease_nobody_took_reclaims_it_and_goes_on(
    cold: Cold, store: Path, tmp_path: Path, spark: SparkSession, caplog: pytest.LogCaptureFixture
) -> None:
    """A lapse is not a loss: paused past its lease's expiry with nobody waiting, A
    abandons the segment in hand, reclaims the lease (same epoch) and finishes the pass."""
    clock = VirtualClock()
    stall = None

    def wrap(inner: Backend) -> Stall:
        nonlocal stall
        stall = Stall(inner, nth("write_chunks", "/COMMIT_LOG/", 3))  # A pauses, whole
        return stall

    async with sidecar("a", cold, store, tmp_path, clock, wrap) as (a, backend):
        assert stall is not None
        await a.dispatcher.start(wait_for_lease=False)
        a_pass = asyncio.create_task(a.dispatcher.catch_up())
        await asyncio.wait_for(stall.stalled.wait(), WAIT_S)
        await clock.advance(3 * RENEW_S + 1)  # past A's deadline and its record's expiry
        stall.release()
        report = await asyncio.wait_for(a_pass, WAIT_S)
        assert report.lapsed >= 1 and not report.errors
        assert a.dispatcher.lease.epoch == 1
        assert fenced(a) == 0
        assert "lease reclaimed after it lapsed" in caplog.text
        assert "fenced" not in caplog.text
        await check_exact(backend, store, spark, cold)


@pytest.mark.parametrize("a_lands_first", [False, True])
async def test_late_manifest_never_replaces_a_commit(
    cold: Cold,
    store: Path,
    tmp_path: Path,
    spark: SparkSession,
    caplog: pytest.LogCaptureFixture,
    a_lands_first: bool,
) -> None:
    clock = VirtualClock()
    stall = None

    def wrap(inner: Backend) -> Stall:
        nonlocal stall  # A passed its lease check; then its manifest create, and A, stall
        stall = Stall(inner, nth("create", "/MANIFEST/", 3))
        return stall

    async with (
        sidecar("a", cold, store, tmp_path, clock, wrap) as (a, _),
        sidecar("b", cold, store, tmp_path, clock) as (b, backend),
    ):
        assert stall is not None
        await a.dispatcher.start(wait_for_lease=False)
        a_pass = asyncio.create_task(a.dispatcher.catch_up())
        await asyncio.wait_for(stall.stalled.wait(), WAIT_S)
        await take_over(b, clock)
        if a_lands_first:
            stall.release("create", "read")  # A's stale manifest lands before B's ...
            await asyncio.wait_for(stall.landed("create"), WAIT_S)
            await asyncio.wait_for(b.dispatcher.catch_up(), WAIT_S)  # ... and B adopts it
            stall.release()
            with pytest.raises(LeaseLostError):
                await asyncio.wait_for(a_pass, WAIT_S)
        else:
            await asyncio.wait_for(b.dispatcher.catch_up(), WAIT_S)
            # Too late: B committed these offsets. A's create loses (and A reads whose
            # manifest won); A's renewal is still stuck, so the manifest is what fences A.
            stall.release("create", "read")
            with pytest.raises(LeaseLostError):
                await asyncio.wait_for(a_pass, WAIT_S)
            stall.release()
            assert "fenced: epoch 2" in caplog.text  # A saw B's manifest where it meant its own
        assert fenced(a) == 1
        assert "fenced" in caplog.text
        await check_exact(backend, store, spark, cold)


@pytest.mark.parametrize("a_lands_first", [False, True])
async def test_a_stale_batch_is_fenced_or_adopted_never_doubled(
    cold: Cold,
    store: Path,
    tmp_path: Path,
    spark: SparkSession,
    caplog: pytest.LogCaptureFixture,
    a_lands_first: bool,
) -> None:
    """Batching on: A's batch create (its second create under ``_batches/``: the first is
    its start's fence) is stuck; B takes over and fences the next sequence. Either A's
    batch landed before B started (B's reconcile adopts it, nothing is tiered twice; A
    may have finished its pass before it noticed the takeover) or it lands after B's
    fence (its create loses and A stops as fenced)."""
    clock = VirtualClock()
    stall = None

    def wrap(inner: Backend) -> Stall:
        nonlocal stall
        stall = Stall(inner, nth("create", "/_batches/", 2))
        return stall

    async with (
        sidecar("a", cold, store, tmp_path, clock, wrap, tiering__batching=True) as (a, _),
        sidecar("b", cold, store, tmp_path, clock, tiering__batching=True) as (b, backend),
    ):
        assert stall is not None
        await a.dispatcher.start(wait_for_lease=False)
        a_pass = asyncio.create_task(a.dispatcher.catch_up())
        await asyncio.wait_for(stall.stalled.wait(), WAIT_S)
        if a_lands_first:
            stall.release("create")  # A's batch lands; its renewals stay stuck
            await asyncio.wait_for(stall.landed("create"), WAIT_S)
        await take_over(b, clock)
        assert not (await asyncio.wait_for(b.dispatcher.catch_up(), WAIT_S)).errors
        stall.release()
        if a_lands_first:  # A may have finished its pass on the batch it committed in time
            with contextlib.suppress(LeaseLostError):
                await asyncio.wait_for(a_pass, WAIT_S)
        else:
            with pytest.raises(LeaseLostError):
                await asyncio.wait_for(a_pass, WAIT_S)
        await stall.drained()
        key = batch_key(CLUSTER, BROKER, 1)  # A's: its fence is sequence 0
        at_a = await read_batch(backend, key, await backend.size(key))
        if a_lands_first:  # A's batch stands, and B's catalogue adopted its slices
            assert isinstance(at_a, BatchHead) and at_a.index.lease_epoch == 1
            assert key in b.catalogue.slices.referenced_batches()
        else:  # B's fence took the key: A's batch never landed
            assert isinstance(at_a, BatchFence) and at_a.lease_epoch == 2
        history = await load_history(backend, CLUSTER, BROKER)
        assert not [o for h in history.queues.values() for o in h.overlaps]  # no doubles
        await check_exact(backend, store, spark, cold)


class Recorded:
    """A trigger matching the ``n``-th call of ``op`` on a key containing ``part``, that
    remembers the key it matched."""

    def __init__(self, op: str, part: str, n: int) -> None:
        self.match = nth(op, part, n)
        self.key = ""

    def __call__(self, called: str, key: str) -> bool:
        if self.match(called, key):
            self.key = key
            return True
        return False


async def test_a_frozen_manifest_create_never_lands_over_a_successors_slices(
    cold: Cold, store: Path, tmp_path: Path, spark: SparkSession, caplog: pytest.LogCaptureFixture
) -> None:
    """A commits per-queue segments and is frozen inside its third manifest create, at
    offset S of its queue; B takes over with batching on and segments too large to cut
    by size, so it commits the rest of that queue, from S, as batch slices. When A's
    create goes out, B's fence marker holds the key: A is fenced, cold holds no segment
    over B's slices, and cold covers hot exactly."""
    clock = VirtualClock()
    stall = None
    frozen = Recorded("create", "/MANIFEST/", 3)

    def wrap(inner: Backend) -> Stall:
        nonlocal stall
        stall = Stall(inner, frozen)
        return stall

    async with (
        sidecar("a", cold, store, tmp_path, clock, wrap, tiering__batching=False) as (a, _),
        sidecar(
            "b",
            cold,
            store,
            tmp_path,
            clock,
            tiering__batching=True,
            tiering__segment_max_bytes="64M",
        ) as (b, backend),  # fmt: skip
    ):
        assert stall is not None
        await a.dispatcher.start(wait_for_lease=False)
        a_pass = asyncio.create_task(a.dispatcher.catch_up())
        await asyncio.wait_for(stall.stalled.wait(), WAIT_S)
        await take_over(b, clock)
        assert not (await asyncio.wait_for(b.dispatcher.catch_up(), WAIT_S)).errors
        at = parse_object_key(frozen.key)
        history = await load_history(backend, CLUSTER, BROKER)
        links = history.queues[QueuePath(CLUSTER, BROKER, at.topic, at.queue_id)].links
        sliced = [c for c in links if c.start_offset == at.base_offset]
        assert [c.kind for c in sliced] == [EntryKind.SLICE]  # B sliced from S
        # A's create goes out now; its renewal stays stuck, so what fences A is the key.
        stall.release("create", "read")
        with pytest.raises(LeaseLostError):
            await asyncio.wait_for(a_pass, WAIT_S)
        stall.release()
        stored = read_stored(await backend.read(frozen.key), frozen.key)
        assert isinstance(stored, FenceMarker | Manifest) and stored.lease_epoch == 2
        assert fenced(a) == 1
        assert f"took queue offset {at.base_offset} of" in caplog.text
        history = await load_history(backend, CLUSTER, BROKER)
        assert not [o for h in history.queues.values() for o in h.overlaps]
        await check_exact(backend, store, spark, cold)


async def gc_takes_over(lease: Lease, clock: VirtualClock) -> None:
    """``gc``'s acquire (``wait=False``) of the lease A holds but renews no more: taken
    once A's record stayed unchanged for the lease time on this clock."""
    acquiring = asyncio.create_task(lease.acquire(wait=False))

    async def until_held() -> None:
        while not acquiring.done():
            await clock.parked_or_done(acquiring)
            if not acquiring.done():
                await clock.advance(1)

    await asyncio.wait_for(until_held(), WAIT_S)
    assert acquiring.result() == 2


async def test_gc_with_no_grace_fences_a_frozen_batch_create(
    cold: Cold, store: Path, tmp_path: Path, spark: SparkSession, caplog: pytest.LogCaptureFixture
) -> None:
    """Batching on: A's batch create (its second create under ``_batches/``) is stuck;
    ``gc --grace 0`` takes the lease over (epoch 2), collects and releases it. GC fenced
    the batch sequence, so A's create then finds GC's fence at its key and A stops as
    fenced; a sidecar started afterwards tiers everything, and cold covers hot exactly."""
    clock = VirtualClock()
    stall = None

    def wrap(inner: Backend) -> Stall:
        nonlocal stall
        stall = Stall(inner, nth("create", "/_batches/", 2))
        return stall

    async with (
        sidecar("a", cold, store, tmp_path, clock, wrap, tiering__batching=True) as (a, _),
        open_backend(cold.url, options=cold.options) as backend,
    ):
        assert stall is not None
        await a.dispatcher.start(wait_for_lease=False)
        a_pass = asyncio.create_task(a.dispatcher.catch_up())
        await asyncio.wait_for(stall.stalled.wait(), WAIT_S)
        gc_settings = settings_for(store, cold.url, tmp_path / "state-gc", **cold.settings)
        lease = lease_for(gc_settings, backend, clock)
        await gc_takes_over(lease, clock)
        report = await scan_garbage(backend, cluster=CLUSTER, broker=BROKER,
                                    now_ms=clock.now_ms(), grace_s=0)  # fmt: skip
        await delete_garbage(report, backend=backend, lease=lease)
        await lease.release()
        # A's batch create (and whatever else A had in flight) goes out after GC's epoch;
        # its renewal's swap stays stuck, so what fences A is the key it finds taken.
        stall.release("create", "read", "size", "exists", "list", "write", "write_chunks",
                      "delete")  # fmt: skip
        with pytest.raises(LeaseLostError):
            await asyncio.wait_for(a_pass, WAIT_S)
        stall.release()
        key = batch_key(CLUSTER, BROKER, 1)  # A's: its start fence is sequence 0
        at_a = await read_batch(backend, key, await backend.size(key))
        assert isinstance(at_a, BatchFence) and at_a.lease_epoch == 2
        assert "fenced: epoch 2 holds batch key first" in caplog.text
    async with sidecar("c", cold, store, tmp_path, clock, tiering__batching=True) as (c, backend):
        await c.dispatcher.start(wait_for_lease=False)
        assert not (await asyncio.wait_for(c.dispatcher.catch_up(), WAIT_S)).errors
        await check_exact(backend, store, spark, cold)


async def test_sigterm_with_a_slow_upload_while_a_second_sidecar_waits(
    cold: Cold, store: Path, tmp_path: Path, spark: SparkSession
) -> None:
    clock = VirtualClock()
    stall = None

    def wrap(inner: Backend) -> Stall:
        nonlocal stall  # one slow upload; everything else (renewals) goes on
        stall = Stall(
            inner, nth("write_chunks", "/COMMIT_LOG/", 3), hold_all=False, land_if_cancelled=True
        )
        return stall

    async with (
        sidecar("a", cold, store, tmp_path, clock, wrap) as (a, _),
        sidecar("b", cold, store, tmp_path, clock) as (b, backend),
    ):
        assert stall is not None
        await a.dispatcher.start(wait_for_lease=False)
        a_run = asyncio.create_task(a.dispatcher.run(shutdown_deadline=30))
        await asyncio.wait_for(stall.stalled.wait(), WAIT_S)
        b_start = asyncio.create_task(b.dispatcher.start(wait_for_lease=True))
        a.dispatcher.stop()  # SIGTERM
        for _ in range(5):  # 25 s of draining: A keeps renewing, B keeps waiting
            await clock.advance(5)
            await asyncio.sleep(0)
        assert not b_start.done()
        assert (await b.dispatcher.lease.read()).owner == a.dispatcher.lease.owner  # type: ignore[union-attr]
        await clock.advance(6)  # the drain deadline: the upload is abandoned
        await asyncio.wait_for(a_run, WAIT_S)
        await a.dispatcher.close()  # releases only now, after the upload returned
        # B may be reading the lease in a worker thread: let it park before time moves.
        await asyncio.wait_for(first_done(clock.parked(), b_start), WAIT_S)
        await clock.advance(RENEW_S)
        await asyncio.wait_for(b_start, WAIT_S)
        assert b.dispatcher.lease.epoch == 2
        await asyncio.wait_for(b.dispatcher.catch_up(), WAIT_S)
        stall.release()  # the abandoned request lands after all, under its own name
        await asyncio.wait_for(stall.drained(), WAIT_S)
        assert fenced(a) == 0
        await check_exact(backend, store, spark, cold)
