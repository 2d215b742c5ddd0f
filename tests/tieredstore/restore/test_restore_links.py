"""A restore reads links, not objects: a link whose bytes are ranges of a larger object
(a batch slice) restores byte-identically to the same data committed as segments, and
only the span's bytes are read and checked.

``load_history`` does not return slices yet, so these tests give the restore a plan of
links built by hand (:func:`tests.support.stores.segments.packed`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.batches import upload_batch
from tests.support.stores.segments import chain, packed, upload
from tieredstore.backends import open_backend
from tieredstore.backends.base import Backend
from tieredstore.backends.memory import MemoryBackend
from tieredstore.cold.compressed.frames import FrameSettings
from tieredstore.cold.history import Committed, EntryKind, as_link
from tieredstore.cold.layout import QueuePath, batch_key
from tieredstore.cold.segment import Segment
from tieredstore.errors import ColdDataError, DigestMismatchError
from tieredstore.restore import check
from tieredstore.restore.check import check_restored
from tieredstore.restore.journal import JOURNAL_NAME, RestoreParams
from tieredstore.restore.plan import QueuePlan, RestoreFilter, RestorePlan, build_plan
from tieredstore.restore.restorer import Restorer
from tieredstore.restore.stream import Chunk, segment_chunks

QUEUES = (QueuePath(CLUSTER, BROKER, "T", 0), QueuePath(CLUSTER, BROKER, "T", 1))
BATCH = batch_key(CLUSTER, BROKER, 1)


def _segments() -> dict[QueuePath, list[Segment]]:
    return {QUEUES[0]: chain(QUEUES[0], [5, 7, 4]), QUEUES[1]: chain(QUEUES[1], [6, 3])}


async def _cold(backend: Backend) -> tuple[RestorePlan, RestorePlan]:
    """Both queues committed twice in ``backend``: as segments, and as slices of one batch
    object. Returns a plan of each: the segments, and queue 0's first segment followed
    by slices (a history of both kinds)."""
    segments = _segments()
    for segs in segments.values():
        for seg in segs:
            await upload(backend, seg)
    data, slices = packed([s for segs in segments.values() for s in segs], BATCH)
    await backend.write(BATCH, data)
    by_queue: dict[QueuePath, list[Committed]] = {q: [] for q in QUEUES}
    for link in slices:
        by_queue[link.queue].append(link)
    as_segments = RestorePlan(
        tuple(QueuePlan(q, tuple(as_link(s.manifest) for s in segments[q])) for q in QUEUES)
    )
    mixed = RestorePlan(
        (
            QueuePlan(
                QUEUES[0], (as_link(segments[QUEUES[0]][0].manifest), *by_queue[QUEUES[0]][1:])
            ),
            QueuePlan(QUEUES[1], tuple(by_queue[QUEUES[1]])),
        )
    )
    return as_segments, mixed


def _params(cold: Path) -> RestoreParams:
    return RestoreParams(
        cold_url=str(cold), cluster=CLUSTER, broker=BROKER, topics=(), since=None,
        until=None, commitlog_file_size=4096, cq_file_size=6 * 20, index_hash_slots=11,
        index_max_entries=40, write_index=True, restore_config=False, config_at=None,
    )  # fmt: skip


class _Planned(Restorer):
    """A restore of a plan given by hand (load_history returns no slices yet)."""

    def __init__(self, backend: Backend, plan: RestorePlan, out: Path) -> None:
        super().__init__(backend, _params(out.parent / "cold"), out, batch_bytes=500)
        self.given = plan

    async def plan(self) -> RestorePlan:
        return self.given


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in (JOURNAL_NAME, "lock")
    }


def test_a_link_inside_a_larger_object_restores_like_its_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def go() -> tuple[dict[str, bytes], dict[str, bytes], str]:
        async with open_backend(str(tmp_path / "cold")) as backend:
            as_segments, mixed = await _cold(backend)
            await _Planned(backend, as_segments, tmp_path / "segments").run()
            report = await _Planned(backend, mixed, tmp_path / "mixed").run()
            assert (report.queues, report.messages) == (2, 25)

            async def planned(*_args: object) -> RestorePlan:
                return mixed

            monkeypatch.setattr(check, "build_plan", planned)
            result = await check_restored(backend, tmp_path / "mixed", batch_bytes=300)
        return _tree(tmp_path / "segments"), _tree(tmp_path / "mixed"), result.describe()

    segments, mixed, checked = asyncio.run(go())
    assert mixed == segments and any(k.startswith("commitlog/") for k in mixed)
    assert checked.startswith("CLEAN: 25 messages of 2 queues"), checked


async def _chunks(backend: Backend, link: Committed, first: int) -> list[Chunk]:
    return [c async for c in segment_chunks(backend, link, first=first, batch_bytes=300)]


@pytest.mark.parametrize("first", [0, 2, 5])
async def test_the_stream_of_a_slice_is_the_stream_of_its_segment(first: int) -> None:
    backend = MemoryBackend("restore-links-stream")
    seg = _segments()[QUEUES[0]][0]
    await upload(backend, seg)
    data, (link,) = packed([seg], BATCH)
    await backend.write(BATCH, data)
    assert link.kind is EntryKind.SLICE and link.commit_log.at > 0
    ours = await _chunks(backend, link, first)
    theirs = await _chunks(backend, as_link(seg.manifest), first)
    assert [(c.first, c.data) for c in ours] == [(c.first, c.data) for c in theirs]
    for a, b in zip(ours, theirs, strict=True):
        for field in ("starts", "sizes", "tags", "cold", "stamps"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), field
        assert a.link is link


async def test_the_digest_covers_exactly_the_spans_bytes() -> None:
    backend = MemoryBackend("restore-links-digest")
    seg = _segments()[QUEUES[0]][1]
    data, (link,) = packed([seg], BATCH)
    outside = bytearray(data)
    outside[link.commit_log.at - 1] ^= 0xFF  # filler before the span: never read
    outside[-1] ^= 0xFF
    await backend.write(BATCH, bytes(outside))
    assert len(await _chunks(backend, link, link.start_offset)) > 1
    inside = bytearray(data)
    inside[link.commit_log.end - 1] ^= 0xFF  # the last record's last byte: only the digest
    await backend.write(BATCH, bytes(inside))
    cl = link.commit_log
    with pytest.raises(DigestMismatchError, match=rf"bytes \[{cl.at}, {cl.end}\) crc32c is ") as e:
        await _chunks(backend, link, link.start_offset)
    assert e.value.where == f"{BATCH}@{cl.at}" and "its batch says" in str(e.value)


async def test_the_plan_holds_links_and_refuses_two_segments_over_one_offset() -> None:
    backend = MemoryBackend("restore-links-plan")
    for seg in chain(QUEUES[0], [3, 4]):
        await upload(backend, seg)
    plan = await build_plan(backend, CLUSTER, BROKER, RestoreFilter())
    (q,) = plan.queues
    assert [(c.kind, c.start_offset, c.end_offset) for c in q.links] == [
        (EntryKind.SEGMENT, 0, 3),
        (EntryKind.SEGMENT, 3, 7),
    ]
    assert (plan.segments, plan.messages) == (2, 7)
    _, intruder = chain(QUEUES[0], [2, 3])  # offsets [2, 5): another tiering's segment
    await upload(backend, intruder)
    with pytest.raises(ColdDataError, match=r"segments \[0, 3\) and \[2, 5\) over the same"):
        await build_plan(backend, CLUSTER, BROKER, RestoreFilter())


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "first-compressed"])
def test_a_history_with_batch_objects_restores_like_its_segments(
    tmp_path: Path, compressed: bool
) -> None:
    """Through load_history: queue 0's newest ranges and all of queue 1 committed only
    in two batch objects restore to the store the same data as segments restores to
    (``compressed``: the first batch is format 2, the second plain: a store of both)."""
    segments = _segments()
    rounds = [[segments[QUEUES[0]][1], segments[QUEUES[1]][0]],
              [segments[QUEUES[0]][2], segments[QUEUES[1]][1]]]  # fmt: skip

    async def go() -> tuple[list[list[EntryKind]], str]:
        async with open_backend(str(tmp_path / "plain")) as plain:
            for segs in segments.values():
                for seg in segs:
                    await upload(plain, seg)
            await Restorer(
                plain, _params(tmp_path / "plain"), tmp_path / "a", batch_bytes=500
            ).run()
        async with open_backend(str(tmp_path / "batched")) as batched:
            await upload(batched, segments[QUEUES[0]][0])
            for n, members in enumerate(rounds, start=1):
                frames = FrameSettings(256, 3) if compressed and n == 1 else None
                await upload_batch(batched, members, sequence=n, frames=frames)
            plan = await build_plan(batched, CLUSTER, BROKER, RestoreFilter())
            params = _params(tmp_path / "batched")
            await Restorer(batched, params, tmp_path / "b", batch_bytes=500).run()
            result = await check_restored(batched, tmp_path / "b", batch_bytes=300)
        return [[c.kind for c in q.links] for q in plan.queues], result.describe()

    kinds, checked = asyncio.run(go())
    stored = (tmp_path / "batched" / batch_key(CLUSTER, BROKER, 1)).read_bytes()
    assert (b'"compression":"zstd"' in stored) is compressed
    slice_, segment = EntryKind.SLICE, EntryKind.SEGMENT
    assert kinds == [[segment, slice_, slice_], [slice_, slice_]]
    assert _tree(tmp_path / "b") == _tree(tmp_path / "a")
    assert checked.startswith("CLEAN: 25 messages of 2 queues"), checked
