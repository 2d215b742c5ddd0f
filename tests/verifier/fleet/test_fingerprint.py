"""``tieredstore fingerprint`` and the block digest (tieredstore/cold/fingerprint.py; the
taking: verifier/fleet/take.py): no Spark."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.coldimage import tier, write_local
from tieredstore.cli.main import main as cli_main
from tieredstore.clock import VirtualClock
from tieredstore.cold.fingerprint import (
    LEAF_DIGEST_SIZE,
    Block,
    BlockHasher,
    Fingerprint,
    QueuePrint,
    block_ranges,
    block_streams,
    read_fingerprint,
)
from tieredstore.cold.layout import (
    fingerprint_prefix,
    parse_fingerprint_name,
    parse_fingerprint_stamp,
    tiering_key,
)
from tieredstore.cold.provenance import read_tiering_record
from tieredstore.errors import CorruptProvenanceError
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.formats.record import PHYSICAL_OFFSET_SLICE
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize
from tieredstore.ratelimit import TokenBucket
from tieredstore.verifier.fleet import take as taking
from tieredstore.verifier.fleet.take import DEFAULT_WINDOW_BYTES, take_fingerprint

SPEC = SynthSpec(
    topics=1, queues=2, messages=600, body_min=100, body_max=300,
    commitlog_file_size=128 << 10, cq_file_size=100 * CQ_UNIT_SIZE, seed=7,
)  # fmt: skip


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("fingerprint")
    synthesize(base / "hot", SPEC)
    write_local(tier(base / "hot", segment_messages=100), base / "cold")
    return base / "hot", base / "cold"


#: Read windows: the default (the test store in one), one byte (one record of each queue
#: at a time: every block fed record by record), a few records.
WINDOWS = pytest.mark.parametrize("window", [DEFAULT_WINDOW_BYTES, 1, 700])


def _assert_block_digests(store: HotStore, q: QueuePrint) -> None:
    """Each block of ``q`` is the digest of its own records, as the store holds them."""
    for b in q.blocks:
        units = store.read_units(q.topic, q.queue_id, b.start, b.end)
        hasher = BlockHasher()
        hasher.update(units, b"".join(store.read_records_bytes(units["commitlog_offset"],
                                                              units["size"])))  # fmt: skip
        assert hasher.hexdigest() == b.digest, (q.topic, q.queue_id, b.start)


def _records(hot: Path, start: int, end: int, queue_id: int = 0) -> tuple[np.ndarray, bytes]:
    store = HotStore(hot)
    q = store.queues()[queue_id]
    units = store.read_units(q.topic, q.queue_id, start, end)
    data = b"".join(store.read_records_bytes(units["commitlog_offset"], units["size"]))
    return units, data


def test_the_block_digest_ignores_the_physical_offset_only(stores: tuple[Path, Path]) -> None:
    units, data = _records(stores[0], 0, 10)
    whole = BlockHasher()
    whole.update(units, data)
    first = int(units["size"][0])
    pieces = BlockHasher()  # fed in two runs, as a block that spans two cold segments
    pieces.update(units[:1], data[:first])
    pieces.update(units[1:], data[first:])
    assert pieces.hexdigest() == whole.hexdigest()
    moved = bytearray(data)
    moved[PHYSICAL_OFFSET_SLICE.start + first] ^= 0xFF  # the second record's physicalOffset
    other = BlockHasher()
    other.update(units, bytes(moved))
    assert other.hexdigest() == whole.hexdigest()
    moved[first + PHYSICAL_OFFSET_SLICE.stop] ^= 0xFF  # the byte after it
    changed = BlockHasher()
    changed.update(units, bytes(moved))
    assert changed.hexdigest() != whole.hexdigest()


@WINDOWS
async def test_each_block_digest_is_its_own_records_hashed_one_after_another(
    stores: tuple[Path, Path], window: int
) -> None:
    # The digests are taken on a worker thread while the next records are read, all
    # queues together window by window: each must still be the digest of its own block,
    # as a BlockHasher fed in order gives it.
    store = HotStore(stores[0])
    fp = await take_fingerprint(store, cluster=CLUSTER, broker=BROKER, clock=VirtualClock(),
                                block_offsets=37, window_bytes=window)  # fmt: skip
    assert sum(len(q.blocks) for q in fp.queues) > 10
    for q in fp.queues:
        _assert_block_digests(store, q)


def test_the_command_writes_one_fingerprint_per_run_under_the_broker_prefix(
    stores: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hot, cold = stores
    argv = ["fingerprint", "--store", str(hot), "--cold", str(cold), "--cluster", CLUSTER,
            "--broker", BROKER, "--block-offsets", "100", "--max-bytes-per-second=0"]  # fmt: skip
    assert cli_main(argv) == 0
    assert "fingerprint " in capsys.readouterr().out
    folder = cold / fingerprint_prefix(CLUSTER, BROKER)
    (path,) = folder.iterdir()
    assert parse_fingerprint_stamp(path.name) is not None
    fp = read_fingerprint(path.read_bytes(), path.name)
    store = HotStore(hot)
    assert {(q.topic, q.queue_id, q.hot_min, q.hot_max) for q in fp.queues} == {
        (q.topic, q.queue_id, r.min, r.max)
        for q in store.queues()
        for r in [store.queue_range(q.topic, q.queue_id)]
    }
    for q in fp.queues:  # fixed blocks: [k * 100, (k + 1) * 100) clipped to the hot range
        assert [(b.start, b.end) for b in q.blocks] == [
            (s, min(s + 100, q.hot_max)) for s in range(q.hot_min, q.hot_max, 100)
        ]
    assert len(path.read_bytes()) < fp.hot_bytes / 100  # grows with blocks, not bytes
    key = tiering_key(CLUSTER, BROKER)
    record = read_tiering_record((cold / key).read_bytes(), key)
    for q in fp.queues:  # stored_from at each of the tiering record's times
        assert [t for t, _ in q.stored_from] == sorted({e.since_ms for e in record.history})
    path.unlink()  # the next test of this module writes its own


def _store_times(hot: Path) -> list[int]:
    """Every store time of the first hot queue, in offset order (the hot store's reads)."""
    store = HotStore(hot)
    q = store.queues()[0]
    rng = store.queue_range(q.topic, q.queue_id)
    units = store.read_units(q.topic, q.queue_id, rng.min, rng.max)
    return [store.read_store_timestamp(int(o)) for o in units["commitlog_offset"]]


@WINDOWS
async def test_stored_from_is_the_first_hot_offset_stored_at_each_time(
    stores: tuple[Path, Path], window: int
) -> None:
    times = _store_times(stores[0])
    # before every message, inside a block, on a block edge, at the last, after all
    since = (times[0] - 10**6, times[137], times[200], times[-1], times[-1] + 10**6)
    store = HotStore(stores[0])
    fp = await take_fingerprint(store, cluster=CLUSTER, broker=BROKER, clock=VirtualClock(),
                                block_offsets=100, since_ms=since,
                                window_bytes=window)  # fmt: skip
    for q in fp.queues:
        expected = [(t, store.offset_by_time(q.topic, q.queue_id, t)) for t in sorted(since)]
        assert list(q.stored_from) == expected
        assert expected[0][1] == q.hot_min and expected[-1][1] == q.hot_max
    assert read_fingerprint(fp.to_bytes(), "k") == fp


@pytest.mark.parametrize(("group", "chunk"), [(1 << 20, 256), (1, 256), (700, 5), (1 << 20, 1)])
@pytest.mark.parametrize("window", [1, 300, 4096, 50_000])
async def test_a_fingerprint_read_window_by_window_is_the_one_read_at_once(
    stores: tuple[Path, Path],
    window: int,
    group: int,
    chunk: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Windows smaller than a record, than a block, than a commit-log file: the blocks fed
    # in runs cut anywhere, leaves and stored_from times found across the cuts; each
    # window read in groups of one run, of a few, or whole; each block's units read in
    # chunks of 1, 5 or whole.
    monkeypatch.setattr(taking, "_GROUP_BYTES", group)
    monkeypatch.setattr(taking, "_UNITS_HELD", 0)
    monkeypatch.setattr(taking, "_MIN_CHUNK", chunk)
    times = _store_times(stores[0])
    since = (times[0] - 1, times[137], times[200], times[-1] + 1)
    store = HotStore(stores[0])

    async def take(window_bytes: int) -> bytes:
        fp = await take_fingerprint(store, cluster=CLUSTER, broker=BROKER, clock=VirtualClock(),
                                    block_offsets=37, leaf_offsets=10, since_ms=since,
                                    window_bytes=window_bytes)  # fmt: skip
        return fp.to_bytes()

    assert await take(window) == await take(1 << 40)


async def _take_deleting(store: HotStore, delete: Callable[[], None], **kw: Any) -> Fingerprint:
    """A fingerprint of ``store`` paced at 100 bytes a second on a virtual clock, with
    ``delete`` (the broker's retention) called while it is parked before its first
    record."""
    clock = VirtualClock()
    task = asyncio.create_task(
        take_fingerprint(store, cluster=CLUSTER, broker=BROKER, clock=clock,
                         bucket=TokenBucket(clock, 100), **kw)
    )  # fmt: skip
    await asyncio.wait_for(clock.parked_or_done(task), 30)
    assert not task.done()
    delete()
    while not task.done():
        await clock.advance(3600)
        await asyncio.wait_for(clock.parked_or_done(task), 30)
    return task.result()


@pytest.mark.parametrize("window", [4096, DEFAULT_WINDOW_BYTES])
@pytest.mark.parametrize("block", [37, 23])
async def test_records_the_broker_deletes_while_paced_move_the_hot_min_past_their_blocks(
    stores: tuple[Path, Path], tmp_path: Path, window: int, block: int
) -> None:
    # The run parks on its pace before it reads a record; meanwhile retention deletes the
    # oldest commit-log file. Each queue's blocks with a record in it are dropped (hot min
    # past them); the others are read, each its own records' digest.
    hot = tmp_path / "hot"
    shutil.copytree(stores[0], hot)
    store = HotStore(hot)
    oldest = min((hot / "commitlog").iterdir())
    last_gone = {}  # per queue, the offset of its last record in the oldest file
    for key in store.queues():
        rng = store.queue_range(key.topic, key.queue_id)
        units = store.read_units(key.topic, key.queue_id, rng.min, rng.max)
        in_oldest = np.flatnonzero(units["commitlog_offset"] < oldest.stat().st_size)
        last_gone[key.queue_id] = rng.min + int(in_oldest[-1])
    fp = await _take_deleting(store, oldest.unlink, block_offsets=block, window_bytes=window)
    for q in fp.queues:
        assert q.hot_min == (last_gone[q.queue_id] // block + 1) * block > 0
        assert [b.start for b in q.blocks] == list(range(q.hot_min, q.hot_max, block))
        _assert_block_digests(store, q)


async def test_units_the_broker_deletes_while_paced_move_the_hot_min_past_their_blocks(
    stores: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each open block holds its units 5 at a time; retention deletes each queue's oldest
    # consume-queue file (offsets 0-99) while the run is parked: the first block, open,
    # cannot read its next units, the next two cannot be opened. All three are dropped.
    monkeypatch.setattr(taking, "_UNITS_HELD", 0)
    monkeypatch.setattr(taking, "_MIN_CHUNK", 5)
    hot = tmp_path / "hot"
    shutil.copytree(stores[0], hot)
    store = HotStore(hot)

    def retention() -> None:
        for queue in (hot / "consumequeue").glob("*/*"):
            min(queue.iterdir()).unlink()

    for q in (await _take_deleting(store, retention, block_offsets=37)).queues:
        assert q.hot_min == 111
        assert [b.start for b in q.blocks] == list(range(111, q.hot_max, 37))
        _assert_block_digests(store, q)


async def test_a_queue_whose_records_are_deleted_drops_its_blocks_only(tmp_path: Path) -> None:
    # Queue 0's first 300 records fill the oldest commit-log file; queue 1's all come
    # after. Their first blocks are read in one gather, which the deleted file fails: each
    # queue's run is then read alone, and only queue 0 loses blocks.
    hot = tmp_path / "hot"
    spec = replace(SPEC, topics=1, queues=2, messages=0, commitlog_file_size=64 << 10)
    synthesize(hot, spec)
    synthetic = SyntheticStore.open(hot)
    topic = f"{spec.topic_prefix}0"
    synthetic.append(300, queues=[(topic, 0)] * 300)
    synthetic.append(200, queues=[(topic, 1), (topic, 0)] * 100)
    store = HotStore(hot)
    oldest = min((hot / "commitlog").iterdir())
    units = store.read_units(topic, 0, 0, 400)
    last_gone = int(np.flatnonzero(units["commitlog_offset"] < oldest.stat().st_size)[-1])
    assert 37 < last_gone < 300
    first, second = (await _take_deleting(store, oldest.unlink, block_offsets=37)).queues
    assert (first.hot_min, first.hot_max) == ((last_gone // 37 + 1) * 37, 400)
    assert (second.hot_min, second.hot_max) == (0, 100)
    for q in (first, second):
        assert [b.start for b in q.blocks] == list(range(q.hot_min, q.hot_max, 37))
        _assert_block_digests(store, q)


async def test_a_window_of_no_bytes_is_refused(stores: tuple[Path, Path]) -> None:
    with pytest.raises(ValueError, match="window_bytes"):
        await take_fingerprint(HotStore(stores[0]), cluster=CLUSTER, broker=BROKER,
                               clock=VirtualClock(), window_bytes=0)  # fmt: skip


def test_a_fingerprint_of_another_format_is_refused_naming_it() -> None:
    doc = {"format_version": 1, "cluster": CLUSTER, "broker": BROKER, "taken_ms": 1,
           "block_offsets": 100, "hot_bytes": 0, "queues": []}  # fmt: skip
    with pytest.raises(CorruptProvenanceError, match="fingerprint format 1") as exc:
        read_fingerprint(json.dumps(doc).encode(), "fp/1.json")
    assert "fp/1.json" in str(exc.value)


def test_a_broker_without_a_tiering_record_is_refused_and_nothing_written(
    stores: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hot, cold = stores
    code = cli_main(["fingerprint", "--store", str(hot), "--cold", str(cold),
                     "--cluster", CLUSTER, "--broker", "nobody"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 3 and len(err.splitlines()) == 1 and "nobody" in err
    assert not (cold / fingerprint_prefix(CLUSTER, "nobody")).exists()


async def test_the_reads_are_paced_by_the_rate_limit(stores: tuple[Path, Path]) -> None:
    clock = VirtualClock()
    rate = 20_000
    bucket = TokenBucket(clock, rate)
    hot = HotStore(stores[0])
    task = asyncio.create_task(
        take_fingerprint(hot, cluster=CLUSTER, broker=BROKER, clock=clock, bucket=bucket,
                         block_offsets=50)
    )  # fmt: skip
    waited = 0
    while True:
        await asyncio.wait_for(clock.parked_or_done(task), 30)
        if task.done():
            break
        await clock.advance(1)
        waited += 1
    fp = task.result()
    assert fp.taken_ms == 1_700_000_000_000  # the reference time: when it started
    # At most one second's burst, then `rate` bytes per second of virtual time.
    assert waited >= (fp.hot_bytes - rate) // rate
    assert waited <= fp.hot_bytes // rate + 1
    doc = json.loads(fp.to_bytes())
    assert doc["hot_bytes"] == fp.hot_bytes


@WINDOWS
async def test_each_leaf_digest_is_its_own_records_hashed(
    stores: tuple[Path, Path], window: int
) -> None:
    # Leaves of 10 inside blocks of 37: a leaf ends at a block's end as well as every 10.
    store = HotStore(stores[0])
    fp = await take_fingerprint(store, cluster=CLUSTER, broker=BROKER, clock=VirtualClock(),
                                block_offsets=37, leaf_offsets=10,
                                window_bytes=window)  # fmt: skip
    for q in fp.queues:
        leaves = q.leaves()
        assert [(x.start, x.end) for x in leaves][:5] == [(0, 10), (10, 20), (20, 30), (30, 37),
                                                          (37, 40)]  # fmt: skip
        assert leaves[-1].end == q.hot_max
        for leaf in leaves:
            units = store.read_units(q.topic, q.queue_id, leaf.start, leaf.end)
            hasher = leaf.hasher()
            hasher.update(units, b"".join(store.read_records_bytes(units["commitlog_offset"],
                                                                  units["size"])))  # fmt: skip
            assert hasher.hexdigest() == leaf.digest and len(leaf.digest) == 16
    assert read_fingerprint(fp.to_bytes(), "k") == fp


async def test_a_format_2_fingerprint_still_reads_its_blocks_as_its_leaves(
    stores: tuple[Path, Path],
) -> None:
    store = HotStore(stores[0])
    fp = await take_fingerprint(store, cluster=CLUSTER, broker=BROKER, clock=VirtualClock(),
                                block_offsets=100)  # fmt: skip
    doc = json.loads(fp.to_bytes())
    doc["format_version"] = 2
    del doc["sequence"], doc["leaf_offsets"]
    for q in doc["queues"]:
        q["blocks"] = [b[:5] for b in q["blocks"]]
    old = read_fingerprint(json.dumps(doc).encode(), "old.json")
    assert (old.sequence, old.leaf_offsets) == (-1, 0)
    for q in old.queues:
        assert [(x.start, x.end, x.digest) for x in q.leaves()] == [
            (b.start, b.end, b.digest) for b in q.blocks
        ]


@given(st.integers(0, 5000), st.integers(1, 700), st.integers(1, 300), st.booleans())
def test_edge_leaves_are_the_first_and_last_of_the_leaf_list(
    start: int, length: int, leaf_offsets: int, short: bool
) -> None:
    """What :func:`carries` reads: the block's first and last leaves, found without
    listing every leaf; leaf digests of the wrong length are refused by both."""
    end = start + length
    count = len(list(block_ranges(start, end, leaf_offsets)))
    short = short and count > 1  # no leaf digests at all: the block is its one leaf
    leaves = bytes(range(256)) * (count * LEAF_DIGEST_SIZE // 256 + 1)
    block = Block(start, end, "ab" * 16, 1, 2, leaves[: (count - short) * LEAF_DIGEST_SIZE])
    if short:
        for method in (block.leaf_list, block.edge_leaves):
            with pytest.raises(ValueError, match="leaf digests"):
                method(leaf_offsets)
        return
    listed = block.leaf_list(leaf_offsets)
    assert [(x.start, x.end) for x in listed] == list(block_ranges(start, end, leaf_offsets))
    assert [x.digest for x in listed] == [
        leaves[i * LEAF_DIGEST_SIZE : (i + 1) * LEAF_DIGEST_SIZE].hex() for i in range(count)
    ]
    assert block.edge_leaves(leaf_offsets) == (listed if count == 1 else [listed[0], listed[-1]])


def test_leaf_digests_that_do_not_fit_their_block_are_refused() -> None:
    doc = {"format_version": 3, "cluster": CLUSTER, "broker": BROKER, "sequence": 0,
           "taken_ms": 1, "block_offsets": 100, "leaf_offsets": 10, "hot_bytes": 0,
           "queues": [{"topic": "t", "queue_id": 0, "hot_min": 0, "hot_max": 30,
                       "blocks": [[0, 30, "00", 1, 2, "AAAAAAAAAAA="]],
                       "stored_from": []}]}  # fmt: skip
    with pytest.raises(CorruptProvenanceError, match="leaf digests") as exc:
        read_fingerprint(json.dumps(doc).encode(), "fp/x.json")
    assert "fp/x.json" in str(exc.value)


def test_the_newest_fingerprint_is_the_highest_sequence_whatever_its_host_time() -> None:
    ahead = parse_fingerprint_name("s0000000000-1800000000000.json")
    later = parse_fingerprint_name("s0000000001-1700000000000.json")
    old = parse_fingerprint_name("1900000000000.json")  # format 2: no sequence
    assert ahead is not None and later is not None and old is not None
    assert max(ahead, later, old) == later and min(ahead, later, old) == old
    assert later.name == "s0000000001-1700000000000.json" and old.name == "1900000000000.json"
    for bad in ("s1-1700000000000.json", "s0000000001-17.json", "x.json", "s0000000001.json"):
        assert parse_fingerprint_name(bad) is None, bad


def test_each_run_of_the_command_takes_the_next_sequence(
    stores: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hot, cold = stores
    folder = cold / fingerprint_prefix(CLUSTER, BROKER)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "1900000000000.json").write_bytes(b"{}")  # a format-2 name sorts below
    argv = ["fingerprint", "--store", str(hot), "--cold", str(cold), "--cluster", CLUSTER,
            "--broker", BROKER, "--max-bytes-per-second=0"]  # fmt: skip
    assert cli_main(argv) == 0 and cli_main(argv) == 0
    capsys.readouterr()
    names = sorted(n for p in folder.iterdir() if (n := parse_fingerprint_name(p.name)))
    assert [n.sequence for n in names] == [-1, 0, 1]
    for n in names[1:]:
        assert read_fingerprint((folder / n.name).read_bytes(), n.name).sequence == n.sequence
    for p in folder.iterdir():
        p.unlink()


def _blake2b_leaf(units: np.ndarray, records: bytes) -> bytes:
    """A format-3 leaf digest written out with hashlib: blake2b-64 of the two streams'."""
    head, body = block_streams(units, records)
    inner = (
        hashlib.blake2b(head, digest_size=8).digest()
        + hashlib.blake2b(body, digest_size=8).digest()
    )
    return hashlib.blake2b(inner, digest_size=8).digest()


async def test_a_format_3_fingerprint_is_checked_with_blake2b(stores: tuple[Path, Path]) -> None:
    store = HotStore(stores[0])
    fp = await take_fingerprint(store, cluster=CLUSTER, broker=BROKER, clock=VirtualClock(),
                                block_offsets=100, leaf_offsets=10)  # fmt: skip
    doc = json.loads(fp.to_bytes())
    doc["format_version"] = 3
    for q in doc["queues"]:
        for b in q["blocks"]:
            leaves = b""
            for start in range(b[0], b[1], 10):
                units, data = _records(stores[0], start, min(start + 10, b[1]), q["queue_id"])
                leaves += _blake2b_leaf(units, data)
            b[5] = base64.b64encode(leaves).decode()
    old = read_fingerprint(json.dumps(doc).encode(), "old.json")
    assert old.format_version == 3
    for q in old.queues:
        taken = fp.queue(q.topic, q.queue_id)
        assert taken is not None
        for leaf, new in zip(q.leaves(), taken.leaves(), strict=True):
            units, data = _records(stores[0], leaf.start, leaf.end, q.queue_id)
            hasher = leaf.hasher()
            hasher.update(units, data)
            assert hasher.hexdigest() == leaf.digest != new.digest  # blake2b, not XXH3
