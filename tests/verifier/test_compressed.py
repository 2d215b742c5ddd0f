"""``tieredstore verify`` over compressed segments (manifest format 3) and compressed
batches (batch format 2): a store holding both kinds verifies as one, and a flipped byte
in a compressed object is CORRUPT with the digest finding a flipped byte in a plain one
gives."""

from __future__ import annotations

import pytest

from tests.support.stores.compressed import TEST_FRAMES, compress_segment, silent_flip
from tests.support.verification.report_doc import found
from tieredstore.hot.store import QueueKey

from .conftest import SPEC, World
from .test_batches import (
    Q0,
    Q1,
    all_segments,
    assert_clean,
    part_of,
    slice_range,
    tail_batch,
    write_batch,
)

pytestmark = pytest.mark.spark

Q = QueueKey("SynthTopic1", 0)


def _compress_every_other(world: World) -> None:
    for ms in world.image.manifests.values():
        for m in ms[::2]:
            compress_segment(world.cold, m)


def test_a_store_of_both_kinds_is_clean_at_content_level(world: World) -> None:
    _compress_every_other(world)
    code, doc = world.verify("--level", "content")
    assert (code, doc["verdict"], doc["anomalies"]) == (0, "CLEAN", [])
    assert doc["totals"]["units_compared"] == SPEC.messages
    cold_bytes = sum(m.cl_end - m.cl_base for ms in world.image.manifests.values() for m in ms)
    assert doc["totals"]["bytes_compared"] == cold_bytes


def test_a_flipped_byte_in_a_compressed_object_is_a_digest_mismatch(world: World) -> None:
    _compress_every_other(world)
    m = world.manifests(Q)[2]
    path = world.path(m.commit_log_key)
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x10  # inside a frame's compressed block
    path.write_bytes(bytes(data))
    code, doc = world.verify("--level", "content")
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {
        ("digest_mismatch", Q.topic, Q.queue_id, m.start_offset, m.end_offset, m.commit_log_key),
    }


def test_a_store_of_plain_and_compressed_batches_is_clean_at_content_level(world: World) -> None:
    """Batch 0 compressed (format 2), batch 1 plain (format 1), segments of both kinds."""
    _compress_every_other(world)
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
    path.write_bytes(silent_flip(path.read_bytes(), index.key))
    code, doc = world.verify("--level", "content")
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {
        ("digest_mismatch", q.topic, q.queue_id, *slice_range(index, q), index.key)
        for q in (Q0, Q1)
    }


def test_a_cut_compressed_batch_is_corrupt_naming_the_batch(world: World) -> None:
    index = tail_batch(world, frames=TEST_FRAMES)
    data = world.path(index.key).read_bytes()
    world.path(index.key).write_bytes(data[:-100])
    code, doc = world.verify()
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    bad = [a for a in doc["anomalies"] if a["anomaly"] == "corrupt_manifest"]
    assert [(a["object_key"], a["start"]) for a in bad] == [(index.key, None)]
    assert "stored_data_size" in bad[0]["detail"]
