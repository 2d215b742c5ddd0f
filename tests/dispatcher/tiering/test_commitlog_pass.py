"""The commitlog-order pass gathers exactly what per-record reads of each queue give.

The reference is the per-queue path the pass replaced: ``HotStore.read_records_bytes``
of a segment's units, then :func:`tests.support.stores.oracle.rewrite_records` (checks, bytes
[28, 36) rewritten, store timestamps). The pass must produce, per segment, the same
bytes, digest and timestamp range, whatever the window: records spanning window edges,
windows cut at commitlog file boundaries, gaps, many queues, tiny records.
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tests.support.stores.oracle import rewrite_records
from tieredstore.cold.digests import digest
from tieredstore.dispatcher.tiering.commitlog_pass import (
    GatherJob,
    Spooled,
    _Merge,
    _Spool,
    gather_segments,
)
from tieredstore.dispatcher.tiering.planner import Limits, SegmentPlan, plan_segment
from tieredstore.errors import (
    CorruptRecordError,
    OffsetOutOfRangeError,
    StoreError,
    TieredStoreError,
)
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize


def _plans(hot: HotStore, limits: Limits, *, start_at: int = 0) -> list[SegmentPlan]:
    """One flushed plan per queue, from queue offset ``start_at`` (queues that have it)."""
    out = []
    for key in hot.queues():
        if hot.queue_range(key.topic, key.queue_id).max <= start_at:
            continue
        plan = plan_segment(hot, key, start_at, limits, now_ms=0, guard_ts=None, flush=True)
        assert isinstance(plan, SegmentPlan)
        out.append(plan)
    return out


def _reference(hot: HotStore, job: GatherJob) -> tuple[bytes, int, int]:
    units = job.plan.units
    records = hot.read_records_bytes(units["commitlog_offset"], units["size"])
    batch = rewrite_records(
        records, units["size"], start_offset=job.plan.start, cold_base=job.cl_base,
        where=lambda q: f"queue offset {q}",
    )  # fmt: skip
    return batch.data, batch.min_store_timestamp, batch.max_store_timestamp


def _assert_same(
    hot: HotStore, jobs: list[GatherJob], got: list[Spooled | TieredStoreError]
) -> None:
    assert len(got) == len(jobs)
    for job, spooled in zip(jobs, got, strict=True):
        assert isinstance(spooled, Spooled), spooled
        data, ts_min, ts_max = _reference(hot, job)
        written = spooled.path.read_bytes()
        assert written == data, job.plan.queue
        assert spooled.size == len(data) == job.plan.nbytes
        assert spooled.digest == digest(data)  # the digest new manifests record
        assert (spooled.min_store_timestamp, spooled.max_store_timestamp) == (ts_min, ts_max)


@pytest.fixture(scope="module")
def many_queues(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """128 queues, bodies up to 2 KiB, 64 KiB commitlog files (many file boundaries)."""
    root = tmp_path_factory.mktemp("clpass") / "store"
    spec = SynthSpec(
        topics=8, queues=16, messages=3000, body_min=16, body_max=2048,
        commitlog_file_size=64 << 10, compress_over=0, seed=3,
    )  # fmt: skip
    synthesize(root, spec)
    return root


_HOLD = 8 << 20  # the default: everything here is written when the pass finishes


@pytest.mark.slow
@pytest.mark.parametrize(
    ("window", "gap", "span", "hold"),
    [
        (2 << 20, 256 << 10, 64 << 20, _HOLD),  # the defaults: a window per commitlog file
        (4096, 256 << 10, 64 << 20, _HOLD),  # records span window edges everywhere
        (1, 256 << 10, 64 << 20, _HOLD),  # one record per window
        (16 << 10, 0, 64 << 20, _HOLD),  # every gap between due records ends a window
        (16 << 10, 256 << 10, 50_000, _HOLD),  # merged a few records at a time
        (4 << 20, 256 << 10, 1, _HOLD),  # a span per record
        (4096, 256 << 10, 64 << 20, 1),  # the spool writes after every window
        (16 << 10, 256 << 10, 64 << 20, 100_000),  # ... after every few windows
    ],
)
def test_pass_equals_per_record_reads(
    many_queues: Path, tmp_path: Path, window: int, gap: int, span: int, hold: int
) -> None:
    hot = HotStore(many_queues)
    plans = _plans(hot, Limits(max_bytes=24 << 10, max_messages=1000, max_age_ms=0))
    assert len(plans) == 128
    jobs = [GatherJob(p, cl_base=1000 * i) for i, p in enumerate(plans)]
    got = gather_segments(
        hot, jobs, tmp_path, window_bytes=window, gap_bytes=gap, span_bytes=span, hold_bytes=hold
    )
    _assert_same(hot, jobs, got)
    assert len(hot.commitlog_files().files) > 3  # the segments cross file boundaries


def test_more_waiting_runs_than_one_writev_takes(tmp_path: Path) -> None:
    """One queue, one record per window: its 2,500 runs wait, then go out in several
    ``writev`` calls (the system takes at most IOV_MAX buffers per call)."""
    root = tmp_path / "store"
    spec = SynthSpec(topics=1, queues=1, messages=2500, body_min=1, body_max=64, seed=5)
    synthesize(root, spec)
    hot = HotStore(root)
    plans = _plans(hot, Limits(max_bytes=1 << 30, max_messages=10_000, max_age_ms=0))
    jobs = [GatherJob(plans[0], cl_base=0)]
    spool = tmp_path / "spool"
    spool.mkdir()
    _assert_same(hot, jobs, gather_segments(hot, jobs, spool, window_bytes=1))


def test_pass_from_mid_queue_with_a_few_queues_due(many_queues: Path, tmp_path: Path) -> None:
    """Segments starting at a later offset; only some queues due (sparse records)."""
    hot = HotStore(many_queues)
    plans = _plans(hot, Limits(max_bytes=1 << 20, max_messages=7, max_age_ms=0), start_at=9)
    jobs = [GatherJob(p, cl_base=123_456) for p in plans[::17]]
    _assert_same(hot, jobs, gather_segments(hot, jobs, tmp_path, window_bytes=32 << 10))


@pytest.mark.slow
def test_thousand_queues_of_tiny_records(tmp_path: Path) -> None:
    """1,024 queues, 100-byte bodies: every window holds records of hundreds of queues."""
    root = tmp_path / "store"
    spec = SynthSpec(
        topics=16, queues=64, messages=12_000, body_min=100, body_max=100,
        commitlog_file_size=256 << 10, compress_over=0, seed=5,
    )  # fmt: skip
    synthesize(root, spec)
    hot = HotStore(root)
    plans = _plans(hot, Limits())
    assert len(plans) == 1024
    jobs = [GatherJob(p, cl_base=0) for p in plans]
    spool = tmp_path / "spool"
    spool.mkdir()
    got = gather_segments(hot, jobs, spool, window_bytes=64 << 10, span_bytes=1 << 20)
    _assert_same(hot, jobs, got)


def _patch_queue_offset(root: Path, hot: HotStore, cl_offset: int, value: int) -> None:
    f = hot.commitlog_files().find(cl_offset)
    assert f is not None
    fd = os.open(f.path, os.O_WRONLY)
    try:
        os.pwrite(fd, struct.pack(">q", value), cl_offset - f.base + 20)
    finally:
        os.close(fd)


def test_a_bad_record_fails_only_its_segment(tmp_path: Path) -> None:
    root = tmp_path / "store"
    synthesize(root, SynthSpec(topics=2, queues=4, messages=800, compress_over=0, seed=8))
    hot = HotStore(root)
    plans = _plans(hot, Limits(max_bytes=1 << 20, max_messages=1000, max_age_ms=0))
    victim = plans[3]
    _patch_queue_offset(root, hot, int(victim.units["commitlog_offset"][40]), 999_999)
    jobs = [GatherJob(p, cl_base=0) for p in plans]
    spool = tmp_path / "spool"
    spool.mkdir()
    got = gather_segments(hot, jobs, spool, window_bytes=8 << 10)
    error = got[3]
    assert isinstance(error, CorruptRecordError)
    assert f"{victim.queue} at queue offset {victim.start + 40}" in str(error)
    assert "queueOffset field 999999" in str(error)
    _assert_same(hot, jobs[:3] + jobs[4:], got[:3] + got[4:])


def test_a_deleted_commitlog_file_fails_the_segments_in_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    spec = SynthSpec(topics=1, queues=4, messages=800, commitlog_file_size=64 << 10, seed=2)
    synthesize(root, spec)
    hot = HotStore(root)
    plans = _plans(hot, Limits(max_bytes=1 << 20, max_messages=1000, max_age_ms=0))
    jobs = [GatherJob(p, cl_base=0) for p in plans]
    hot.commitlog_files().files[0].path.unlink()  # the broker deleted its oldest file
    spool = tmp_path / "spool"
    spool.mkdir()
    got = gather_segments(hot, jobs, spool)
    assert all(isinstance(g, OffsetOutOfRangeError) for g in got), got


def test_a_stopped_pass_returns_no_segment(many_queues: Path, tmp_path: Path) -> None:
    hot = HotStore(many_queues)
    plans = _plans(hot, Limits(max_bytes=24 << 10, max_messages=1000, max_age_ms=0))
    stop = threading.Event()
    stop.set()
    got = gather_segments(hot, [GatherJob(p, 0) for p in plans], tmp_path, stop=stop)
    assert all(isinstance(g, StoreError) and "stopped" in str(g) for g in got)


def test_overlapping_units_are_gathered_from_unrewritten_bytes(
    many_queues: Path, tmp_path: Path
) -> None:
    """Two segments naming the same records (a broken store): each gets the hot bytes
    with its own cold offsets, never the other's rewrite."""
    hot = HotStore(many_queues)
    plan = _plans(hot, Limits(max_bytes=16 << 10, max_messages=1000, max_age_ms=0))[0]
    jobs = [GatherJob(plan, cl_base=0), GatherJob(plan, cl_base=1 << 40)]
    got = gather_segments(hot, jobs, tmp_path)
    _assert_same(hot, jobs, got)
    a, b = (g.path.read_bytes() for g in got if isinstance(g, Spooled))
    assert a != b and np.count_nonzero(np.frombuffer(a, np.uint8) != np.frombuffer(b, np.uint8))


def _per_job_merge(jobs: list[GatherJob], span: int) -> list[list[tuple[int, int, int, int, int]]]:
    """The merge as it was first written: a cursor per job, each span taking every
    job's next records below the smallest next offset plus ``span``, then sorted by
    offset (ties: job order, then queue order). Rows: (offset, size, job, queue
    offset, cold offset)."""
    rows = [
        [
            (int(u["commitlog_offset"]), int(u["size"]), i, job.plan.start + k)
            for k, u in enumerate(job.plan.units)
        ]
        for i, job in enumerate(jobs)
    ]
    cold = [[job.cl_base + sum(r[1] for r in rs[:k]) for k in range(len(rs))] for job, rs in
            zip(jobs, rows, strict=True)]  # fmt: skip
    cursor = [0] * len(jobs)
    spans = []
    while any(c < len(rs) for c, rs in zip(cursor, rows, strict=True)):
        lo = min(rs[c][0] for c, rs in zip(cursor, rows, strict=True) if c < len(rs))
        taken = []
        for i, rs in enumerate(rows):
            while cursor[i] < len(rs) and rs[cursor[i]][0] < lo + span:
                taken.append((*rs[cursor[i]], cold[i][cursor[i]]))
                cursor[i] += 1
        spans.append(sorted(taken, key=lambda r: r[0]))  # stable: job order kept on ties
    return spans


@pytest.mark.parametrize("span", [1, 5_000, 50_000, 64 << 20])
def test_the_merge_cuts_and_orders_spans_as_a_cursor_per_job_does(
    many_queues: Path, span: int
) -> None:
    """One sort for the whole pass gives the spans (their cuts, order, queue and cold
    offsets) a cursor per job gave, overlapping jobs included."""
    hot = HotStore(many_queues)
    plans = _plans(hot, Limits(max_bytes=6 << 10, max_messages=1000, max_age_ms=0), start_at=3)
    jobs = [GatherJob(p, cl_base=777 * i) for i, p in enumerate(plans[::5])]
    jobs.append(GatherJob(plans[0], cl_base=1 << 40))  # the same records as the first job
    got = [
        list(
            zip(
                *(r.tolist() for r in (s.offset, s.size, s.job, s.queue_offset, s.cold)),
                strict=True,
            )
        )
        for s in _Merge(jobs, span).spans()
    ]
    assert got == _per_job_merge(jobs, span)
    assert sum(len(s) for s in got) == sum(j.plan.count for j in jobs)


@pytest.mark.parametrize("writeback", [True, False])
def test_spool_files_reach_the_disk_early_only_when_uploaded_as_they_are(
    tmp_path: Path, writeback: bool
) -> None:
    """A spool file that becomes the cold object (plain upload) has its bytes sent to
    disk as the pass goes; one that is only encoded (compression on) never does, and
    holds the same bytes."""
    size = 3 << 20  # above the early writeback's threshold
    data = pa.py_buffer(os.urandom(size))
    spool = _Spool(tmp_path, [size], writeback=writeback)
    try:
        spool.submit(data, [(0, 0, size)])
        spool.finish()
    finally:
        spool.close()
    assert spool.flushed == ([size] if writeback else [0])
    assert spool.paths[0].read_bytes() == data.to_pybytes()
    assert spool.hashes[0].hexdigest() == digest(data.to_pybytes())
