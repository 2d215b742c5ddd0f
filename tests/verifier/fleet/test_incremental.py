"""Incremental ``tieredstore fingerprint`` (verifier/fleet/carry.py, previous.py, take.py):
what it carries forward is what a full run would find, and it carries nothing the broker
may have rewritten. No Spark; each test builds its own store."""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.coldimage import tier, write_local
from tieredstore.cli.main import main as cli_main
from tieredstore.clock import VirtualClock
from tieredstore.cold.fingerprint import Fingerprint, read_fingerprint
from tieredstore.cold.layout import fingerprint_prefix, parse_fingerprint_name, tiering_key
from tieredstore.cold.provenance import read_tiering_record
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize
from tieredstore.verifier.fleet import take as taking
from tieredstore.verifier.fleet.take import take_carrying, take_fingerprint

T0 = 1_800_000_000_000
SPEC = SynthSpec(
    topics=1, queues=2, messages=1200, body_min=100, body_max=300, start_time=T0,
    interval_ms=1, commitlog_file_size=64 << 10, cq_file_size=100 * CQ_UNIT_SIZE, seed=11,
)  # fmt: skip
BLOCK = 100
LEAF = 10


@pytest.fixture
def stores(tmp_path: Path) -> tuple[Path, Path]:
    """A hot store of two queues of 600 offsets and a cold store tiered from it (for the
    broker's tiering record)."""
    synthesize(tmp_path / "hot", SPEC)
    write_local(tier(tmp_path / "hot", segment_messages=100), tmp_path / "cold")
    return tmp_path / "hot", tmp_path / "cold"


def _run(hot: Path, cold: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    argv = ["fingerprint", "--store", str(hot), "--cold", str(cold), "--cluster", CLUSTER,
            "--broker", BROKER, "--block-offsets", str(BLOCK), "--leaf-offsets", str(LEAF),
            "--max-bytes-per-second=0", *extra]  # fmt: skip
    assert cli_main(argv) == 0
    return capsys.readouterr().out


def _newest(cold: Path) -> Fingerprint:
    folder = cold / fingerprint_prefix(CLUSTER, BROKER)
    path = max(folder.iterdir(), key=lambda p: parse_fingerprint_name(p.name) or p.name)
    return read_fingerprint(path.read_bytes(), path.name)


def _full(hot: Path, cold: Path) -> Fingerprint:
    """A full fingerprint of ``hot`` now, as the command takes it."""
    key = tiering_key(CLUSTER, BROKER)
    record = read_tiering_record((cold / key).read_bytes(), key)
    since = tuple(sorted({e.since_ms for e in record.history}))
    return asyncio.run(
        take_fingerprint(HotStore(hot), cluster=CLUSTER, broker=BROKER, clock=VirtualClock(),
                         block_offsets=BLOCK, leaf_offsets=LEAF, since_ms=since)
    )  # fmt: skip


def _same_but_when(a: Fingerprint, b: Fingerprint) -> None:
    """The stored JSON of ``a`` and ``b``, byte for byte, but their time and sequence."""

    def doc(fp: Fingerprint) -> bytes:
        return replace(fp, taken_ms=0, sequence=0).to_bytes()

    assert doc(a) == doc(b)


def _whole_blocks(fp: Fingerprint, below: int | dict[int, int], block: int = BLOCK) -> int:
    """The blocks of ``fp`` of ``block`` offsets that end at or below ``below`` (per queue
    id, or for all)."""
    return sum(
        1
        for q in fp.queues
        for b in q.blocks
        if b.end - b.start == block
        and b.end <= (below if isinstance(below, int) else below[q.queue_id])
    )


def _kept(hot: Path) -> dict[int, int]:
    store = HotStore(hot)
    return {q.queue_id: store.queue_range(q.topic, q.queue_id).max for q in store.queues()}


def _write_again(hot: Path, *, keep: int, more: int) -> dict[int, int]:
    """The broker after an unclean restart: the first ``keep`` messages of SPEC kept, then
    ``more`` written (later store times, other bytes). Returns each queue's max when cut."""
    shutil.rmtree(hot)
    synthesize(hot, replace(SPEC, messages=keep))
    kept = _kept(hot)
    SyntheticStore.open(hot).append(more, store_time=T0 + 10_000_000)
    return kept


def _carried(out: str) -> int:
    (line,) = [x for x in out.splitlines() if "carried forward" in x]
    return int(line.split("(")[1].split()[0])


def test_an_incremental_fingerprint_is_the_full_one_of_the_same_store(
    stores: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hot, cold = stores
    first = _run(hot, cold, capsys)
    assert "a full run: no previous fingerprint" in first and _carried(first) == 0
    before = _newest(cold)
    SyntheticStore.open(hot).append(150)  # about 75 new offsets per queue
    out = _run(hot, cold, capsys)
    assert "a full run" not in out
    incremental = _newest(cold)
    assert incremental.sequence == 1
    # the whole blocks are carried; the last of each queue, which the hot max cut, is read
    assert _carried(out) == _whole_blocks(before, 10**9) > 8
    _same_but_when(incremental, _full(hot, cold))
    assert json.loads(incremental.to_bytes())["hot_bytes"] == _full(hot, cold).hot_bytes


@pytest.mark.parametrize(("window", "chunk"), [(1, 256), (900, 256), (900, 7)])
def test_carried_and_read_blocks_mixed_window_by_window_are_the_full_run(
    stores: tuple[Path, Path], window: int, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Carried blocks read their edge leaves out of the window order; the read ones are fed
    # in runs, their units read in chunks: the result is still the full run's.
    monkeypatch.setattr(taking, "_UNITS_HELD", 0)
    monkeypatch.setattr(taking, "_MIN_CHUNK", chunk)
    hot, cold = stores
    before = _full(hot, cold)
    SyntheticStore.open(hot).append(150)
    full = _full(hot, cold)
    since = tuple(sorted({t for q in full.queues for t, _ in q.stored_from}))
    taken = asyncio.run(
        take_carrying(HotStore(hot), before, cluster=CLUSTER, broker=BROKER,
                      clock=VirtualClock(), block_offsets=BLOCK, leaf_offsets=LEAF,
                      since_ms=since, window_bytes=window)
    )  # fmt: skip
    assert taken.carried_blocks == _whole_blocks(before, 10**9) > 8
    _same_but_when(taken.fingerprint, full)


def test_a_tail_the_broker_wrote_again_is_not_carried_forward(
    stores: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hot, cold = stores
    _run(hot, cold, capsys)
    before = _newest(cold)
    # An unclean restart: the broker keeps the first 1000 messages (about 500 per queue:
    # the consume queues and commit log cut there) and writes the rest again, differently,
    # and more of them. The blocks past the cut keep their range but not their bytes.
    kept = _write_again(hot, keep=1000, more=300)
    out = _run(hot, cold, capsys)
    assert _carried(out) == _whole_blocks(before, kept) < _whole_blocks(before, 10**9)
    _same_but_when(_newest(cold), _full(hot, cold))


def test_a_tail_rewritten_with_the_same_offsets_is_not_carried_forward(
    stores: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hot, cold = stores
    _run(hot, cold, capsys)
    before = _newest(cold)
    # The same messages but the last 100, written again (later times): the hot ranges
    # are as they were, the last whole block's records are not.
    kept = _write_again(hot, keep=1100, more=100)
    assert [(q.hot_min, q.hot_max) for q in _full(hot, cold).queues] == [
        (q.hot_min, q.hot_max) for q in before.queues
    ]
    out = _run(hot, cold, capsys)
    assert _carried(out) == _whole_blocks(before, kept) < _whole_blocks(before, 10**9)
    _same_but_when(_newest(cold), _full(hot, cold))


def test_a_hot_min_that_moved_drops_the_blocks_before_it_and_reads_the_one_it_cut(
    stores: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hot, cold = stores
    _run(hot, cold, capsys, "--block-offsets", "150")
    for q in (hot / "consumequeue").iterdir():  # retention: the oldest CQ file of each queue
        for qdir in q.iterdir():
            min(qdir.iterdir()).unlink()
    full = _full_of(hot, cold, 150)
    assert {q.hot_min for q in full.queues} == {100}
    before = _newest(cold)
    out = _run(hot, cold, capsys, "--block-offsets", "150")
    # blocks [0, 150) [150, 300) [300, 450) [450, 600) ...: the first is cut to [100, 150)
    # and read; every other keeps its range and is carried
    assert _carried(out) == sum(1 for q in before.queues for b in q.blocks if b.start >= 150)
    assert _carried(out) == sum(len(q.blocks) for q in before.queues) - 2
    fp = _newest(cold)
    assert all(q.blocks[0].start == 100 for q in fp.queues)
    _same_but_when(fp, full)


def _full_of(hot: Path, cold: Path, block: int) -> Fingerprint:
    fp = _full(hot, cold)  # of BLOCK offsets per block: the shape the command's is compared on
    key = tiering_key(CLUSTER, BROKER)
    record = read_tiering_record((cold / key).read_bytes(), key)
    since = tuple(sorted({e.since_ms for e in record.history}))
    assert fp.block_offsets == BLOCK
    return asyncio.run(
        take_fingerprint(HotStore(hot), cluster=CLUSTER, broker=BROKER, clock=VirtualClock(),
                         block_offsets=block, leaf_offsets=LEAF, since_ms=since)
    )  # fmt: skip


def test_full_every_forces_a_full_run(
    stores: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hot, cold = stores
    outs = [_run(hot, cold, capsys, "--full-every", "2") for _ in range(3)]
    assert [_carried(o) > 0 for o in outs] == [False, True, False]
    assert "a full run: sequence 2 is a multiple of --full-every 2" in outs[2]
    assert "a full run" not in outs[1]
    assert _carried(_run(hot, cold, capsys, "--full-every", "1")) == 0


def test_a_previous_fingerprint_that_cannot_be_used_makes_a_full_run_saying_why(
    stores: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hot, cold = stores
    _run(hot, cold, capsys)
    folder = cold / fingerprint_prefix(CLUSTER, BROKER)
    (path,) = folder.iterdir()
    doc = json.loads(path.read_bytes())
    doc["format_version"] = 3  # blake2b digests: nothing to compare with
    path.write_text(json.dumps(doc))
    out = _run(hot, cold, capsys)
    (line,) = [x for x in out.splitlines() if "a full run" in x]
    assert "is of format 3" in line and _carried(out) == 0
    out = _run(hot, cold, capsys, "--leaf-offsets", "20")
    assert "has blocks of 100 and leaves of 10 offsets" in out and _carried(out) == 0
    newest = max(folder.iterdir())
    newest.write_bytes(b"{")
    out = _run(hot, cold, capsys)
    assert "the previous fingerprint does not read" in out and _carried(out) == 0
