"""synth store -> sidecar -> cold -> restore -> a store equal to the original, message for
message (every field but physicalOffset); subsets, resume, refusals, damaged cold."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.broker.key_index import lookup
from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tieredstore.backends import open_backend
from tieredstore.cli.main import main
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.cold.layout import QueuePath
from tieredstore.cold.manifest import FenceMarker
from tieredstore.errors import (
    ColdDataError,
    DigestMismatchError,
    StoreError,
    StoreInUseError,
)
from tieredstore.formats import fastjson_dialect
from tieredstore.formats.record import PHYSICAL_OFFSET_SLICE, decode_record
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.restore.check import check_restored
from tieredstore.restore.index import IndexGeometry
from tieredstore.restore.journal import RestoreParams
from tieredstore.restore.restorer import RestoreProgress, Restorer

SPEC = SynthSpec(
    topics=2,
    queues=2,
    messages=2400,
    body_min=10,
    body_max=6000,  # bodies over 4 KiB are compressed, as the Java client does
    commitlog_file_size=256 << 10,
    cq_file_size=50 * 20,
    long_topic=True,
    queue_start=70,  # every queue starts above 0: filler units in its first CQ file
    interval_ms=10,
    seed=18,
)
CL_FILE = 128 << 10
CQ_FILE = 30 * 20


def _params(cold: Path, **kw: object) -> RestoreParams:
    values: dict[str, object] = {
        "cold_url": str(cold),
        "cluster": CLUSTER,
        "broker": BROKER,
        "topics": (),
        "since": None,
        "until": None,
        "commitlog_file_size": CL_FILE,
        "cq_file_size": CQ_FILE,
        "index_hash_slots": 101,
        "index_max_entries": 500,
        "write_index": True,
        "restore_config": True,
        "config_at": None,
    }
    values.update(kw)
    return RestoreParams(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(hot store, POSIX cold store): the store tiered in small segments."""
    root = tmp_path_factory.mktemp("restore-src")
    store, cold = root / "store", root / "cold"
    synthesize(store, SPEC)
    offsets = {"offsetTable": {"SynthTopic0@g1": {0: 10, 1: 5000}, "Gone@g2": {0: 9}}}
    (store / "config" / "consumerOffset.json").write_bytes(fastjson_dialect.dumps(offsets))

    async def tier() -> None:
        settings = settings_for(store, str(cold), root / "state", config_backup__enabled=True)
        async with open_runtime(settings) as rt:
            await rt.dispatcher.start(wait_for_lease=False)
            assert not (await rt.dispatcher.catch_up()).errors

    asyncio.run(tier())
    return store, cold


def _restore(
    cold: Path,
    out: Path,
    params: RestoreParams | None = None,
    on_progress: Callable[[RestoreProgress], None] | None = None,
) -> None:
    async def go() -> None:
        async with open_backend(str(cold)) as backend:
            await Restorer(
                backend,
                params or _params(cold),
                out,
                batch_bytes=20_000,
                commit_bytes=50_000,
                on_progress=on_progress,
            ).run()

    asyncio.run(go())


def _check(cold: Path, out: Path) -> str:
    async def go() -> str:
        async with open_backend(str(cold)) as backend:
            return (await check_restored(backend, out, batch_bytes=30_000)).describe()

    return asyncio.run(go())


def _assert_same_messages(
    hot: HotStore, restored: HotStore, queues: dict[tuple[str, int], tuple[int, int]]
) -> None:
    s = PHYSICAL_OFFSET_SLICE
    assert {(q.topic, q.queue_id) for q in restored.queues()} == set(queues)
    for (topic, qid), (lo, hi) in queues.items():
        rng = restored.queue_range(topic, qid)
        assert (rng.min, rng.max) == (lo, hi), (topic, qid)
        a, b = hot.read_units(topic, qid, lo, hi), restored.read_units(topic, qid, lo, hi)
        assert (a["size"] == b["size"]).all() and (a["tags_code"] == b["tags_code"]).all()
        old = hot.read_records_bytes(a["commitlog_offset"], a["size"])
        new = restored.read_records_bytes(b["commitlog_offset"], b["size"])
        for x, y, at in zip(old, new, b["commitlog_offset"].tolist(), strict=True):
            assert x[: s.start] == y[: s.start] and x[s.stop :] == y[s.stop :]
            assert decode_record(y).physical_offset == at


@pytest.mark.slow
def test_restored_store_equals_the_original(tiered: tuple[Path, Path], tmp_path: Path) -> None:
    store, cold = tiered
    out = tmp_path / "out"
    _restore(cold, out)
    hot, restored = HotStore(store), HotStore(out)
    queues = {(q.topic, q.queue_id): hot.queue_range(q.topic, q.queue_id) for q in hot.queues()}
    _assert_same_messages(hot, restored, {q: (r.min, r.max) for q, r in queues.items()})
    assert all(r.min == SPEC.queue_start for r in queues.values())
    # Files at the broker's sizes; the commitlog starts one file in (see commitlog.py).
    names = sorted(p.name for p in (out / "commitlog").iterdir())
    assert names[0] == f"{CL_FILE:020d}" and len(names) > 3
    assert all((out / "commitlog" / n).stat().st_size == CL_FILE for n in names)
    for q in restored.queues():
        files = restored.cq_files(q.topic, q.queue_id).files
        assert files[0].base == SPEC.queue_start * 20 // CQ_FILE * CQ_FILE
        assert {f.size for f in files} == {CQ_FILE}
    checkpoint = restored.checkpoint()
    newest = max(
        hot.read_store_timestamp(int(hot.read_units(t, q, r.max - 1, r.max)["commitlog_offset"][0]))
        for (t, q), r in queues.items()
    )
    assert checkpoint.physic_msg_timestamp == newest == checkpoint.index_msg_timestamp
    assert checkpoint.confirm_phy_offset > CL_FILE
    assert len(list((out / "index").iterdir())) > 1
    assert _check(cold, out).startswith("CLEAN: 2,400 messages of 4 queues")


@pytest.mark.slow
def test_config_is_restored_with_offsets_clamped(tiered: tuple[Path, Path], tmp_path: Path) -> None:
    store, cold = tiered
    out = tmp_path / "out"
    _restore(cold, out)
    topics = (out / "config" / "topics.json").read_bytes()
    assert topics == (store / "config" / "topics.json").read_bytes()  # byte for byte
    offsets = fastjson_dialect.loads((out / "config" / "consumerOffset.json").read_bytes())
    hot = HotStore(store)
    r0, r1 = (hot.queue_range("SynthTopic0", q) for q in (0, 1))
    # 10 is below queue 0's first restored offset (70); 5000 beyond queue 1's end;
    # "Gone" has no restored queue: [0, 0].
    assert offsets["offsetTable"] == {
        "SynthTopic0@g1": {0: r0.min, 1: r1.max},
        "Gone@g2": {0: 0},
    }


def test_a_subset_one_topic_one_window(tiered: tuple[Path, Path], tmp_path: Path) -> None:
    store, cold = tiered
    hot = HotStore(store)
    since, until = SPEC.start_time + 6_000, SPEC.start_time + 15_000
    out = tmp_path / "out"
    _restore(cold, out, _params(cold, topics=("SynthTopic0",), since=since, until=until))
    expect = {}
    for qid in range(SPEC.queues):
        lo = hot.offset_by_time("SynthTopic0", qid, since)
        hi = hot.offset_by_time("SynthTopic0", qid, until + 1)
        expect[("SynthTopic0", qid)] = (lo, hi)
    assert all(lo > SPEC.queue_start and hi > lo for lo, hi in expect.values())
    _assert_same_messages(hot, HotStore(out), expect)
    assert _check(cold, out).startswith("CLEAN")


@pytest.mark.slow
def test_an_interrupted_restore_resumes_to_the_same_bytes(
    tiered: tuple[Path, Path], tmp_path: Path
) -> None:
    _, cold = tiered
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    _restore(cold, whole)

    def interrupt(p: RestoreProgress) -> None:
        if p.segments == 7:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _restore(cold, broken, on_progress=interrupt)
    _restore(cold, broken)  # same parameters: resumes
    for sub in ("commitlog", "consumequeue"):
        a = {p.relative_to(whole): p.read_bytes() for p in (whole / sub).rglob("*") if p.is_file()}
        b = {
            p.relative_to(broken): p.read_bytes() for p in (broken / sub).rglob("*") if p.is_file()
        }
        assert a == b, sub
    assert _check(cold, broken).startswith("CLEAN")
    # The index, rebuilt from the commitlog on resume, finds what the whole run's finds.
    geo = IndexGeometry(101, 500)
    for i in range(0, SPEC.messages, 97):
        for key in (f"SynthTopic0#key-{i}", f"SynthTopic0#order-{i % 97}"):
            assert sorted(lookup(whole / "index", geo, key)) == sorted(
                lookup(broken / "index", geo, key)
            ), key
    assert lookup(whole / "index", geo, "SynthTopic0#order-5")  # found at all


@pytest.mark.slow
def test_refusals(tiered: tuple[Path, Path], tmp_path: Path) -> None:
    _, cold = tiered
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "something").write_text("x")
    with pytest.raises(StoreError, match="not empty"):
        _restore(cold, busy)
    assert sorted(os.listdir(busy)) == ["something"]  # nothing added, nothing lost
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    (crashed / "abort").write_text("123")
    with pytest.raises(StoreInUseError, match="abort file"):
        _restore(cold, crashed)
    done = tmp_path / "done"
    _restore(cold, done)
    with pytest.raises(StoreError, match="already holds a complete restore"):
        _restore(cold, done)


def test_a_running_brokers_lock_is_refused(tiered: tuple[Path, Path], tmp_path: Path) -> None:
    _, cold = tiered
    running = tmp_path / "running"
    running.mkdir()
    (running / "lock").write_bytes(b"lock")
    # Another process holds the lock, as a broker does, until its stdin closes (POSIX
    # locks are per process: this one could always take it).
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
            "fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0); print('locked', flush=True); sys.stdin.read()",
            str(running / "lock"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreInUseError, match="lock is held"):
            _restore(cold, running)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        assert holder.stdout is not None
        holder.stdout.close()


def test_a_resume_with_other_parameters_is_refused(
    tiered: tuple[Path, Path], tmp_path: Path
) -> None:
    _, cold = tiered
    out = tmp_path / "out"

    def interrupt(p: RestoreProgress) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _restore(cold, out, on_progress=interrupt)
    with pytest.raises(StoreError, match=r"other parameters \(topics"):
        _restore(cold, out, _params(cold, topics=("SynthTopic0",)))


@pytest.mark.slow
def test_damaged_cold_data_stops_the_restore(tiered: tuple[Path, Path], tmp_path: Path) -> None:
    _, cold = tiered
    copy = tmp_path / "cold"
    import shutil

    shutil.copytree(cold, copy)
    victim = next(p for p in sorted(copy.rglob("*")) if p.parent.name == "COMMIT_LOG")
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF  # the last byte of the last record's properties: only the digest sees it
    victim.write_bytes(bytes(data))
    with pytest.raises(DigestMismatchError, match="object crc32c is "):
        _restore(copy, tmp_path / "out")


def test_nothing_to_restore_is_an_error(tiered: tuple[Path, Path], tmp_path: Path) -> None:
    _, cold = tiered
    with pytest.raises(ColdDataError, match="nothing to restore"):
        _restore(cold, tmp_path / "out", _params(cold, topics=("NoSuchTopic*",)))


@pytest.mark.slow
def test_cli_restore_and_check(
    tiered: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, cold = tiered
    out = tmp_path / "out"
    common = ["--cold", str(cold), "--cluster", CLUSTER, "--broker", BROKER, "--out", str(out)]
    geometry = [
        "--commitlog-file-size",
        "128K",
        "--consume-queue-file-size",
        "590",
        "--index-hash-slots",
        "101",
        "--index-max-entries",
        "500",
    ]
    assert main(["restore", *common, *geometry, "--progress", "off"]) == 0
    final = capsys.readouterr().out
    assert "restored 2,400 messages of 4 queues" in final
    assert re.search(r" \(\d+\.\d (KiB|MiB) in [\d.]+ m?s\); commitlog", final), final  # human
    assert main(["restore", *common, "--check"]) == 0
    assert capsys.readouterr().out.startswith("CLEAN")
    assert main(["restore", *common, *geometry]) == 1
    assert "already holds a complete restore" in capsys.readouterr().err
    assert main(["restore", *common, "--since", "2024-01-02", "--until", "2024-01-01"]) == 3
    assert "--since 1704153600000 is after --until" in capsys.readouterr().err


@pytest.mark.slow
def test_fence_markers_are_no_segment_to_restore(tiered: tuple[Path, Path], tmp_path: Path) -> None:
    """GC's fence markers (one inside a segment's range, one past the end) are skipped:
    the restore and its check see exactly the committed segments."""
    _, src = tiered
    cold = tmp_path / "cold"
    shutil.copytree(src, cold)
    queue = QueuePath(CLUSTER, BROKER, "SynthTopic0", 0)
    for start in (SPEC.queue_start + 1, 10**6):
        marker = FenceMarker(CLUSTER, BROKER, queue.topic, 0, start, lease_epoch=5,
                             writer_id="gc@h", created_at_ms=1)  # fmt: skip
        (cold / marker.key).write_bytes(marker.to_json())
    out = tmp_path / "out"
    _restore(cold, out)
    assert _check(cold, out).startswith("CLEAN: 2,400 messages of 4 queues")


@pytest.mark.slow
@pytest.mark.parametrize(("seconds_per_segment", "kept"), [(11.0, 7), (0.0, 0)])
def test_a_slow_restore_saves_its_place_every_few_seconds(
    tiered: tuple[Path, Path], tmp_path: Path, seconds_per_segment: float, kept: int
) -> None:
    """Far below ``commit_bytes`` (256 MiB by default), a restore still commits its
    journal every ``commit_seconds`` (10 s): interrupted, it resumes from there, not 0."""
    from tieredstore.restore.journal import Journal

    _, cold = tiered
    out = tmp_path / "out"
    now = [0.0]

    def monotonic() -> float:
        return now[0]

    def interrupt(p: RestoreProgress) -> None:
        now[0] += seconds_per_segment  # the next segment's commit check sees it
        if p.segments == 7:
            raise KeyboardInterrupt

    async def go() -> None:
        async with open_backend(str(cold)) as backend:
            await Restorer(backend, _params(cold), out, batch_bytes=20_000,
                           on_progress=interrupt, monotonic=monotonic).run()  # fmt: skip

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(go())
    journal = Journal.load(out / "tieredstore-restore.json")
    assert journal.segments == kept  # each segment's commit check runs before its progress


def _tier_plain_or_zstd(store: Path, cold: Path, state: Path, **kw: object) -> None:
    async def go() -> None:
        settings = settings_for(store, str(cold), state, tiering__batching=False, **kw)
        async with open_runtime(settings) as rt:
            await rt.dispatcher.start(wait_for_lease=False)
            assert not (await rt.dispatcher.catch_up()).errors

    asyncio.run(go())


def _store_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for sub in ("commitlog", "consumequeue")
        for p in sorted((root / sub).rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow
def test_a_compressed_cold_store_restores_to_the_same_bytes(tmp_path: Path) -> None:
    store = synthesize(tmp_path / "store", SPEC).root
    plain, zstd = tmp_path / "plain", tmp_path / "zstd"
    _tier_plain_or_zstd(store, plain, tmp_path / "state-plain")
    _tier_plain_or_zstd(
        store, zstd, tmp_path / "state-zstd", cold__compression="zstd", cold__frame_size="8K"
    )
    assert any(b'"compression":"zstd"' in p.read_bytes() for p in zstd.rglob("MANIFEST/*.json"))
    _restore(plain, tmp_path / "out-plain", _params(plain, restore_config=False))
    _restore(zstd, tmp_path / "out-zstd", _params(zstd, restore_config=False))
    expected = _store_files(tmp_path / "out-plain")
    assert expected and _store_files(tmp_path / "out-zstd") == expected
    assert _check(zstd, tmp_path / "out-zstd").startswith("CLEAN: 2,400 messages of 4 queues")
