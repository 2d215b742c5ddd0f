"""GC: uncommitted objects and temp files older than the grace go; nothing a manifest (or
the catalogue) references ever does; damaged manifests are reported."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER, location_args, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tests.support.stores.segments import chain
from tieredstore.backends import open_backend
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.cli.main import main
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import SystemClock, VirtualClock
from tieredstore.cold.layout import (
    QueuePath,
    SegmentKind,
    config_copy_key,
    lease_key,
    object_key,
    parse_object_key,
    quarantine_key,
)
from tieredstore.cold.manifest import FenceMarker, Manifest, read_stored
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.dispatcher.lease.renewal import renew_until
from tieredstore.dispatcher.maintenance.gc import GarbageKind, delete_garbage, scan_garbage
from tieredstore.errors import ConditionFailedError, LeaseLostError
from tieredstore.findings import Finding, FindingKind
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.metadata.reconcile import rebuild

HOUR_MS = 3_600_000
GRACE_S = 3600.0


@pytest.fixture
def tiered(tmp_path: Path) -> Path:
    """A POSIX cold store holding a tiered synthetic store; returns the cold directory."""
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=2, messages=400, seed=5))

    async def tier() -> None:
        settings = settings_for(tmp_path / "store", str(tmp_path / "cold"), tmp_path / "state")
        async with open_runtime(settings) as rt:
            await rt.dispatcher.start(wait_for_lease=False)
            await rt.dispatcher.catch_up()

    asyncio.run(tier())
    return tmp_path / "cold"


def _age(path: Path, ms: int) -> None:
    """Set a file's mtime ``ms`` into the past (the test's clock is wall time here)."""
    t = time.time() - ms / 1000
    os.utime(path, (t, t))


def _objects(cold: Path) -> dict[str, bytes]:
    return {
        p.relative_to(cold).as_posix(): p.read_bytes()
        for p in sorted(cold.rglob("*"))
        if p.is_file() and p.name != "_lease.json"
    }


QUEUE = QueuePath(CLUSTER, BROKER, "SynthTopic0", 0)


def _plant(cold: Path) -> dict[str, Path]:
    """Leftovers of crashes, old and young, plus things GC must never touch."""
    planted: dict[str, Path] = {}

    def put(name: str, key: str, data: bytes, age_ms: int) -> None:
        path = cold.joinpath(*key.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        _age(path, age_ms)
        planted[name] = path

    put("old_cl", object_key(QUEUE, SegmentKind.COMMIT_LOG, 10**9), b"x" * 100, 2 * HOUR_MS)
    put("old_cq", object_key(QUEUE, SegmentKind.CONSUME_QUEUE, 10**9), b"y" * 40, 2 * HOUR_MS)
    put("young_cl", object_key(QUEUE, SegmentKind.COMMIT_LOG, 10**10), b"z", 60_000)
    cl_dir = QUEUE.root + "/COMMIT_LOG"
    put("old_tmp", f"{cl_dir}/.{'a' * 28}.tmp-{uuid.uuid4().hex}", b"partial", 2 * HOUR_MS)
    put("young_tmp", f"{cl_dir}/.{'b' * 28}.tmp-{uuid.uuid4().hex}", b"partial", 60_000)
    put("stranger", QUEUE.root + "/notes.txt", b"not ours", 2 * HOUR_MS)
    cl = parse_object_key(object_key(QUEUE, SegmentKind.COMMIT_LOG, 10**9))
    put("quarantined", quarantine_key(cl, stamp_ms=1), b"evidence", 2 * HOUR_MS)
    copy = config_copy_key(CLUSTER, BROKER, "consumerOffset.json", 1, "1" * 64)
    put("config_copy", copy, b"{0:5}", 2 * HOUR_MS)
    return planted


def _age_everything(cold: Path) -> None:
    """Make every committed object old too: only references may protect them."""
    for p in cold.rglob("*"):
        if p.is_file():
            _age(p, 5 * HOUR_MS)


async def test_scan_finds_old_leftovers_and_spares_everything_else(tiered: Path) -> None:
    planted = _plant(tiered)
    _age_everything(tiered)
    for name in ("young_cl", "young_tmp"):
        _age(planted[name], 60_000)
    async with open_backend(str(tiered)) as backend:
        report = await scan_garbage(
            backend,
            cluster=CLUSTER,
            broker=BROKER,
            now_ms=int(time.time() * 1000),
            grace_s=GRACE_S,
        )
        found = {(g.key, g.kind) for g in report.garbage}
        rel = {name: p.relative_to(tiered).as_posix() for name, p in planted.items()}
        assert found == {
            (rel["old_cl"], GarbageKind.UNCOMMITTED),
            (rel["old_cq"], GarbageKind.UNCOMMITTED),
            (rel["old_tmp"], GarbageKind.LEFTOVER),
        }
        assert report.young == 1  # young_cl (temp files within the grace are not counted)
        assert [(f.kind, f.key) for f in report.findings] == [
            (FindingKind.UNRECOGNISED, rel["stranger"])
        ]
        assert not report.damaged
        assert all(g.age_ms > GRACE_S * 1000 for g in report.garbage)
        before = _objects(tiered)
        lease = Lease(backend, lease_key(CLUSTER, BROKER), VirtualClock(int(time.time() * 1000)))
        await lease.acquire(wait=False)
        assert await delete_garbage(report, backend=backend, lease=lease) == 3
        after = _objects(tiered)
        assert set(before) - set(after) == {rel["old_cl"], rel["old_cq"], rel["old_tmp"]}
        assert rel["quarantined"] in after and rel["stranger"] in after
        assert rel["config_copy"] in after
        # Every committed segment is intact (the test reader knows no strangers).
        planted["stranger"].unlink()
        await assert_cold_matches_hot(backend, HotStore(tiered.parent / "store"), CLUSTER, BROKER)


async def test_missing_objects_are_reported_and_their_siblings_kept(tiered: Path) -> None:
    _age_everything(tiered)
    async with open_backend(str(tiered)) as backend:
        manifests = [
            o.key
            for o in await backend.list()
            if "/MANIFEST/" in o.key and "/SynthTopic0/0/" in o.key
        ]
        victim = manifests[0]
        doc = (await backend.read(victim)).decode()
        cq_key = next(
            o.key
            for o in await backend.list(QUEUE.root + "/CONSUME_QUEUE/")
            if o.key.rsplit("/", 1)[1] in doc
        )
        await backend.delete(cq_key)
        report = await scan_garbage(
            backend, cluster=CLUSTER, broker=BROKER, now_ms=int(time.time() * 1000), grace_s=1
        )
        assert [(f.kind, f.key) for f in report.damaged] == [(FindingKind.MISSING_OBJECT, cq_key)]
        assert report.garbage == ()  # the manifest's commit-log object is referenced: kept


async def test_gc_and_rebuild_report_one_damage_as_the_same_finding(
    tiered: Path, tmp_path: Path
) -> None:
    """One occurrence, one class: gc and reconcile say a missing object alike."""
    _age_everything(tiered)
    async with open_backend(str(tiered)) as backend:
        cq_key = next(o.key for o in await backend.list(QUEUE.root + "/CONSUME_QUEUE/"))
        await backend.delete(cq_key)
        scanned = await scan_garbage(
            backend, cluster=CLUSTER, broker=BROKER, now_ms=int(time.time() * 1000), grace_s=1
        )
        rebuilt = await rebuild(backend, tmp_path / "rebuilt", cluster=CLUSTER, broker=BROKER)
    by_gc = [f for f in scanned.findings if f.key == cq_key]
    by_reconcile = [f for f in rebuilt.findings if f.key == cq_key]
    assert [f.kind for f in by_gc + by_reconcile] == [FindingKind.MISSING_OBJECT] * 2
    for f in by_gc + by_reconcile:
        assert type(f) is Finding
        assert f.describe() == str(f) == f"missing_object: {f.detail} ({cq_key})"


async def test_a_corrupt_manifest_shields_its_whole_queue(tiered: Path) -> None:
    planted = _plant(tiered)
    _age_everything(tiered)
    async with open_backend(str(tiered)) as backend:
        manifest = next(o.key for o in await backend.list(QUEUE.root + "/MANIFEST/"))
        await backend.write(manifest, b"{not json")
        report = await scan_garbage(
            backend, cluster=CLUSTER, broker=BROKER, now_ms=int(time.time() * 1000), grace_s=1
        )
    assert [f.kind for f in report.damaged] == [FindingKind.CORRUPT_MANIFEST]
    rel = {name: p.relative_to(tiered).as_posix() for name, p in planted.items()}
    # Objects of SynthTopic0/0 are spared (the broken manifest's references are unknown);
    # temp files are not objects anyone references, so they still go.
    assert {g.key for g in report.garbage} == {rel["old_tmp"], rel["young_tmp"]}


async def test_grace_follows_the_injected_clock_on_memory() -> None:
    reset_memory_stores()
    clock = VirtualClock(start_ms=1_800_000_000_000)
    backend = MemoryBackend("gc-clock", clock=lambda: clock.now_ms() / 1000)
    seg1, seg2 = chain(QUEUE, [3, 4])
    for key, data in (
        (seg1.manifest.commit_log_key, seg1.commit_log),
        (seg1.manifest.consume_queue_key, seg1.consume_queue),
        (seg1.manifest.key, seg1.manifest.to_json()),
        # An upload killed before its manifest: uncommitted.
        (seg2.manifest.commit_log_key, seg2.commit_log),
        (seg2.manifest.consume_queue_key, seg2.consume_queue),
    ):
        await backend.write(key, data)

    async def scan() -> set[str]:
        report = await scan_garbage(
            backend, cluster=CLUSTER, broker=BROKER, now_ms=clock.now_ms(), grace_s=GRACE_S
        )
        return {g.key for g in report.garbage}

    clock.set_ms(clock.now_ms() + int(GRACE_S * 1000))
    assert await scan() == set()  # exactly the grace: not older than it
    clock.set_ms(clock.now_ms() + 1)
    uncommitted = {seg2.manifest.commit_log_key, seg2.manifest.consume_queue_key}
    assert await scan() == uncommitted
    # What the catalogue references is protected even without a manifest.
    report = await scan_garbage(
        backend,
        cluster=CLUSTER,
        broker=BROKER,
        now_ms=clock.now_ms(),
        grace_s=GRACE_S,
        protected={seg2.manifest.commit_log_key},
    )
    assert {g.key for g in report.garbage} == {seg2.manifest.consume_queue_key}


async def test_delete_needs_the_lease(tiered: Path) -> None:
    _plant(tiered)
    async with open_backend(str(tiered)) as backend:
        report = await scan_garbage(
            backend, cluster=CLUSTER, broker=BROKER, now_ms=int(time.time() * 1000), grace_s=1
        )
        assert report.garbage
        never_acquired = Lease(backend, lease_key(CLUSTER, BROKER), VirtualClock())
        before = _objects(tiered)
        with pytest.raises(LeaseLostError):
            await delete_garbage(report, backend=backend, lease=never_acquired)
        assert _objects(tiered) == before


@contextlib.contextmanager
def _live_holder(cold: Path) -> Iterator[None]:
    """A writer holding the lease and renewing it (as a running sidecar does), in its own
    thread and event loop, with a short renew interval (its record states 0.9 s)."""
    held, stop = threading.Event(), threading.Event()

    async def hold() -> None:
        async with open_backend(str(cold)) as backend:
            clock = SystemClock()
            lease = Lease(backend, lease_key(CLUSTER, BROKER), clock, renew_interval=0.3)
            await lease.acquire(wait=False)
            held.set()
            done = asyncio.Event()

            async def stopper() -> None:
                await asyncio.to_thread(stop.wait)
                done.set()

            stopping = asyncio.create_task(stopper())
            await renew_until(lease, clock, done)
            await stopping
            await lease.release()

    thread = threading.Thread(target=asyncio.run, args=(hold(),), daemon=True)
    thread.start()
    assert held.wait(60)
    try:
        yield
    finally:
        stop.set()
        thread.join(60)


def test_gc_command_refuses_while_a_sidecar_holds_the_lease(
    tiered: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _plant(tiered)
    before = _objects(tiered)
    with _live_holder(tiered):
        assert main(_cli(tmp_path, "--grace", "1s")) == 1
    assert "holds the writer lease: it renewed it while" in capsys.readouterr().err
    assert _objects(tiered) == before


def _cli(tmp_path: Path, *args: str) -> list[str]:
    return ["gc", *args, *location_args(tmp_path / "store", tmp_path / "cold", tmp_path / "state")]


def test_gc_command_dry_run_then_delete(
    tiered: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    planted = _plant(tiered)
    before = _objects(tiered)
    assert main(_cli(tmp_path, "--dry-run", "--grace", "1h")) == 0
    out = capsys.readouterr().out
    assert _objects(tiered) == before
    rel = {name: p.relative_to(tiered).as_posix() for name, p in planted.items()}
    assert f"would delete {rel['old_cl']}: 100 bytes, age 2h" in out
    assert "uncommitted object: no manifest references it" in out
    assert f"would delete {rel['old_tmp']}" in out and "left by an interrupted write" in out
    assert "dry run: would delete 3 objects" in out
    assert main(_cli(tmp_path, "--grace", "1h")) == 0
    out = capsys.readouterr().out
    assert "deleted 3 objects" in out
    assert set(before) - set(_objects(tiered)) == {rel["old_cl"], rel["old_cq"], rel["old_tmp"]}


def test_gc_command_exits_1_on_damage(
    tiered: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim = next(p for p in tiered.rglob("*") if "/COMMIT_LOG/" in p.as_posix())
    victim.unlink()
    assert main(_cli(tmp_path, "--dry-run")) == 1
    out = capsys.readouterr().out
    assert "DAMAGED missing_object: commit-log object of manifest" in out


async def _uncommitted_pair(clock: VirtualClock) -> tuple[MemoryBackend, Manifest, Manifest]:
    """seg1 committed; seg2's objects uploaded by a writer frozen before its create."""
    reset_memory_stores()
    backend = MemoryBackend("gc-fence", clock=lambda: clock.now_ms() / 1000)
    seg1, seg2 = chain(QUEUE, [3, 4])
    for seg in (seg1, seg2):
        await backend.write(seg.manifest.commit_log_key, seg.commit_log)
        await backend.write(seg.manifest.consume_queue_key, seg.consume_queue)
    await backend.write(seg1.manifest.key, seg1.manifest.to_json())
    clock.set_ms(clock.now_ms() + int(GRACE_S * 1000) + 1)
    return backend, seg1.manifest, seg2.manifest


async def test_gc_fences_a_segment_start_before_deleting_its_objects() -> None:
    """The frozen writer's create then finds GC's marker of a newer epoch: no manifest
    can ever name the objects GC deleted, and every reader sees no segment there."""
    clock = VirtualClock(start_ms=1_800_000_000_000)
    backend, _, m2 = await _uncommitted_pair(clock)
    report = await scan_garbage(
        backend, cluster=CLUSTER, broker=BROKER, now_ms=clock.now_ms(), grace_s=GRACE_S
    )
    assert [f.key for f in report.fences] == [m2.key]
    lease = Lease(backend, lease_key(CLUSTER, BROKER), clock, owner="gc-1")
    await lease.acquire(wait=False)
    assert await delete_garbage(report, backend=backend, lease=lease) == 2
    marker = read_stored(await backend.read(m2.key), m2.key)
    assert isinstance(marker, FenceMarker) and marker.lease_epoch == lease.epoch
    with pytest.raises(ConditionFailedError):  # the frozen writer's create
        await backend.create(m2.key, m2.to_json())
    again = await scan_garbage(
        backend, cluster=CLUSTER, broker=BROKER, now_ms=clock.now_ms(), grace_s=0
    )
    assert again.findings == () and again.manifests == 1  # the marker is no manifest


async def test_a_manifest_that_landed_since_the_scan_keeps_its_objects() -> None:
    clock = VirtualClock(start_ms=1_800_000_000_000)
    backend, _, m2 = await _uncommitted_pair(clock)
    report = await scan_garbage(
        backend, cluster=CLUSTER, broker=BROKER, now_ms=clock.now_ms(), grace_s=GRACE_S
    )
    await backend.create(m2.key, m2.to_json())  # the frozen writer thawed first
    lease = Lease(backend, lease_key(CLUSTER, BROKER), clock, owner="gc-1")
    await lease.acquire(wait=False)
    assert await delete_garbage(report, backend=backend, lease=lease) == 0
    assert await backend.exists(m2.commit_log_key) and await backend.exists(m2.consume_queue_key)
    assert await backend.read(m2.key) == m2.to_json()


async def test_an_older_epoch_s_marker_is_stamped_again() -> None:
    """A writer of an epoch between two GCs may replace the first GC's marker; the
    second GC re-stamps it (compare-and-swap) before deleting that writer's objects."""
    clock = VirtualClock(start_ms=1_800_000_000_000)
    backend, _, m2 = await _uncommitted_pair(clock)
    old = FenceMarker(CLUSTER, BROKER, QUEUE.topic, 0, m2.start_offset, lease_epoch=1,
                      writer_id="gc-0", created_at_ms=0)  # fmt: skip
    await backend.write(m2.key, old.to_json())
    report = await scan_garbage(
        backend, cluster=CLUSTER, broker=BROKER, now_ms=clock.now_ms(), grace_s=GRACE_S
    )
    lease = Lease(backend, lease_key(CLUSTER, BROKER), clock, owner="gc-1")
    await lease.acquire(wait=False)
    await lease.acquire(wait=False)  # a later epoch than the marker's
    await delete_garbage(report, backend=backend, lease=lease)
    marker = read_stored(await backend.read(m2.key), m2.key)
    assert isinstance(marker, FenceMarker) and marker.lease_epoch == lease.epoch > 1
