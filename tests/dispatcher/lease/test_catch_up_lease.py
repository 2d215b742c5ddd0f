"""``run --once`` keeps its lease: a catch-up pass may last longer than the lease.

The cold store here is the in-memory backend behind a thin wrapper that moves a virtual
clock forward on every COMMIT_LOG write, so each segment "takes" several seconds and the
whole pass lasts many lease lifetimes. The pass must finish with the lease it started
with, renewed on the way, and write every segment.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from pathlib import Path

from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tieredstore.backends.base import Backend
from tieredstore.backends.forwarding import ForwardingBackend
from tieredstore.backends.memory import MemoryBackend
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.cold.history import load_history
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize

RENEW_S = 10  # the lease expires after 3 x 10 s without renewal
SEGMENT_S = 7  # virtual seconds each COMMIT_LOG (or batch object) upload takes


class SlowUploads(ForwardingBackend):
    """``inner``, where writing a COMMIT_LOG object or creating a batch object (with
    batching on, the segments cut by age go there) advances ``clock`` by ``seconds``."""

    def __init__(self, inner: Backend, clock: VirtualClock, seconds: float) -> None:
        super().__init__(inner)
        self.clock, self.seconds = clock, seconds
        self.uploads = 0

    async def _pass_time(self, key: str) -> None:
        if "/COMMIT_LOG/" in key or "/_batches/" in key:
            self.uploads += 1
            await self.clock.advance(self.seconds)  # wakes the renewal loop when it is due

    async def write(self, key: str, data: bytes) -> None:
        await self._pass_time(key)
        await self.inner.write(key, data)

    async def write_chunks(self, key: str, chunks: AsyncIterable[bytes]) -> int:
        await self._pass_time(key)
        return await self.inner.write_chunks(key, chunks)

    async def create(self, key: str, data: bytes) -> str:
        if not data.startswith(b"{"):  # a batch fence (JSON) holds no data
            await self._pass_time(key)
        return await self.inner.create(key, data)


async def test_catch_up_longer_than_the_lease_renews_it(tmp_path: Path) -> None:
    # Enough for > 4 lease lifetimes of uploads when batching (TS_TEST_BATCHING) puts each
    # queue's tail into one shared batch object.
    spec = SynthSpec(topics=2, queues=2, messages=3000, body_min=200, body_max=600)
    store = synthesize(tmp_path / "store", spec)
    clock = VirtualClock()
    cold = SlowUploads(MemoryBackend("catch-up-lease"), clock, SEGMENT_S)
    settings = settings_for(
        store.root,
        "memory://catch-up-lease",
        tmp_path / "state",
        lease__renew_interval=f"{RENEW_S}s",
        tiering__concurrency=1,
        tiering__guard="none",
    )
    start_ms = clock.now_ms()
    async with open_runtime(settings, clock=clock, backend=cold) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        epoch = rt.dispatcher.lease.epoch
        report = await rt.dispatcher.catch_up()
        # The pass lasted far longer than one lease lifetime ...
        assert clock.now_ms() - start_ms > 4 * 3 * RENEW_S * 1000
        # ... and still committed every segment (or batch slice), under the lease it started
        # with: every upload is one committed segment's COMMIT_LOG or one batch, none wasted.
        links = (await load_history(cold, CLUSTER, BROKER)).links()
        assert report.segments + report.slices == len(links) and not report.errors
        assert cold.uploads == len({link.commit_log_key for link in links})
        assert rt.dispatcher.lease.epoch == epoch
        await rt.dispatcher.lease.ensure_held()
        hot = HotStore(store.root)
        for q in rt.catalogue.queues.all():
            assert q.cold_commit == hot.queue_range(q.topic, q.queue_id).max


async def test_the_catalogue_mirrors_the_hold_for_status(tmp_path: Path) -> None:
    """``status`` reads the lease from the catalogue: taken, renewed, released (owner kept,
    the hold ended at the release)."""
    store = synthesize(tmp_path / "store", SynthSpec(topics=1, queues=2, messages=2000))
    clock = VirtualClock()
    cold = SlowUploads(MemoryBackend("mirror-lease"), clock, SEGMENT_S)
    settings = settings_for(store.root, "memory://mirror-lease", tmp_path / "state",
                            lease__renew_interval=f"{RENEW_S}s", tiering__concurrency=1,
                            tiering__guard="none", tiering__segment_max_messages=100)  # fmt: skip
    async with open_runtime(settings, clock=clock, backend=cold) as rt:
        assert rt.catalogue.lease() is None
        await rt.dispatcher.start(wait_for_lease=False)
        lease = rt.dispatcher.lease
        taken = rt.catalogue.lease()
        assert taken is not None and (taken.owner, taken.epoch) == (lease.owner, lease.epoch)
        assert taken.expires_at_ms == clock.now_ms() + 3 * RENEW_S * 1000
        await rt.dispatcher.catch_up()
        renewed = rt.catalogue.lease()
        assert renewed is not None and renewed.expires_at_ms > taken.expires_at_ms
        assert renewed.expires_at_ms == lease.expires_at_ms
        await rt.dispatcher.close()
        released = rt.catalogue.lease()
        assert released is not None and released.owner == lease.owner
        assert released.expires_at_ms == clock.now_ms()  # nobody holds it from now on


class SlowManifestReads(ForwardingBackend):
    """``inner``, where reading a segment's manifest advances ``clock`` by ``seconds``:
    a start-up reconcile of a large cold store on a slow link."""

    def __init__(self, inner: Backend, clock: VirtualClock, seconds: float) -> None:
        super().__init__(inner)
        self.clock, self.seconds = clock, seconds
        self.reads = 0

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        if "/MANIFEST/" in key:
            self.reads += 1
            await self.clock.advance(self.seconds)
        return await self.inner.read(key, start, end)


async def test_a_start_up_longer_than_the_lease_renews_it(tmp_path: Path) -> None:
    """The start-up reconcile of a new state directory reads every manifest in cold; when
    that outlasts the lease, the sidecar still holds the lease it took (renewed on the
    way, the catalogue mirroring it), not one a successor could take meanwhile."""
    store = synthesize(tmp_path / "store", SynthSpec(topics=1, queues=2, messages=2000))
    clock = VirtualClock()
    inner = MemoryBackend("start-up-lease")
    first = settings_for(store.root, "memory://start-up-lease", tmp_path / "state",
                         tiering__segment_max_messages=100, tiering__batching=False,
                         tiering__guard="none")  # fmt: skip
    async with open_runtime(first, clock=clock, backend=inner) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.catch_up()
    await clock.advance(3600)  # the first writer is long gone
    slow = SlowManifestReads(inner, clock, SEGMENT_S)
    second = settings_for(store.root, "memory://start-up-lease", tmp_path / "new-state",
                          lease__renew_interval=f"{RENEW_S}s", tiering__guard="none")  # fmt: skip
    async with open_runtime(second, clock=clock, backend=slow) as rt:
        begun = clock.now_ms()
        await rt.dispatcher.start(wait_for_lease=False)
        assert clock.now_ms() - begun > 2 * 3 * RENEW_S * 1000, slow.reads
        lease = rt.dispatcher.lease
        await lease.ensure_held()
        held = rt.catalogue.lease()
        assert held is not None and held.expires_at_ms == lease.expires_at_ms > begun + 30_000
