"""``tieredstore verify`` over compressed segments (manifest format 3): a store holding
both kinds verifies as one, and a flipped byte in a compressed object is CORRUPT with
the digest finding a flipped byte in a plain one gives. Compressed batches (format 2):
tests/verifier/test_batches.py."""

from __future__ import annotations

import json

import pytest

from tests.support.stores.compressed import compress_segment, silent_flip
from tests.support.verification.report_doc import found
from tieredstore.cold.digests import DigestAlgorithm, digest
from tieredstore.cold.manifest import read_manifest
from tieredstore.hot.store import QueueKey

from .conftest import SPEC, World

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


def test_a_flip_that_decodes_identically_is_a_stored_digest_mismatch(world: World) -> None:
    """A flip in bits zstd never reads leaves the payload and its digest as recorded: the
    stored digest (manifest format 3) is what finds it, and it is CORRUPT all the same."""
    _compress_every_other(world)
    key = world.manifests(Q)[2].key
    m = read_manifest(world.path(key).read_bytes(), key)
    assert m.commit_log.framed is not None
    path = world.path(m.commit_log_key)
    path.write_bytes(silent_flip(path.read_bytes()))
    code, doc = world.verify("--level", "content")
    assert (code, doc["verdict"]) == (2, "CORRUPT")
    assert found(doc) == {
        ("digest_mismatch", Q.topic, Q.queue_id, m.start_offset, m.end_offset, m.commit_log_key),
    }
    (anomaly,) = doc["anomalies"]
    bad = digest(path.read_bytes(), DigestAlgorithm.CRC32C)
    assert f"stored digest is {bad}, its manifest says {m.commit_log.framed.stored_digest}" in (
        json.dumps(anomaly)
    )
    assert doc["totals"]["units_compared"] == SPEC.messages  # its bytes are still judged
