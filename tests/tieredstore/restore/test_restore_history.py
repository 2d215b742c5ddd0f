"""A restore follows the cold store's history: resumable from its first write (kill -9
at random points, real processes), and an accepted loss restores the queue from the
first offset after it instead of refusing the broker."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tieredstore.backends import open_backend
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.cold.layout import QueuePath, loss_key, parse_object_key
from tieredstore.cold.loss import LOSS_FORMAT_VERSION, LossRecord, write_loss_record
from tieredstore.cold.manifest import read_manifest
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.restore.check import check_restored
from tieredstore.restore.journal import JOURNAL_NAME

pytestmark = pytest.mark.slow  # every test here takes over a second: not in make quick

SPEC = SynthSpec(topics=2, queues=2, messages=3000, body_min=200, body_max=3000,
                 commitlog_file_size=512 << 10, cq_file_size=50 * 20, interval_ms=10,
                 seed=27)  # fmt: skip


def _tier(store: Path, cold: Path, state: Path) -> None:
    async def go() -> None:
        # Per-queue segments only: each test turns one into an accepted loss by deleting
        # its objects, which a batch slice (part of a shared object) cannot be.
        settings = settings_for(
            store, str(cold), state, tiering__segment_max_messages=100, tiering__batching=False
        )
        async with open_runtime(settings) as rt:
            await rt.dispatcher.start(wait_for_lease=False)
            assert not (await rt.dispatcher.catch_up()).errors

    asyncio.run(go())


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("restore-history")
    store, cold = root / "store", root / "cold"
    synthesize(store, SPEC)
    _tier(store, cold, root / "state")
    return store, cold


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tieredstore.cli", *args]


def _restore_argv(cold: Path, out: Path) -> list[str]:
    return _cli("restore", "--cold", str(cold), "--cluster", CLUSTER, "--broker", BROKER,
                "--out", str(out), "--commitlog-file-size", "256K", "--progress", "off",
                "--batch-bytes", "65536")  # fmt: skip


def _tree(root: Path) -> dict[str, bytes]:
    """Every file a broker reads (the journal records when, not what: left out)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in (JOURNAL_NAME, "lock")
    }


def test_a_restore_killed_at_random_points_resumes_to_the_same_store(
    tiered: tuple[Path, Path], tmp_path: Path
) -> None:
    """SIGKILL (no handler runs) at random moments; with the default commit size the
    whole run lies before the first journal commit, where old code left files and no
    journal: "output directory is not empty". Each rerun must finish the same store."""
    _, cold = tiered
    whole = tmp_path / "whole"
    subprocess.run(_restore_argv(cold, whole), check=True, capture_output=True, timeout=120)
    total = _written(whole)
    rng = random.Random(2711)
    # Kill once the output holds a random share of the whole store's bytes (the first
    # as soon as anything is there): any moment must leave a directory a rerun finishes.
    points = [0.0, *sorted(rng.uniform(0.05, 0.95) for _ in range(4))]
    resumed = 0
    for i, share in enumerate(points):
        out = tmp_path / f"killed-{i}"
        proc = subprocess.Popen(_restore_argv(cold, out), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        while proc.poll() is None and not (out.is_dir() and _written(out) > share * total):
            time.sleep(0.001)  # polls the output: the kill lands at that share
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        rerun = subprocess.run(_restore_argv(cold, out), capture_output=True, text=True,
                               timeout=120)  # fmt: skip
        if rerun.returncode != 0:  # it had finished before the kill: nothing to resume
            assert "already holds a complete restore" in rerun.stderr, (share, rerun.stderr)
        resumed += rerun.stdout.startswith("resumed and restored")
        assert _tree(out) == _tree(whole), f"kill at {share:.0%}"
        check = subprocess.run(
            _cli("restore", "--cold", str(cold), "--cluster", CLUSTER, "--broker", BROKER,
                 "--out", str(out), "--check"),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert check.returncode == 0 and check.stdout.startswith("CLEAN"), check.stdout
    assert resumed >= 3  # the kills did land inside runs, and the reruns resumed them


def _written(root: Path) -> int:
    """Bytes the restore has written so far (allocated: its files are preallocated)."""
    total = 0
    for p in root.rglob("*"):
        try:
            total += p.stat().st_blocks * 512
        except FileNotFoundError:
            continue  # a temp file renamed meanwhile
    return total


# -- accepted loss --------------------------------------------------------------------------


async def _accept_a_loss(cold: Path, queue: QueuePath, nth: int) -> tuple[int, int]:
    """Make the ``nth`` segment of ``queue`` a loss accepted before tiering: its objects
    are gone and a loss record (as ``resume --accept-loss`` writes) covers its range."""
    async with open_backend(str(cold)) as backend:
        listed = [i.key for i in await backend.list(queue.root + "/MANIFEST/")]
        keys = sorted(listed, key=lambda k: parse_object_key(k).base_offset)  # names hash
        manifest = read_manifest(await backend.read(keys[nth]), keys[nth])
        for key in (manifest.key, manifest.commit_log_key, manifest.consume_queue_key):
            await backend.delete(key)
        record = LossRecord(LOSS_FORMAT_VERSION, CLUSTER, BROKER, queue.topic, queue.queue_id,
                            manifest.start_offset, manifest.end_offset, 1, "w@h", 1)  # fmt: skip
        await write_loss_record(backend, record)
    return manifest.start_offset, manifest.end_offset


def test_an_accepted_loss_restores_the_queue_after_it(
    tiered: tuple[Path, Path], tmp_path: Path
) -> None:
    """Old code refused the whole broker: "has no committed segment for offsets"."""
    store, source = tiered
    cold = tmp_path / "cold"
    shutil.copytree(source, cold)
    queue = QueuePath(CLUSTER, BROKER, "SynthTopic0", 1)
    lost = asyncio.run(_accept_a_loss(cold, queue, 3))
    out = tmp_path / "out"
    done = subprocess.run(_restore_argv(cold, out), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    hot, restored = HotStore(store), HotStore(out)
    first = hot.queue_range("SynthTopic0", 1).min
    line = (
        f"SynthTopic0/1: restored from offset {lost[1]}, after its accepted loss of offsets "
        f"[{lost[0]}, {lost[1]}) (resume --accept-loss); {lost[0] - first} tiered messages "
        "before it left out"
    )
    assert done.stdout.splitlines()[0] == line
    assert sum(1 for ln in done.stdout.splitlines() if "accepted loss" in ln) == 1
    for q in hot.queues():
        rng, got = hot.queue_range(q.topic, q.queue_id), restored.queue_range(q.topic, q.queue_id)
        expect_min = lost[1] if (q.topic, q.queue_id) == ("SynthTopic0", 1) else rng.min
        assert (got.min, got.max) == (expect_min, rng.max), q

    async def check() -> str:
        async with open_backend(str(cold)) as backend:
            return (await check_restored(backend, out)).describe()

    verdict = asyncio.run(check()).splitlines()
    assert verdict[0] == line and verdict[1].startswith("CLEAN")


def test_a_hole_no_loss_explains_still_refuses(tiered: tuple[Path, Path], tmp_path: Path) -> None:
    _, source = tiered
    cold = tmp_path / "cold"
    shutil.copytree(source, cold)
    queue = QueuePath(CLUSTER, BROKER, "SynthTopic1", 0)
    asyncio.run(_accept_a_loss(cold, queue, 2))
    # A second hole after the loss, explained by nothing (its record removed): refused.
    start, end = asyncio.run(_accept_a_loss(cold, queue, 4))
    (cold / loss_key(queue, start)).unlink()
    done = subprocess.run(_restore_argv(cold, tmp_path / "o"), capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 1
    assert f"SynthTopic1/0 has no committed segment for offsets [{start}, {end})" in done.stderr


def test_a_queue_with_nothing_tiered_after_its_loss_is_left_out_and_named(
    tiered: tuple[Path, Path], tmp_path: Path
) -> None:
    store, source = tiered
    cold = tmp_path / "cold"
    shutil.copytree(source, cold)
    queue = QueuePath(CLUSTER, BROKER, "SynthTopic1", 1)
    start, end = asyncio.run(_accept_a_loss(cold, queue, -1))
    out = tmp_path / "out"
    done = subprocess.run(_restore_argv(cold, out), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    first = HotStore(store).queue_range("SynthTopic1", 1).min
    assert done.stdout.splitlines()[0] == (
        f"SynthTopic1/1: not restored (nothing tiered after offset {end}), after its accepted "
        f"loss of offsets [{start}, {end}) (resume --accept-loss); {start - first} tiered "
        "messages before it left out"
    )
    assert ("SynthTopic1", 1) not in {(q.topic, q.queue_id) for q in HotStore(out).queues()}
