"""Object digests: CRC-32C written, SHA-256 still read; incremental equals whole."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.stores.segments import chain
from tieredstore.cold.digests import WRITTEN, DigestAlgorithm, digest, hasher
from tieredstore.cold.layout import QueuePath
from tieredstore.cold.manifest import Manifest, ObjectRef
from tieredstore.cold.segment import verify_objects, verify_segment
from tieredstore.errors import DigestMismatchError

QUEUE = QueuePath("c", "b", "orders", 3)


def test_known_values() -> None:
    # The CRC-32C check value (RFC 3720 / iSCSI) and the empty input.
    assert digest(b"123456789", DigestAlgorithm.CRC32C) == "e3069283"
    assert digest(b"", DigestAlgorithm.CRC32C) == "00000000"
    assert digest(b"abc", DigestAlgorithm.SHA256) == hashlib.sha256(b"abc").hexdigest()
    assert WRITTEN is DigestAlgorithm.CRC32C


@given(data=st.binary(max_size=5000), cuts=st.lists(st.integers(0, 5000), max_size=6))
@pytest.mark.parametrize("algorithm", list(DigestAlgorithm))
def test_fed_in_pieces_of_any_buffer_type_equals_whole(
    algorithm: DigestAlgorithm, data: bytes, cuts: list[int]
) -> None:
    h = hasher(algorithm)
    bounds = [0, *sorted(min(c, len(data)) for c in cuts), len(data)]
    kinds = [bytes, bytearray, memoryview, pa.py_buffer]
    for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        piece = data[lo:hi]
        kind = kinds[i % len(kinds)]
        h.update(memoryview(pa.py_buffer(piece)) if kind is pa.py_buffer else kind(piece))
    assert h.hexdigest() == digest(data, algorithm)
    assert len(h.hexdigest()) == algorithm.hex_length


def test_algorithm_from_digest_length() -> None:
    assert DigestAlgorithm.for_hex("0" * 8) is DigestAlgorithm.CRC32C
    assert DigestAlgorithm.for_hex("0" * 64) is DigestAlgorithm.SHA256
    with pytest.raises(ValueError, match="no digest algorithm has 40 hex digits"):
        DigestAlgorithm.for_hex("0" * 40)


def _as_sha256(m: Manifest, cl: bytes, cq: bytes) -> Manifest:
    """The same segment as a 0.1.0 sidecar recorded it: SHA-256 digests."""
    return dataclasses.replace(
        m,
        digest_algorithm="sha256",
        commit_log=ObjectRef(m.commit_log.name, m.commit_log.size, hashlib.sha256(cl).hexdigest()),
        consume_queue=ObjectRef(
            m.consume_queue.name, m.consume_queue.size, hashlib.sha256(cq).hexdigest()
        ),
    )


def test_new_segments_record_crc32c_and_old_sha256_ones_still_verify() -> None:
    seg = chain(QUEUE, [5])[0]
    assert seg.manifest.digest_algorithm == "crc32c"
    assert seg.manifest.commit_log.digest == digest(seg.commit_log, DigestAlgorithm.CRC32C)
    verify_segment(seg.manifest, seg.commit_log, seg.consume_queue)
    old = _as_sha256(seg.manifest, seg.commit_log, seg.consume_queue)
    assert Manifest.from_json(old.to_json(), where="k") == old
    verify_segment(old, seg.commit_log, seg.consume_queue)
    flipped = bytearray(seg.commit_log)
    flipped[-1] ^= 1
    with pytest.raises(DigestMismatchError, match=r"object sha256 is [0-9a-f]{64}, its manifest"):
        verify_objects(old, bytes(flipped), seg.consume_queue, where="")
    with pytest.raises(DigestMismatchError, match=r"object crc32c is [0-9a-f]{8}, its manifest"):
        verify_objects(seg.manifest, bytes(flipped), seg.consume_queue, where="")
