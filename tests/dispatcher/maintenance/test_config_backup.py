"""The config backup job: byte-for-byte copies on change, bounded history, the lease."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.cold.configcopies import list_copies, pick_copy
from tieredstore.cold.layout import lease_key
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.dispatcher.maintenance.config_backup import ConfigBackup
from tieredstore.errors import LeaseLostError
from tieredstore.hot.synth import SynthSpec, synthesize

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "golden_store" / "config"
T0 = 1_700_000_000_000


@pytest.fixture
def config(tmp_path: Path) -> Path:
    shutil.copytree(GOLDEN, tmp_path / "config")
    return tmp_path / "config"


async def _job(
    config: Path, clock: VirtualClock, *, history: int = 3
) -> tuple[ConfigBackup, MemoryBackend]:
    reset_memory_stores()
    backend = MemoryBackend.from_url("memory://config-backup")
    lease = Lease(backend, lease_key(CLUSTER, BROKER), clock)
    await lease.acquire(wait=False)
    job = ConfigBackup(
        config_dir=config,
        backend=backend,
        lease=lease,
        clock=clock,
        cluster=CLUSTER,
        broker=BROKER,
        history=history,
    )
    return job, backend


async def test_files_are_copied_byte_for_byte_only_when_they_change(config: Path) -> None:
    clock = VirtualClock(T0)
    job, backend = await _job(config, clock)
    first = await job.run_pass()
    assert sorted(first.copied) == ["consumerOffset.json", "topics.json"]  # the others are absent
    for name in first.copied:
        (copy,) = await list_copies(backend, CLUSTER, BROKER, name)
        assert await backend.read(copy.key) == (config / name).read_bytes()
        assert copy.stamp_ms == T0
    await clock.advance(10)  # within the lease's life: the job renews it
    assert (await job.run_pass()).copied == []  # nothing changed: nothing written
    offsets = config / "consumerOffset.json"
    offsets.write_bytes(offsets.read_bytes().replace(b"{0:5,", b"{0:6,"))
    # Within the holder's own deadline (20 s after the last renewal was sent; nothing
    # was written, so nothing renewed it since T0): the job renews it.
    await clock.advance(9)
    assert (await job.run_pass()).copied == ["consumerOffset.json"]
    copies = await list_copies(backend, CLUSTER, BROKER, "consumerOffset.json")
    assert [c.stamp_ms for c in copies] == [T0, T0 + 19_000]
    assert await backend.read(copies[-1].key) == offsets.read_bytes()
    # A new job (a restarted sidecar) finds the newest copy instead of copying again.
    fresh = ConfigBackup(
        config_dir=config,
        backend=backend,
        lease=job.lease,
        clock=clock,
        cluster=CLUSTER,
        broker=BROKER,
        history=3,
    )
    assert (await fresh.run_pass()).copied == []
    assert pick_copy(copies, T0 + 10_000) == copies[0]
    assert pick_copy(copies, T0 - 1) is None


async def test_history_is_bounded(config: Path) -> None:
    clock = VirtualClock(T0)
    job, backend = await _job(config, clock, history=3)
    offsets = config / "consumerOffset.json"
    for n in range(6):
        offsets.write_bytes(b'{"offsetTable":{"t@g":{0:%d}}}' % n)
        await job.run_pass()
        await clock.advance(1)
    copies = await list_copies(backend, CLUSTER, BROKER, "consumerOffset.json")
    assert [c.stamp_ms for c in copies] == [T0 + 3000, T0 + 4000, T0 + 5000]
    assert await backend.read(copies[-1].key) == b'{"offsetTable":{"t@g":{0:5}}}'


async def test_an_unparsable_file_is_not_copied(config: Path) -> None:
    clock = VirtualClock(T0)
    job, backend = await _job(config, clock)
    await job.run_pass()
    (config / "topics.json").write_bytes(b'{"topicConfigTable":')  # not what a broker writes
    report = await job.run_pass()
    assert report.skipped == ["topics.json"] and report.copied == []
    assert len(await list_copies(backend, CLUSTER, BROKER, "topics.json")) == 1


async def test_no_write_without_the_lease(config: Path) -> None:
    clock = VirtualClock(T0)
    job, backend = await _job(config, clock)
    job.lease = Lease(backend, lease_key(CLUSTER, BROKER), clock)  # never acquired
    with pytest.raises(LeaseLostError):
        await job.run_pass()
    assert await list_copies(backend, CLUSTER, BROKER, "topics.json") == []


async def test_the_sidecar_backs_up_config_when_it_starts(tmp_path: Path) -> None:
    reset_memory_stores()
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=1, messages=10))
    settings = settings_for(
        tmp_path / "store",
        "memory://sidecar-config",
        tmp_path / "state",
        config_backup__enabled=True,
    )
    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        (copy,) = await list_copies(rt.backend, CLUSTER, BROKER, "topics.json")
        assert (
            await rt.backend.read(copy.key) == (tmp_path / "store/config/topics.json").read_bytes()
        )
    off = settings_for(
        tmp_path / "store",
        "memory://sidecar-config2",
        tmp_path / "state2",
        config_backup__enabled=False,
    )
    async with open_runtime(off) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        assert rt.config_backup is None
        assert await list_copies(rt.backend, CLUSTER, BROKER, "topics.json") == []
