"""Fence markers: one parse function tells them from manifests, and readers step over
them as "no segment here" (never an error, never a segment)."""

from __future__ import annotations

import json

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.segments import chain, upload
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.cold.layout import QueuePath, SegmentKind, object_key
from tieredstore.cold.manifest import FenceMarker, Manifest, read_manifest, read_stored
from tieredstore.cold.reader import ColdReader
from tieredstore.errors import (
    CorruptManifestError,
    OffsetOutOfRangeError,
    UnsupportedFormatError,
)

QUEUE = QueuePath(CLUSTER, BROKER, "T", 0)


def _marker(start: int, epoch: int = 4) -> FenceMarker:
    return FenceMarker(CLUSTER, BROKER, "T", 0, start, lease_epoch=epoch, writer_id="gc@h",
                       created_at_ms=1)  # fmt: skip


def test_read_stored_tells_a_marker_from_a_manifest() -> None:
    marker = _marker(7)
    assert read_stored(marker.to_json(), marker.key) == marker
    seg = chain(QUEUE, [3])[0]
    assert isinstance(read_stored(seg.manifest.to_json(), seg.manifest.key), Manifest)
    with pytest.raises(CorruptManifestError, match="no segment is committed"):
        read_manifest(marker.to_json(), marker.key)  # callers that need a segment
    with pytest.raises(CorruptManifestError, match="not the key it is stored at"):
        read_stored(marker.to_json(), _marker(8).key)


@pytest.mark.parametrize(
    ("doc", "newer"),
    [
        ({"format_version": 4, "anything": "new"}, True),
        ({"format_version": 0}, False),
        ({"fence_version": 2, "start_offset": 7}, True),
        ({"fence_version": 0}, False),
    ],
)
def test_a_newer_version_is_unsupported_not_merely_corrupt(
    doc: dict[str, object], newer: bool
) -> None:
    key = _marker(7).key
    with pytest.raises(CorruptManifestError) as caught:
        read_stored(json.dumps(doc).encode(), key)
    assert isinstance(caught.value, UnsupportedFormatError) is newer


async def test_the_reader_steps_over_markers() -> None:
    reset_memory_stores()
    backend = MemoryBackend("markers")
    segs = chain(QUEUE, [3, 4, 5])  # [0, 3) [3, 7) [7, 12)
    for seg in segs:
        await upload(backend, seg)
    for start in (1, 5, 12, 20):  # inside segments, at the frontier, beyond it
        await backend.write(
            object_key(QUEUE, SegmentKind.MANIFEST, start), _marker(start).to_json()
        )
    reader = ColdReader(backend, CLUSTER, BROKER)
    rng = await reader.range("T", 0)
    assert (rng.min, rng.commit) == (0, 12)
    messages = await reader.read("T", 0, 0, 100)
    assert [m.queue_offset for m in messages] == list(range(12))
    assert [m.queue_offset for m in await reader.read("T", 0, 5, 3)] == [5, 6, 7]
    with pytest.raises(OffsetOutOfRangeError):
        await reader.read("T", 0, 12, 1)
    first, last = segs[0].manifest, segs[-1].manifest
    assert await reader.offset_by_time("T", 0, first.min_store_timestamp) == 0
    assert await reader.offset_by_time("T", 0, last.max_store_timestamp + 1) == 12
