"""``tieredstore fingerprint`` and the block digest (verifier/fingerprint.py): no Spark."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from tieredstore.cli.main import main as cli_main
from tieredstore.clock import VirtualClock
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.formats.record import PHYSICAL_OFFSET_SLICE
from tieredstore.hot_store import HotStore
from tieredstore.layout import fingerprint_prefix, parse_fingerprint_stamp
from tieredstore.ratelimit import TokenBucket
from tieredstore.synth import SynthSpec, synthesize
from tieredstore.testing.coldimage import tier, write_local
from tieredstore.testing.settings import BROKER, CLUSTER
from verifier.fingerprint import BlockHasher, read_fingerprint, take_fingerprint

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


def _records(hot: Path, start: int, end: int) -> tuple[np.ndarray, bytes]:
    store = HotStore(hot)
    q = store.queues()[0]
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
