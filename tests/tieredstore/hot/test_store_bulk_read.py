"""HotStore's bulk paths: gathered record reads and chunked CQ scans give exact answers.

``read_records_bytes`` gathers records from read-only mappings in runs
(:mod:`tieredstore.hot.commitlog`) and ``queue_range`` scans CQ files in chunks; both must
return exactly what a naive per-record / whole-file read does, whatever the order and
spacing.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tieredstore.errors import OffsetOutOfRangeError, TruncatedDataError
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE, decode_units, filler_mask, zero_mask
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.hot.synth import SynthSpec, synthesize

SCAN_CHUNK_UNITS = 52_428  # hot_store._SCAN_CHUNK // 20


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bulk") / "store"
    synthesize(root, SynthSpec(topics=2, queues=2, messages=600, commitlog_file_size=64 << 10))
    return root


def naive(root: Path, offsets: list[int], sizes: list[int]) -> list[bytes]:
    """One open + pread per record, straight from the file its offset falls in."""
    files = sorted((int(p.name), p) for p in (root / "commitlog").iterdir())
    out = []
    for off, size in zip(offsets, sizes, strict=True):
        base, path = next((b, p) for b, p in reversed(files) if b <= off)
        fd = os.open(path, os.O_RDONLY)
        try:
            out.append(os.pread(fd, size, off - base))
        finally:
            os.close(fd)
    return out


def all_units(hot: HotStore) -> tuple[list[int], list[int]]:
    offsets: list[int] = []
    sizes: list[int] = []
    for key in hot.queues():
        rng = hot.queue_range(key.topic, key.queue_id)
        units = hot.read_units(key.topic, key.queue_id, rng.min, rng.max)
        offsets += units["commitlog_offset"].tolist()
        sizes += units["size"].tolist()
    return offsets, sizes


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_any_selection_and_order_reads_like_naive_preads(store: Path, data: st.DataObject) -> None:
    hot = HotStore(store)
    offsets, sizes = all_units(hot)
    picks = data.draw(st.lists(st.integers(0, len(offsets) - 1), min_size=1, max_size=80))
    if data.draw(st.booleans()):
        picks.sort(key=lambda i: offsets[i])  # the uploader's case: ascending offsets
    offs, lens = [offsets[i] for i in picks], [sizes[i] for i in picks]
    got = hot.read_records_bytes(np.array(offs), np.array(lens))
    assert got == naive(store, offs, lens)


def test_a_whole_store_in_commitlog_order_reads_like_naive_preads(store: Path) -> None:
    hot = HotStore(store)
    offsets, sizes = all_units(hot)
    order = np.argsort(offsets)
    offs, lens = np.array(offsets)[order], np.array(sizes)[order]
    assert hot.read_records_bytes(offs, lens) == naive(store, offs.tolist(), lens.tolist())


def test_a_cut_file_names_the_first_record_it_cuts(tmp_path: Path) -> None:
    root = tmp_path / "store"
    synthesize(root, SynthSpec(topics=1, queues=1, messages=20, commitlog_file_size=64 << 10))
    hot = HotStore(root)
    offsets, sizes = all_units(hot)
    cut = offsets[10] + 5
    os.truncate(root / "commitlog" / f"{0:020d}", cut)
    with pytest.raises(TruncatedDataError, match=rf"@{offsets[10]}"):
        hot.read_records_bytes(np.array(offsets[5:15]), np.array(sizes[5:15]))
    with pytest.raises(OffsetOutOfRangeError, match="past the newest"):
        hot.read_records_bytes(np.array([cut + 100]), np.array([10]))


def write_cq(path: Path, used: int, total: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    unit = struct.Struct(">qiq")
    body = b"".join(unit.pack(1000 + i * 100, 100, 7) for i in range(used))
    path.write_bytes(body + bytes((total - used) * CQ_UNIT_SIZE))


@pytest.mark.parametrize(
    ("used", "total"),
    [
        (0, 10),
        (3, 10),
        (10, 10),
        (SCAN_CHUNK_UNITS - 1, SCAN_CHUNK_UNITS + 5),
        (SCAN_CHUNK_UNITS, SCAN_CHUNK_UNITS + 5),
        (SCAN_CHUNK_UNITS + 2, 2 * SCAN_CHUNK_UNITS + 7),
        (2 * SCAN_CHUNK_UNITS + 7, 2 * SCAN_CHUNK_UNITS + 7),
    ],
)
def test_queue_range_finds_the_first_zero_unit_across_scan_chunks(
    tmp_path: Path, used: int, total: int
) -> None:
    (tmp_path / "commitlog").mkdir()
    write_cq(tmp_path / "consumequeue" / "T" / "0" / f"{0:020d}", used, total)
    rng = HotStore(tmp_path).queue_range("T", 0)
    assert (rng.min, rng.max) == (0, used)


def test_queue_range_refuses_a_cq_file_of_a_partial_unit(tmp_path: Path) -> None:
    (tmp_path / "commitlog").mkdir()
    path = tmp_path / "consumequeue" / "T" / "0" / f"{0:020d}"
    write_cq(path, 3, 10)
    with path.open("ab") as fh:
        fh.write(b"\x00" * 7)
    with pytest.raises(TruncatedDataError, match=r"not a multiple of 20.*@200"):
        HotStore(tmp_path).queue_range("T", 0)


def _naive_units(root: Path, key: QueueKey, start: int, limit: int) -> tuple[int, ...]:
    """Every consume-queue file of the queue read whole: the hot max is the first
    all-zero unit of the newest, the hot min the first unit that is no filler, not all
    zero and points at or above the oldest commitlog file; then the units asked for.
    Rows: (min, max, unit bytes...)."""
    cl_min = min(int(p.name) for p in (root / "commitlog").iterdir())
    files = sorted(
        (int(p.name), p) for p in (root / "consumequeue" / key.topic / str(key.queue_id)).iterdir()
    )
    per_file = [(base // CQ_UNIT_SIZE, decode_units(path.read_bytes())) for base, path in files]
    newest_base, newest = per_file[-1]
    zeros = np.flatnonzero(zero_mask(newest))
    hot_max = newest_base + (int(zeros[0]) if zeros.size else newest.shape[0])
    hot_min = hot_max
    for base, units in per_file:
        usable = np.flatnonzero(
            ~filler_mask(units) & ~zero_mask(units) & (units["commitlog_offset"] >= cl_min)
        )
        if usable.size:
            hot_min = min(base + int(usable[0]), hot_max)
            break
    end = min(hot_max, start + limit)
    if not hot_min <= start < end:
        return (hot_min, hot_max)
    whole = np.concatenate([u for _, u in per_file])
    first = per_file[0][0]
    return (hot_min, hot_max, *whole[start - first : end - first].tolist())


@pytest.mark.parametrize("cq_units", [50, 6000])  # several consume-queue files, or one
@pytest.mark.parametrize("deleted", [0, 1, 12])  # oldest commitlog files gone: hot min moves
def test_queue_units_equal_the_range_then_the_units(
    tmp_path: Path, cq_units: int, deleted: int
) -> None:
    """One read gives the range and units whole-file reads give, for every start
    (below the min, inside, at and past the max) and limit, whichever file holds them."""
    spec = SynthSpec(
        topics=2, queues=3, messages=3600, body_max=400, commitlog_file_size=64 << 10,
        cq_file_size=cq_units * CQ_UNIT_SIZE, queue_start=7,
    )  # fmt: skip
    synthesize(tmp_path / "s", spec)
    hot = HotStore(tmp_path / "s")
    for f in hot.commitlog_files().files[:deleted]:
        os.remove(f.path)
    mins = []
    for key in hot.queues():
        rng = hot.queue_range(key.topic, key.queue_id)
        mins.append(rng.min)
        for start in sorted({0, rng.min - 1, rng.min, rng.min + 33, rng.max - 1, rng.max}):
            for limit in (0, 17, 10_000):
                got_rng, units = hot.queue_units(key.topic, key.queue_id, start, limit)
                got = (got_rng.min, got_rng.max)
                got += (*units.tolist(),) if units.shape[0] else ()
                want = _naive_units(tmp_path / "s", key, start, limit)
                assert got == want, (key, start, limit)
                assert hot.queue_range(key.topic, key.queue_id) == got_rng
                if units.shape[0]:  # what read_units gives, its dtype's byte order included
                    alone = hot.read_units(key.topic, key.queue_id, start, start + len(units))
                    assert (units.dtype, units.tobytes()) == (alone.dtype, alone.tobytes())
    assert deleted < 12 or min(mins) > 256  # past the scan's first chunk


def test_queue_units_of_a_queue_without_files(tmp_path: Path) -> None:
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "consumequeue" / "T" / "0").mkdir(parents=True)
    rng, units = HotStore(tmp_path).queue_units("T", 0, 0, 10)
    assert (rng.min, rng.max, units.shape[0]) == (0, 0, 0)
