"""The durability guard, end to end (see dispatcher/tiering/durability.py for the broker's rules).

* ``sync``: planned records are made durable (fdatasync of the commitlog files that may
  hold unflushed data up to them) before upload — whatever the checkpoint says.
* ``checkpoint``: only records stored strictly before the checkpoint's flushed time; no
  age ever releases a record.
* a store that refuses fdatasync falls back to ``checkpoint``, loudly.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from tests.support.pagecache import cachestat, cachestat_available
from tests.support.sidecar.settings import settings_for
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.dispatcher.tiering.durability import CommitlogSyncer
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize

T0 = 1_800_000_000_000
SPEC = SynthSpec(
    topics=1,
    queues=1,
    messages=100,
    start_time=T0,
    interval_ms=100,
    body_min=2000,
    body_max=2000,
    commitlog_file_size=64 << 10,
    compress_over=0,
)


class Recorder:
    """An fdatasync that records which files it was asked to sync (then really syncs)."""

    def __init__(self, fail: int | None = None) -> None:
        self.fail = fail
        self.inodes: list[int] = []

    def __call__(self, fd: int) -> None:
        if self.fail is not None:
            raise OSError(self.fail, "refused by the test filesystem")
        import os

        self.inodes.append(os.fstat(fd).st_ino)
        os.fdatasync(fd)


def _inodes(store: Path) -> dict[int, int]:
    """Commitlog file base → inode."""
    return {f.base: f.path.stat().st_ino for f in HotStore(store).commitlog_files().files}


async def test_checkpoint_rule_is_strict_and_never_ages_out(tmp_path: Path) -> None:
    store = synthesize(tmp_path / "store", SPEC)
    store.set_checkpoint(T0 + 49 * 100)  # the broker's flush recorded message 49's time
    clock = VirtualClock(start_ms=T0 + 100 * 100)
    settings = settings_for(
        store.root, "memory://g1", tmp_path / "state", tiering__guard="checkpoint"
    )
    async with open_runtime(settings, clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        # Strictly before the checkpoint: 0..48; 49 (same millisecond) may be unflushed.
        assert (await rt.dispatcher.catch_up()).messages == 49
        # 15 s later (the old guard_age was 10 s; the holder's own lease deadline is 20 s
        # after its last renewal), the checkpoint unmoved: nothing more.
        clock.set_ms(T0 + 100 * 100 + 15_000)
        assert (await rt.dispatcher.catch_up()).messages == 0
        assert rt.metrics.guard_mode.labels("checkpoint")._value.get() == 1
        store.set_checkpoint(T0 + 99 * 100 + 1)  # the broker flushed everything since
        assert (await rt.dispatcher.catch_up()).messages == 51


async def test_sync_rule_tiers_at_once_after_syncing_the_unflushed_files(tmp_path: Path) -> None:
    store = synthesize(tmp_path / "store", SPEC)
    files = _inodes(store.root)
    assert len(files) >= 3
    bases = sorted(files)
    # The checkpoint vouches for everything stored before a time just after the second
    # file's first record: only the first file is wholly before it.
    second_first_ts = HotStore(store.root).read_store_timestamp(bases[1])
    store.set_checkpoint(second_first_ts + 1)
    clock = VirtualClock(start_ms=T0 + 100 * 100)
    settings = settings_for(store.root, "memory://g2", tmp_path / "state")  # default: sync
    recorder = Recorder()
    async with open_runtime(settings, clock=clock) as rt:
        rt.dispatcher.syncer = CommitlogSyncer(rt.hot, fdatasync=recorder)
        await rt.dispatcher.start(wait_for_lease=False)
        assert (await rt.dispatcher.catch_up()).messages == 100  # no waiting for anything
        # From the newest file that starts before the checkpoint time (recovery's own
        # rule): the first file is vouched for, the second on are synced.
        hot = HotStore(store.root)
        units = hot.read_units("SynthTopic0", 0, 99, 100)
        cl_end = int(units["commitlog_offset"][0]) + int(units["size"][0])
        assert set(recorder.inodes) == {files[b] for b in bases[1:] if b < cl_end}
        assert rt.metrics.guard_mode.labels("sync")._value.get() == 1
        assert rt.metrics.guard_syncs._value.get() == len(recorder.inodes)


async def test_sync_makes_the_page_cache_clean_before_upload(tmp_path: Path) -> None:
    store = synthesize(tmp_path / "store", SPEC)
    hot = HotStore(store.root)
    if not cachestat_available(hot.commitlog_files().files[0].path):
        pytest.skip("this kernel has no cachestat(2) to look at dirty pages")
    store.append(50)  # fresh writes: dirty in the page cache
    store.set_checkpoint(T0)  # the broker has flushed nothing
    last = hot.read_units("SynthTopic0", 0, 149, 150)
    newest = hot.commitlog_files().find(int(last["commitlog_offset"][0]))
    assert newest is not None and not cachestat(newest.path, 0, newest.size).on_disk
    settings = settings_for(store.root, "memory://g3", tmp_path / "state")
    async with open_runtime(settings, clock=VirtualClock(start_ms=T0 + 10**6)) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        assert (await rt.dispatcher.catch_up()).messages == 150
    for f in hot.commitlog_files().files:
        assert cachestat(f.path, 0, f.size).on_disk, f.path


async def test_a_store_refusing_fdatasync_falls_back_to_the_checkpoint_rule(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = synthesize(tmp_path / "store", SPEC)
    store.set_checkpoint(T0 + 30 * 100)
    settings = settings_for(store.root, "memory://g4", tmp_path / "state")
    async with open_runtime(settings, clock=VirtualClock(start_ms=T0 + 10**6)) as rt:
        rt.dispatcher.syncer = CommitlogSyncer(rt.hot, fdatasync=Recorder(fail=errno.EROFS))
        await rt.dispatcher.start(wait_for_lease=False)
        with caplog.at_level(logging.ERROR):
            assert (await rt.dispatcher.catch_up()).messages == 30
        assert "falling back to the checkpoint rule" in caplog.text
        assert rt.metrics.guard_sync_failures._value.get() == 1
        assert rt.metrics.guard_mode.labels("checkpoint")._value.get() == 1


async def test_guard_none_tiers_everything(tmp_path: Path) -> None:
    store = synthesize(tmp_path / "store", SPEC)
    store.set_checkpoint(T0)
    settings = settings_for(store.root, "memory://g5", tmp_path / "state", tiering__guard="none")
    async with open_runtime(settings, clock=VirtualClock(start_ms=T0 + 10**6)) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        assert (await rt.dispatcher.catch_up()).messages == 100


async def test_guard_age_is_deprecated_and_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = synthesize(tmp_path / "store", SPEC)
    store.set_checkpoint(T0 + 9 * 100)
    settings = settings_for(
        store.root, "memory://g6", tmp_path / "state",
        tiering__guard="checkpoint", tiering__guard_age="1s",
    )  # fmt: skip
    assert settings.deprecations() == [
        "setting tiering.guard_age (flag) is deprecated: " + settings_deprecation()
    ]
    with caplog.at_level(logging.WARNING):
        async with open_runtime(settings, clock=VirtualClock(start_ms=T0 + 10**7)) as rt:
            await rt.dispatcher.start(wait_for_lease=False)
            # An old guard would have tiered everything older than 1 s; this one does not.
            assert (await rt.dispatcher.catch_up()).messages == 9
    assert "tiering.guard_age (flag) is deprecated" in caplog.text


def settings_deprecation() -> str:
    from tieredstore.settings.loader import SETTINGS

    return next(s.deprecated for s in SETTINGS if s.key == "tiering.guard_age")
