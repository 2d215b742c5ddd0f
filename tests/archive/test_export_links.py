"""Export reads links, not objects: a batch slice (a link whose bytes are ranges of a
larger object) exports byte-identically to the same data committed as a segment, is
recorded under ``<batch key>#<topic>/<queue id>``, and gives way to the segment that
compaction writes over it (removed, the segment exported), as a superseded segment does.

``load_history`` does not return slices yet, so these tests hand export a history built
by hand (:func:`tests.support.stores.segments.packed`) in its place."""

from __future__ import annotations

import asyncio
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.batches import upload_batch
from tests.support.stores.segments import chain, packed, upload
from tieredstore.backends import open_backend
from tieredstore.backends.base import Backend
from tieredstore.clock import VirtualClock
from tieredstore.cold.compressed.frames import FrameSettings
from tieredstore.cold.history import BrokerHistory, Committed, QueueHistory, as_link, span_bytes
from tieredstore.cold.layout import QueuePath, batch_key
from tieredstore.cold.segment import Segment
from tieredstore.errors import CorruptManifestError, DigestMismatchError
from tieredstore.export import parquet as export_module
from tieredstore.export.parquet import (
    ExportReport,
    ExportRequest,
    decode_segment,
    export_manifest_key,
    export_parquet,
)

Q0, Q1 = QueuePath(CLUSTER, BROKER, "T", 0), QueuePath(CLUSTER, BROKER, "T", 1)


def _batch(n: int) -> str:
    return batch_key(CLUSTER, BROKER, n)


class _Cold:
    """Two queues committed twice: as segments, and as slices of two batch objects (a
    queue has one slice per batch), queue 0's first range as a segment only."""

    def __init__(self, segments: dict[QueuePath, list[Segment]]) -> None:
        self.segments = segments
        self.slices: dict[QueuePath, list[Committed]] = {Q0: [], Q1: []}
        self.batches: dict[str, bytes] = {}
        rounds = [[segments[Q0][1], segments[Q1][0]], [segments[Q0][2], segments[Q1][1]]]
        for n, members in enumerate(rounds, start=1):
            data, links = packed(members, _batch(n), sequence=n)
            self.batches[_batch(n)] = data
            for link in links:
                self.slices[link.queue].append(link)

    async def upload(self, backend: Backend) -> None:
        for segs in self.segments.values():
            for seg in segs:
                await upload(backend, seg)
        for key, data in self.batches.items():
            await backend.write(key, data)

    def seg(self, q: QueuePath) -> list[Committed]:
        return [as_link(s.manifest) for s in self.segments[q]]

    def as_segments(self, *, compacted: bool = False) -> BrokerHistory:
        """Every queue's segments (with the slices they replaced, once compacted)."""
        return BrokerHistory(
            {
                q: QueueHistory(tuple(self.seg(q)), tuple(self.slices[q]) if compacted else ())
                for q in (Q0, Q1)
            }
        )

    def with_slices(self) -> BrokerHistory:
        return BrokerHistory(
            {
                Q0: QueueHistory((self.seg(Q0)[0], *self.slices[Q0])),
                Q1: QueueHistory(tuple(self.slices[Q1])),
            }
        )


@pytest.fixture
def cold(tmp_path: Path) -> tuple[Path, _Cold]:
    state = _Cold({Q0: chain(Q0, [5, 7, 4]), Q1: chain(Q1, [6, 3])})

    async def go() -> None:
        async with open_backend(str(tmp_path / "cold")) as backend:
            await state.upload(backend)

    asyncio.run(go())
    return tmp_path / "cold", state


def _export(
    monkeypatch: pytest.MonkeyPatch, cold: Path, out: Path, history: BrokerHistory
) -> ExportReport:
    async def given(*_args: object, **_kwargs: object) -> BrokerHistory:
        return history

    monkeypatch.setattr(export_module, "load_history", given)

    async def go() -> ExportReport:
        async with open_backend(str(cold)) as c, open_backend(str(out)) as o:
            request = ExportRequest(CLUSTER, BROKER)
            return await export_parquet(c, o, request, clock=VirtualClock())

    return asyncio.run(go())


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*.parquet")}


def _records(out: Path) -> dict[str, Any]:
    doc = json.loads((out / export_manifest_key(CLUSTER, BROKER)).read_text())
    segments: dict[str, Any] = doc["segments"]
    return segments


def test_slices_export_like_their_segments_and_give_way_to_them(
    cold: tuple[Path, _Cold], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, state = cold
    plain, mixed = tmp_path / "plain", tmp_path / "mixed"
    first = _export(monkeypatch, root, plain, state.as_segments())
    assert (first.exported, first.rows) == (5, 25)
    report = _export(monkeypatch, root, mixed, state.with_slices())
    assert (report.exported, report.rows) == (5, 25)
    assert _files(mixed) == _files(plain)  # same names, same bytes
    records = _records(mixed)
    slice_keys = {f"{_batch(n)}#T/{q}" for n in (1, 2) for q in (0, 1)}
    assert set(records) == {state.seg(Q0)[0].key} | slice_keys
    # A slice's record says where it lies (its key does not); a segment's is unchanged.
    place = {k: records[f"{_batch(2)}#T/0"][k] for k in ("topic", "queue_id", "start_offset")}
    assert place == {"topic": "T", "queue_id": 0, "start_offset": 12}
    assert set(records[state.seg(Q0)[0].key]) == set(_records(plain)[state.seg(Q0)[0].key])
    again = _export(monkeypatch, root, mixed, state.with_slices())
    assert (again.exported, again.skipped, again.removed) == (0, 5, 0)

    # Compaction rewrote every slice as a segment with its boundaries; the slices wait
    # for collection (overlaps): they are removed from the export, the segments exported.
    compacted = _export(monkeypatch, root, mixed, state.as_segments(compacted=True))
    assert (compacted.exported, compacted.skipped) == (4, 1)
    assert (compacted.removed, compacted.removed_rows) == (4, 20)
    assert _files(mixed) == _files(plain)
    assert set(_records(mixed)) == set(_records(plain))


def test_a_slice_record_that_says_no_place_is_refused(
    cold: tuple[Path, _Cold], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, state = cold
    out = tmp_path / "out"
    _export(monkeypatch, root, out, state.with_slices())
    key = out / export_manifest_key(CLUSTER, BROKER)
    doc = json.loads(key.read_text())
    doc["segments"][f"{_batch(1)}#T/1"]["queue_id"] = "1"
    key.write_text(json.dumps(doc))
    with pytest.raises(CorruptManifestError, match="not an export manifest"):
        _export(monkeypatch, root, out, state.with_slices())


def test_a_slice_decodes_from_exactly_its_spans_bytes(cold: tuple[Path, _Cold]) -> None:
    root, state = cold
    link = state.slices[Q0][0]
    assert pickle.loads(pickle.dumps(link)) == link  # crosses to --jobs worker processes

    async def read(backend: Backend, c: Committed) -> tuple[bytes, bytes]:
        return await span_bytes(backend, c.commit_log), await span_bytes(backend, c.consume_queue)

    async def go() -> tuple[tuple[bytes, bytes], tuple[bytes, bytes]]:
        async with open_backend(str(root)) as backend:
            return await read(backend, link), await read(backend, state.seg(Q0)[1])

    (cl, cq), (seg_cl, seg_cq) = asyncio.run(go())
    assert (cl, cq) == (seg_cl, seg_cq)
    _, table = decode_segment(link, cl, cq, "s3://b/root")
    _, expected = decode_segment(state.seg(Q0)[1], seg_cl, seg_cq, "s3://b/root")
    assert table.equals(expected) and table.num_rows == 7
    damaged = bytearray(cl)
    damaged[len(damaged) // 2] ^= 0xFF
    span = link.commit_log
    with pytest.raises(DigestMismatchError, match=rf"bytes \[{span.at}, {span.end}\)") as e:
        decode_segment(link, bytes(damaged), cq, "s3://b/root")
    assert "its batch says" in str(e.value) and e.value.where == f"s3://b/root/{span.key}@{span.at}"


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "first-compressed"])
def test_a_history_with_batch_objects_exports_like_its_segments(
    tmp_path: Path, compressed: bool
) -> None:
    """Through load_history: batch objects export as their segments do, and compaction
    (the segments written beside the batches) swaps each slice's record for a segment's.
    ``compressed``: the first batch is format 2, the second plain (a store of both)."""
    segments = {Q0: chain(Q0, [5, 7, 4]), Q1: chain(Q1, [6, 3])}
    rounds = [[segments[Q0][1], segments[Q1][0]], [segments[Q0][2], segments[Q1][1]]]
    plain, batched = tmp_path / "plain", tmp_path / "batched"

    async def run(cold: Path, out: Path) -> ExportReport:
        async with open_backend(str(cold)) as c, open_backend(str(out)) as o:
            return await export_parquet(c, o, ExportRequest(CLUSTER, BROKER), clock=VirtualClock())

    async def go() -> tuple[ExportReport, ExportReport, ExportReport]:
        async with open_backend(str(plain)) as backend:
            for segs in segments.values():
                for seg in segs:
                    await upload(backend, seg)
        async with open_backend(str(batched)) as backend:
            await upload(backend, segments[Q0][0])
            for n, members in enumerate(rounds, start=1):
                frames = FrameSettings(256, 3) if compressed and n == 1 else None
                await upload_batch(backend, members, sequence=n, frames=frames)
        first = await run(plain, tmp_path / "a")
        second = await run(batched, tmp_path / "b")
        async with open_backend(str(batched)) as backend:  # compaction, batches still there
            for members in rounds:
                for seg in members:
                    await upload(backend, seg)
        return first, second, await run(batched, tmp_path / "b")

    first, second, compacted = asyncio.run(go())
    assert (first.exported, second.exported, second.rows) == (5, 5, 25)
    assert _files(tmp_path / "b") == _files(tmp_path / "a")
    assert (compacted.exported, compacted.removed, compacted.removed_rows) == (4, 4, 20)
    assert _files(tmp_path / "b") == _files(tmp_path / "a")
    assert set(_records(tmp_path / "b")) == set(_records(tmp_path / "a"))
