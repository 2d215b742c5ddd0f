"""Compaction: batch slices rewritten as one segment per queue, read back byte for byte.

Stores are real (the sidecar's runtime over a synthetic broker store, tiered, then its
newest segments moved into batch objects and committed as slices: the ``batched``
fixture), on the memory and POSIX backends; time is a :class:`VirtualClock`.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from tests.dispatcher.tiering.conftest import BATCHED_SPEC, TOPIC, Batched, OpenBatched
from tests.support.sidecar.settings import BROKER, CLUSTER, put_in_force, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tests.support.stores.segments import T0
from tieredstore.backends.base import Backend
from tieredstore.backends.forwarding import ForwardingBackend
from tieredstore.cli.sidecar.reload import apply_reload
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.cold.compressed.framed import Framed
from tieredstore.cold.digests import DigestAlgorithm, digest
from tieredstore.cold.history import EntryKind, load_history
from tieredstore.cold.layout import (
    QueuePath,
    SegmentKind,
    batch_prefix,
    kind_prefix,
    object_key,
    parse_batch_key,
    parse_object_key,
)
from tieredstore.cold.manifest import Manifest, read_stored
from tieredstore.cold.reader import ColdReader
from tieredstore.dispatcher.tiering.batch.collect import MIN_GRACE_MS, collect_batches
from tieredstore.dispatcher.tiering.batch.compaction import (
    CompactionReport,
    Compactor,
    compaction_run,
)
from tieredstore.errors import BackendError
from tieredstore.hot.synth import synthesize

HOUR_MS = 3_600_000
#: When the fixture's batches were made (``tests.support.stores.batches.batch_of``).
CREATED = T0 + 60_000


def _cap(b: Batched, max_bytes: int) -> Compactor:
    """The runtime's compactor, with ``tiering.segment_max_bytes = max_bytes`` in force."""
    put_in_force(b.rt.in_force, tiering__segment_max_bytes=max_bytes)
    return b.rt.compactor


async def _message(b: Batched, queue_id: int, offset: int) -> tuple[EntryKind, list[object]]:
    """How a fresh reader reads one offset: from which kind of link, and the message."""
    reader = ColdReader(b.rt.backend, CLUSTER, BROKER)
    _, link = await reader.locate(TOPIC, queue_id, offset)
    got = await reader.read(TOPIC, queue_id, offset, 1)
    return link.kind, [
        (m.queue_offset, m.cold_commitlog_offset, m.record.encode(), m.body) for m in got
    ]


def _manifest_at(b: Batched, queue_id: int, offset: int) -> Manifest:
    return next(
        s.manifest for s in b.rt.catalogue.segments.of(TOPIC, queue_id) if s.start_offset == offset
    )


@pytest.mark.parametrize(
    "cold", ["memory", "posix", pytest.param("s3", marks=[pytest.mark.s3, pytest.mark.slow])]
)
async def test_slices_become_one_segment_and_read_the_same_bytes(
    batched: OpenBatched, cold: str
) -> None:
    async with batched("SSSS", cold=cold) as b:
        first = b.slices[0][0]
        inside = b.slices[0][2].start_offset + 1
        kind, before = await _message(b, 0, inside)
        assert kind is EntryKind.SLICE

        b.clock.set_ms(
            b.clock.now_ms() + HOUR_MS + 60_000
        )  # every slice is due (compact_after: 1 h)
        report = await _cap(b, 1 << 20).run_pass()

        assert (report.queues, report.slices, report.problems) == (2, 8, ())
        assert not b.rt.catalogue.slices.of(TOPIC, 0)
        m = _manifest_at(b, 0, first.start_offset)
        last = b.slices[0][-1]
        assert (m.end_offset, m.cl_base, m.cl_end) == (last.end_offset, first.cl_base, last.cl_end)
        kind, after = await _message(b, 0, inside)
        assert kind is EntryKind.SEGMENT
        assert after == before
        # Every batch was old, unreferenced and covered: all went, the highest after a
        # fence above it.
        assert report.batches_deleted == tuple(b.batches)
        assert not [i.key for i in await b.rt.backend.list(b.batches[-1])]
        await assert_cold_matches_hot(b.rt.backend, b.rt.hot, CLUSTER, BROKER)
        assert (await _cap(b, 1 << 20).run_pass()).queues == 0  # nothing left to do


async def test_a_run_stops_at_a_segment(batched: OpenBatched) -> None:
    async with batched("SSgSS") as b:
        b.clock.set_ms(b.clock.now_ms() + HOUR_MS + 60_000)
        compactor = _cap(b, 1 << 20)
        report = await compactor.run_pass()
        assert (report.queues, report.slices) == (2, 4)
        left = b.rt.catalogue.slices.of(TOPIC, 1)
        assert [s.start_offset for s in left] == [s.start_offset for s in b.slices[1][2:]]
        m = _manifest_at(b, 1, b.slices[1][0].start_offset)
        assert m.end_offset == b.slices[1][1].end_offset
        report = await compactor.run_pass()
        assert (report.queues, report.slices) == (2, 4)
        assert not b.rt.catalogue.slices.of(TOPIC, 1)
        await assert_cold_matches_hot(b.rt.backend, b.rt.hot, CLUSTER, BROKER)


async def test_a_run_is_capped_at_segment_max_bytes(batched: OpenBatched) -> None:
    async with batched("SSSS") as b:
        s = b.slices[0]
        cap = s[0].commit_log.size + s[1].commit_log.size + s[2].commit_log.size - 1
        assert [x.start_offset for x in compaction_run(s, cap)] == [
            s[0].start_offset,
            s[1].start_offset,
        ]
        assert compaction_run(s, 1) == [s[0]]  # at least one slice
        assert compaction_run([], cap) == []
        b.clock.set_ms(b.clock.now_ms() + HOUR_MS + 60_000)
        compactor = _cap(b, cap)
        await compactor.run_pass()
        assert _manifest_at(b, 0, s[0].start_offset).end_offset == s[1].end_offset
        rows = b.rt.catalogue.slices.of(TOPIC, 0)
        assert [r.start_offset for r in rows] == [s[2].start_offset, s[3].start_offset]
        await compactor.run_pass()
        assert not b.rt.catalogue.slices.of(TOPIC, 0)
        await assert_cold_matches_hot(b.rt.backend, b.rt.hot, CLUSTER, BROKER)


async def test_due_by_size_before_compact_after(batched: OpenBatched) -> None:
    async with batched("SS") as b:
        assert (await _cap(b, 1 << 20).run_pass()).queues == 0  # young, small
        s = b.slices[0]
        report = await _cap(b, s[0].commit_log.size).run_pass()
        assert report.queues == 2 and report.batches_deleted == ()  # young batches stay


async def test_a_corrupted_slice_is_never_compacted(
    batched: OpenBatched, caplog: pytest.LogCaptureFixture
) -> None:
    async with batched("SSS") as b:
        bad = b.slices[0][1]
        data = bytearray(await b.rt.backend.read(bad.key))
        data[bad.commit_log.at + bad.commit_log.size // 2] ^= 0x55
        await b.rt.backend.write(bad.key, bytes(data))
        b.clock.set_ms(b.clock.now_ms() + HOUR_MS + 60_000)
        with caplog.at_level(logging.ERROR):
            report = await _cap(b, 1 << 20).run_pass()
        assert report.queues == 1  # queue 1 only
        assert len(report.problems) == 1
        problem = report.problems[0]
        assert bad.key in problem and f"[{bad.start_offset}, {bad.end_offset})" in problem
        assert "not compacted" in problem
        assert problem in caplog.text
        assert len(b.rt.catalogue.slices.of(TOPIC, 0)) == 3
        first = b.slices[0][0]
        start = object_key(first.queue, SegmentKind.MANIFEST, first.start_offset)
        assert not await b.rt.backend.exists(start)
        # Its batch stays referenced: nothing of queue 0 is lost or deleted.
        assert report.batches_deleted == ()


class _DiesAfterManifest(ForwardingBackend):
    """Stops (as a killed process would) right after a manifest's create landed, once
    ``armed``."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.armed = False

    async def create(self, key: str, data: bytes) -> str:
        version = await super().create(key, data)
        if self.armed and parse_object_key(key).kind is SegmentKind.MANIFEST:
            self.armed = False
            raise BackendError("the process died after the manifest create", where=key)
        return version


async def test_a_crash_between_manifest_and_swap_is_adopted_next_pass(
    batched: OpenBatched,
) -> None:
    dying: list[_DiesAfterManifest] = []

    def wrap(inner: Backend) -> Backend:
        dying.append(_DiesAfterManifest(inner))
        return dying[0]

    async with batched("SSSS", wrap=wrap) as b:
        s = b.slices[0]
        two = s[0].commit_log.size + s[1].commit_log.size
        b.clock.set_ms(b.clock.now_ms() + HOUR_MS + 60_000)
        dying[0].armed = True
        report = await _cap(b, two).run_pass()  # dies after queue 0's manifest
        assert len(report.problems) == 1 and "died" in report.problems[0]
        assert len(b.rt.catalogue.slices.of(TOPIC, 0)) == 4  # the swap never happened
        key = s[0].queue
        at = object_key(key, SegmentKind.MANIFEST, s[0].start_offset)
        theirs = read_stored(await b.rt.backend.read(at), at)
        assert isinstance(theirs, Manifest) and theirs.end_offset == s[1].end_offset

        # The next pass may take all four slices; the crashed two-slice segment is
        # adopted as it is (a prefix of the run), ours discarded.
        report = await _cap(b, 1 << 20).run_pass()
        assert report.problems == ()
        assert _manifest_at(b, 0, s[0].start_offset) == theirs
        rows = b.rt.catalogue.slices.of(TOPIC, 0)
        assert [r.start_offset for r in rows] == [s[2].start_offset, s[3].start_offset]
        objects = await b.rt.backend.list(kind_prefix(key, SegmentKind.COMMIT_LOG) + "/")
        at_start = [o.key for o in objects if parse_object_key(o.key).base_offset == theirs.cl_base]
        assert at_start == [theirs.commit_log_key]  # ours discarded: nothing duplicated
        await _cap(b, 1 << 20).run_pass()
        assert not b.rt.catalogue.slices.of(TOPIC, 0)
        await assert_cold_matches_hot(b.rt.backend, b.rt.hot, CLUSTER, BROKER)


async def test_compaction_is_a_periodic_job_while_batching_or_slices(
    batched: OpenBatched,
) -> None:
    async with batched("SS") as b:
        jobs = {job.name: job for job in b.rt.dispatcher.periodic}
        job = jobs["compaction"]
        assert job.interval == 300.0  # min(compact_after 1 h / 4, 5 min)
        assert not job.locked  # the compactor locks the catalogue around its swaps only
        assert not b.rt.settings.tiering.batching
        b.clock.set_ms(b.clock.now_ms() + HOUR_MS + 60_000)
        report = await _cap(b, 1 << 20).run_if_needed()  # batching off, slices left
        assert report is not None and report.slices == 4
        assert await b.rt.compactor.run_if_needed() is None  # off, and none left

        on = settings_for(
            b.rt.settings.store.path, b.rt.settings.cold.url, b.rt.settings.state.dir,
            tiering__segment_max_bytes="8K", tiering__batching=True,
        )  # fmt: skip
        assert "tiering.batching" in apply_reload(b.rt, on).applied
        assert b.rt.compactor.tiering.batching
        assert await b.rt.compactor.run_if_needed() == CompactionReport()
        assert await job.job() == CompactionReport()  # the job runs the compactor's pass


@pytest.mark.parametrize(("compression", "version"), [("none", 2), ("zstd", 3)])
async def test_the_sidecar_batches_then_compacts_the_same_bytes(
    tmp_path: Path, compression: str, version: int
) -> None:
    store = synthesize(tmp_path / "store", BATCHED_SPEC).root
    url = f"memory://compaction-e2e-{uuid.uuid4().hex}"
    settings = settings_for(
        store, url, tmp_path / "state", tiering__batching=True,
        cold__compression=compression, cold__frame_size="4K",
    )  # fmt: skip
    clock = VirtualClock()
    async with open_runtime(settings, clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        assert not (await rt.dispatcher.catch_up()).errors
        assert rt.catalogue.slices.referenced_batches()  # the writer committed slices
        b = Batched(rt, clock)
        offset = rt.catalogue.slices.of(TOPIC, 1)[0].start_offset
        kind, before = await _message(b, 1, offset)
        assert kind is EntryKind.SLICE

        clock.set_ms(clock.now_ms() + HOUR_MS)
        job = {j.name: j for j in rt.dispatcher.periodic}["compaction"]
        report = await job.job()  # the periodic job: the compactor's pass, counted
        assert isinstance(report, CompactionReport)
        assert report.queues == 2 and report.problems == ()
        sample = rt.metrics.registry.get_sample_value
        assert sample("tieredstore_slices_compacted_total") == report.slices > 0
        assert not rt.catalogue.slices.referenced_batches()
        kind, after = await _message(b, 1, offset)
        assert (kind, after) == (EntryKind.SEGMENT, before)
        # The start's fence (sequence 0) stays for good; the batch, the highest, went
        # after a fence of this writer above it (sequence 2).
        prefix = batch_prefix(CLUSTER, BROKER) + "/"
        listed = [parse_batch_key(i.key, prefix) for i in await rt.backend.list(prefix)]
        assert sorted(s for s in listed if s is not None) == [0, 2]
        cold = await assert_cold_matches_hot(rt.backend, rt.hot, CLUSTER, BROKER)
        segments = [m.manifest for q in cold.values() for m in q.manifests if m.manifest]
        assert segments and {m.format_version for m in segments} == {version}
        for m in segments:  # compaction records the stored bytes' digest it wrote
            framed = m.commit_log.framed
            stored = await rt.backend.read(m.commit_log_key)
            if version == 3:
                assert framed == Framed(len(stored), digest(stored, DigestAlgorithm.CRC32C))


async def test_a_compacted_segment_expires_only_once_its_batches_are_deleted(
    batched: OpenBatched,
) -> None:
    """Expiring the segment compaction wrote while its slices are still in a batch object
    would bring them back (the reading rule reads a slice no segment holds): retention
    waits for the batch collector, then expires it, and the history never shows them."""
    async with batched("SSg") as b:
        # Every slice due (compact_after 1 min), every batch inside the grace (10 min).
        compactor = b.rt.compactor
        put_in_force(b.rt.in_force, tiering__compact_after=60.0)
        b.clock.set_ms(CREATED + 120_000)
        while any(b.rt.catalogue.slices.of(TOPIC, q) for q in (0, 1)):
            assert not (await compactor.run_pass()).problems
        left = [k for k in b.batches if await b.rt.backend.exists(k)]
        assert left == b.batches  # compacted, but too young to be deleted
        # Per queue, the first offset whose slice is still in a batch object:
        stop = {q: next(c.start_offset for c in b.slices[q] if c.key in left) for q in (0, 1)}
        compacted = stop[0]
        later = b.clock.now_ms() + 1000 * 24 * HOUR_MS  # everything is past retention
        first = await b.rt.retention.run_pass(now_ms=later)
        row = b.rt.catalogue.queues.get(TOPIC, 0)
        assert row is not None and row.cold_min == compacted  # stopped at the batch
        assert first.expired
        assert all(d.segment.end_offset <= stop[d.segment.queue_id] for d in first.expired)
        history = (await load_history(b.rt.backend, CLUSTER, BROKER)).queues
        assert history[QueuePath(CLUSTER, BROKER, TOPIC, 0)].min == compacted
        # A collection past the grace: the batches go, the highest too (fenced above)...
        gone = await collect_batches(
            b.rt.compactor.keys, b.rt.catalogue,
            now_ms=later, grace_ms=MIN_GRACE_MS,
        )  # fmt: skip
        assert sorted(gone.deleted) == sorted(left)
        # ...and the compacted segments expire; no slice comes back for any reader.
        second = await b.rt.retention.run_pass(now_ms=later)
        assert any(d.segment.start_offset == compacted for d in second.expired)
        history = (await load_history(b.rt.backend, CLUSTER, BROKER)).queues
        for q in (0, 1):
            row = b.rt.catalogue.queues.get(TOPIC, q)
            assert row is not None and row.cold_min > b.slices[q][-1].start_offset
            links = history[QueuePath(CLUSTER, BROKER, TOPIC, q)].links
            assert all(c.kind is EntryKind.SEGMENT for c in links)
            assert links[0].start_offset == row.cold_min
