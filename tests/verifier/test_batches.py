"""Batch slices (issue 37), end to end through ``tieredstore verify``: a queue whose newest
data is a slice of a batch object is verified exactly as a segment is, under the one
reading rule (segments win, then the lowest batch sequence)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.compressed import TEST_FRAMES, compress_every_other, silent_batch_flip
from tests.support.verification.report_doc import found, queue_doc
from tieredstore.cold.batch import BatchFence, BatchIndex, SlicePart, build_batch
from tieredstore.cold.compressed.frames import FrameSettings
from tieredstore.cold.layout import batch_key
from tieredstore.formats.consumequeue import decode_units
from tieredstore.hot.store import QueueKey
from tieredstore.verifier import readers, schemas

from .conftest import SPEC, World

pytestmark = pytest.mark.spark

Q0 = QueueKey("SynthTopic1", 0)
Q1 = QueueKey("SynthTopic1", 1)
CREATED_AT_MS = 1_700_000_000_000


def part_of(world: World, q: QueueKey, which: slice, *, flip_record: bool = False) -> SlicePart:
    """The segments ``which`` of ``q`` as one slice's data (the last byte of its first
    record flipped with ``flip_record``: records that differ from hot, digests that fit)."""
    segs = world.manifests(q)[which]
    cl = bytearray(b"".join(world.image.objects[m.commit_log_key] for m in segs))
    cq = b"".join(world.image.objects[m.consume_queue_key] for m in segs)
    if flip_record:
        first = int(decode_units(cq, where="cq")["size"][0])
        cl[first - 1] ^= 0xFF
    return SlicePart(
        topic=q.topic,
        queue_id=q.queue_id,
        start_offset=segs[0].start_offset,
        end_offset=segs[-1].end_offset,
        cl_base=segs[0].cl_base,
        commit_log=bytes(cl),
        consume_queue=cq,
        min_store_timestamp=min(m.min_store_timestamp for m in segs),
        max_store_timestamp=max(m.max_store_timestamp for m in segs),
    )


def write_batch(
    world: World,
    sequence: int,
    parts: Sequence[SlicePart],
    frames: FrameSettings | None = None,
) -> BatchIndex:
    """Batch ``sequence`` of ``parts`` under ``world``'s cold root (compressed: ``frames``)."""
    index, data = build_batch(
        cluster=CLUSTER, broker=BROKER, sequence=sequence, writer_id="test-writer",
        lease_epoch=1, created_at_ms=CREATED_AT_MS, parts=parts, frames=frames,
    )  # fmt: skip
    path = world.path(index.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return index


def drop_segments(world: World, q: QueueKey, which: slice) -> None:
    for m in world.manifests(q)[which]:
        for key in (m.key, m.commit_log_key, m.consume_queue_key):
            world.path(key).unlink()


def tail_batch(
    world: World,
    sequence: int = 0,
    which: slice = slice(-2, None),
    frames: FrameSettings | None = None,
) -> BatchIndex:
    """Q0's and Q1's segments ``which`` (the last two) moved into batch ``sequence``."""
    index = write_batch(world, sequence, [part_of(world, q, which) for q in (Q0, Q1)], frames)
    for q in (Q0, Q1):
        drop_segments(world, q, which)
    return index


def slice_range(index: BatchIndex, q: QueueKey) -> tuple[int, int]:
    (s,) = [s for s in index.slices if (s.topic, s.queue_id) == (q.topic, q.queue_id)]
    return s.start_offset, s.end_offset


def assert_clean(world: World, segments: int) -> None:
    code, doc = world.verify("--level", "content")
    assert (code, doc["verdict"], doc["anomalies"]) == (0, "CLEAN", [])
    assert doc["totals"]["units_compared"] == SPEC.messages  # no offset compared twice
    cold_bytes = sum(m.cl_end - m.cl_base for ms in world.image.manifests.values() for m in ms)
    assert doc["totals"]["bytes_compared"] == cold_bytes
    assert doc["totals"]["segments"] == segments
    for q in (Q0, Q1):
        row = queue_doc(doc, q)
        assert row["cold"] == row["hot"] and row["status"] == "ok"
        assert row["cold_messages"] == row["hot"]["max"] - row["hot"]["min"]


def all_segments(world: World) -> int:
    return sum(len(v) for v in world.image.manifests.values())


def test_a_tail_in_a_batch_is_clean(world: World) -> None:
    tail_batch(world)
    assert_clean(world, all_segments(world) - 4 + 2)  # two slices stand for four segments


def test_a_compacted_batch_is_clean(world: World) -> None:
    # The segments over the slices' offsets are there, and so is the batch: segments win.
    write_batch(world, 0, [part_of(world, q, slice(-1, None)) for q in (Q0, Q1)])
    assert_clean(world, all_segments(world))


def test_a_stale_duplicate_batch_is_clean(world: World) -> None:
    # The lowest sequence wins; the later batch's slices hold the same offsets.
    tail_batch(world, 3)
    write_batch(world, 7, [part_of(world, q, slice(-2, None)) for q in (Q0, Q1)])
    assert_clean(world, all_segments(world) - 4 + 2)


def test_a_flipped_byte_in_a_slice_is_corrupt(world: World) -> None:
    index = tail_batch(world)
    (piece,) = [s for s in index.slices if s.topic == Q1.topic and s.queue_id == Q1.queue_id]
    data = bytearray(world.path(index.key).read_bytes())
    at = len(data) - index.data_size + piece.commit_log_at + 100
    data[at] ^= 0x01
    world.path(index.key).write_bytes(bytes(data))
    code, doc = world.verify("--level", "content")
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    lo, hi = slice_range(index, Q1)
    assert ("digest_mismatch", Q1.topic, Q1.queue_id, lo, hi, index.key) in found(doc)
    assert {a["anomaly"] for a in doc["anomalies"]} <= {"digest_mismatch", "content_mismatch"}


def test_a_compacted_slice_that_differs_from_hot_is_corrupt(world: World) -> None:
    # Not read (the segment over its offsets wins), but verified all the same: loud.
    index = write_batch(world, 0, [part_of(world, Q0, slice(-1, None), flip_record=True)])
    code, doc = world.verify("--level", "content")
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    lo, hi = slice_range(index, Q0)
    got = {(a[0], a[5]) for a in found(doc)}
    assert ("content_mismatch", index.key) in got
    # The two copies' digests disagree too (found without hot).
    assert ("content_mismatch", Q0.topic, Q0.queue_id, lo, hi, index.key) in found(doc)
    assert {a["anomaly"] for a in doc["anomalies"]} == {"content_mismatch"}


def test_a_deleted_batch_leaves_a_gap(world: World) -> None:
    index = tail_batch(world, which=slice(-3, -2))  # a middle segment's offsets
    world.path(index.key).unlink()
    code, doc = world.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert {(a["anomaly"], a["topic"], a["queue_id"], a["start"], a["end"]) for a in
            doc["anomalies"]} == {
        ("gap", q.topic, q.queue_id, *slice_range(index, q)) for q in (Q0, Q1)
    }  # fmt: skip


def test_a_deleted_tail_batch_is_hot_not_covered(world: World) -> None:
    index = tail_batch(world)
    world.path(index.key).unlink()
    code, doc = world.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    got = {(a["anomaly"], a["topic"], a["queue_id"], a["start"], a["end"]) for a in
           doc["anomalies"]}  # fmt: skip
    assert got == {("hot_not_covered", q.topic, q.queue_id, *slice_range(index, q))
                   for q in (Q0, Q1)}  # fmt: skip


def test_a_corrupt_batch_head_is_corrupt_naming_the_batch(world: World) -> None:
    index = tail_batch(world)
    data = bytearray(world.path(index.key).read_bytes())
    data[20] ^= 0xFF  # inside the index's JSON
    world.path(index.key).write_bytes(bytes(data))
    code, doc = world.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    bad = [a for a in doc["anomalies"] if a["anomaly"] == "corrupt_manifest"]
    assert [(a["object_key"], a["start"]) for a in bad] == [(index.key, None)]
    assert index.key in bad[0]["detail"]
    # Its slices' offsets are not covered: the untiered tail.
    assert {("hot_not_covered", q.topic, q.queue_id) for q in (Q0, Q1)} <= {
        (a["anomaly"], a["topic"], a["queue_id"]) for a in doc["anomalies"]
    }
    assert doc["totals"]["corrupt_manifests"] == 1


@pytest.mark.parametrize("frames", [None, TEST_FRAMES], ids=["plain", "compressed"])
def test_a_truncated_batch_is_corrupt_naming_the_batch(
    world: World, frames: FrameSettings | None
) -> None:
    """Cut short (issue 46): the report names the batch object, never "unreachable"; a
    compressed one says its stored size does not add up."""
    index = tail_batch(world, frames=frames)
    data = world.path(index.key).read_bytes()
    world.path(index.key).write_bytes(data[:-100])
    code, doc = world.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    bad = [a for a in doc["anomalies"] if a["anomaly"] == "corrupt_manifest"]
    assert [(a["object_key"], a["start"]) for a in bad] == [(index.key, None)]
    assert index.key in bad[0]["detail"]
    assert not [a for a in doc["anomalies"] if "unreachable" in str(a["detail"])]
    if frames is not None:
        assert "stored_data_size" in bad[0]["detail"]


def test_a_batch_fence_is_nothing(world: World) -> None:
    fence = BatchFence(CLUSTER, BROKER, 4, 2, "successor", CREATED_AT_MS)
    path = world.path(batch_key(CLUSTER, BROKER, 4))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(fence.to_json())
    code, doc = world.verify()
    assert (code, doc["verdict"], doc["anomalies"]) == (0, "CLEAN", [])
    assert doc["totals"]["segments"] == all_segments(world)


def test_mark_covering_is_the_one_reading_rule() -> None:
    def row(
        key: str, start: int, end: int, seq: int = -1, error: str | None = None
    ) -> dict[str, Any]:
        link = schemas.LINK_SEGMENT if seq < 0 else schemas.LINK_SLICE
        r = dict.fromkeys(schemas.SEGMENTS.fieldNames())
        r.update(manifest_key=key, topic="T", queue_id=0, start_offset=start,
                 manifest_mtime_ms=0, link=link, sequence=seq, error=error)  # fmt: skip
        if error is None:
            r.update(
                end_offset=end, cl_base=start * 10, cl_end=end * 10, cl_key=f"k{key}",
                cl_size=(end - start) * 10, cl_digest="0" * 8, cq_key=f"q{key}",
                cq_size=(end - start) * 20, cq_digest="0" * 8, min_store_timestamp=0,
                max_store_timestamp=0, message_count=end - start, writer_id="w",
                lease_epoch=1, created_at_ms=0, cl_at=0, cq_at=0, cl_object_size=10**6,
                cq_object_size=10**6,
            )  # fmt: skip
        return r

    rows = [
        row("seg", 0, 100),
        row("late", 100, 200, seq=5),  # a later batch's duplicate of "early"
        row("early", 100, 200, seq=1),
        row("compacted", 50, 100, seq=0),  # the segment holds these offsets
        row("next", 200, 210, seq=9),  # offsets nobody else holds
        row("stray", 90, 120),  # a segment over a segment: covers (and is an overlap)
        row("bad", 300, 0, error="no"),
    ]
    table = pa.Table.from_pylist(rows, schema=schemas.arrow_schema(schemas.SEGMENTS))
    marked = readers.mark_covering(table).to_pylist()
    assert {r["manifest_key"]: r["covers"] for r in marked} == {
        "seg": True, "late": False, "early": True, "compacted": False, "next": True,
        "stray": True, "bad": None,
    }  # fmt: skip


# -- compressed batches (format 2) ----------------------------------------------------------


def test_a_store_of_plain_and_compressed_batches_is_clean_at_content_level(world: World) -> None:
    """Batch 0 compressed (format 2), batch 1 plain (format 1), segments of both kinds."""
    compress_every_other(world.cold)
    tail_batch(world, 0, slice(-2, None), frames=TEST_FRAMES)
    write_batch(world, 1, [part_of(world, q, slice(-3, -2)) for q in (Q0, Q1)])
    for q in (Q0, Q1):
        for m in world.manifests(q)[-3:-2]:
            for key in (m.key, m.commit_log_key, m.consume_queue_key):
                world.path(key).unlink()
    assert_clean(world, all_segments(world) - 6 + 4)


def test_a_flipped_bit_that_decodes_the_same_is_a_digest_mismatch(world: World) -> None:
    """Its frames decode to the same bytes: the stored data digest finds it, for every
    slice of the batch (the whole object is what was damaged)."""
    index = tail_batch(world, frames=TEST_FRAMES)
    path = world.path(index.key)
    path.write_bytes(silent_batch_flip(path.read_bytes(), index.key))
    code, doc = world.verify("--level", "content")
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {
        ("digest_mismatch", q.topic, q.queue_id, *slice_range(index, q), index.key)
        for q in (Q0, Q1)
    }
