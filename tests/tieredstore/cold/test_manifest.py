"""Manifests: canonical JSON round trips and strict validation naming the object."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.stores.segments import chain
from tieredstore.cold.compressed.framed import Framed
from tieredstore.cold.layout import QueuePath, SegmentKind, object_key, object_name
from tieredstore.cold.manifest import COMPRESSED_VERSION, Manifest, ObjectRef, read_manifest
from tieredstore.errors import CorruptManifestError

QUEUE = QueuePath("DefaultCluster", "broker-a", "%RETRY%orders", 5)
WHERE = "memory://cold/some/key.json"


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return chain(QUEUE, [4, 3])[1].manifest


def _doc(m: Manifest) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(m.to_json())
    return doc


def test_round_trip_is_canonical(manifest: Manifest) -> None:
    data = manifest.to_json()
    assert Manifest.from_json(data, where=WHERE) == manifest
    assert Manifest.from_json(data, where=WHERE).to_json() == data
    assert list(_doc(manifest)) == sorted(_doc(manifest))
    assert b" " not in data and b"\n" not in data


def test_keys_follow_the_layout(manifest: Manifest) -> None:
    assert manifest.start_offset == 4
    assert manifest.key == object_key(QUEUE, SegmentKind.MANIFEST, 4)
    assert manifest.attempt
    assert manifest.commit_log_key == object_key(
        QUEUE, SegmentKind.COMMIT_LOG, manifest.cl_base, manifest.attempt
    )
    assert manifest.consume_queue_key == object_key(
        QUEUE, SegmentKind.CONSUME_QUEUE, 80, manifest.attempt
    )
    assert manifest.cq_base == 80


@given(
    start=st.integers(0, 10**12),
    count=st.integers(1, 10**6),
    cl_base=st.integers(0, 10**15),
    avg=st.integers(92, 10**6),
    ts=st.integers(0, 2**62),
    spread=st.integers(0, 10**9),
    epoch=st.integers(1, 2**40),
    attempt=st.sampled_from(["", "0123456789abcdef", "ffffffffffffffff"]),
)
def test_any_valid_manifest_round_trips(
    start: int, count: int, cl_base: int, avg: int, ts: int, spread: int, epoch: int, attempt: str
) -> None:
    cl_size = count * avg
    m = Manifest(
        format_version=2 if attempt else 1,
        cluster="c",
        broker="b",
        topic="t",
        queue_id=0,
        start_offset=start,
        end_offset=start + count,
        cl_base=cl_base,
        cl_end=cl_base + cl_size,
        commit_log=ObjectRef(object_name(cl_base, attempt), cl_size, "a" * 64),
        consume_queue=ObjectRef(object_name(start * 20, attempt), 20 * count, "b" * 64),
        digest_algorithm="sha256",
        min_store_timestamp=ts,
        max_store_timestamp=ts + spread,
        message_count=count,
        writer_id="w",
        lease_epoch=epoch,
        created_at_ms=ts,
    )
    assert Manifest.from_json(m.to_json(), where=WHERE) == m


def _corrupt(manifest: Manifest, **changes: Any) -> bytes:
    doc = _doc(manifest)
    for path, value in changes.items():
        target = doc
        *parents, leaf = path.split("__")
        for p in parents:
            target = target[p]
        if value is _DELETE:
            del target[leaf]
        else:
            target[leaf] = value
    return json.dumps(doc).encode()


_DELETE = object()


@pytest.mark.parametrize(
    ("changes", "complaint"),
    [
        ({"format_version": 4}, "unsupported format_version 4"),
        ({"end_offset": 4}, "queue offsets"),
        ({"start_offset": -1}, "queue offsets"),
        ({"message_count": 2}, "message_count"),
        ({"cl_end": 0}, "cold commitlog range"),
        ({"commit_log__size": 1}, "commit_log.size"),
        ({"consume_queue__size": 20}, "consume_queue.size"),
        ({"commit_log__name": "cfcd208400000000000000000000"}, "commit_log.name"),
        ({"consume_queue__name": "cfcd208400000000000000000000"}, "consume_queue.name"),
        ({"commit_log__digest": "ABC"}, "commit_log.digest"),
        ({"consume_queue__digest": "0" * 7 + "G"}, "consume_queue.digest"),
        ({"digest_algorithm": "md5"}, "digest_algorithm 'md5' is not one of"),
        ({"digest_algorithm": "sha256"}, r"commit_log.digest .* is not 64 lowercase hex"),
        ({"min_store_timestamp": 2**62}, "store timestamps"),
        ({"min_store_timestamp": -1}, "store timestamps"),
        ({"lease_epoch": 0}, "lease_epoch"),
        ({"writer_id": ""}, "writer_id"),
        ({"created_at_ms": -5}, "created_at_ms"),
        ({"topic": "../x"}, "traversal"),
        ({"topic": "_quarantine"}, "reserved"),
        ({"queue_id": -1}, "queue id"),
        ({"queue_id": True}, "'queue_id' is bool"),
        ({"start_offset": 4.0}, "'start_offset' is float"),
        ({"cluster": 7}, "'cluster' is int"),
        ({"commit_log": "x"}, "not a JSON object"),
        ({"commit_log__size": "530"}, "'size' is str"),
        ({"writer_id": _DELETE}, "lacks field 'writer_id'"),
        ({"commit_log__digest": _DELETE}, "lacks field 'digest'"),
        ({"extra": 1}, "unknown field 'extra'"),
        ({"commit_log__extra": 1}, "unknown field 'extra'"),
    ],
)
def test_invalid_manifests_name_the_object(
    manifest: Manifest, changes: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(CorruptManifestError, match=complaint) as info:
        Manifest.from_json(_corrupt(manifest, **changes), where=WHERE)
    assert info.value.where == WHERE
    assert str(info.value).endswith(f"({WHERE})")


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        (b"", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"\xff\xfe\x00", "not valid JSON"),
        (b"[]", "not a JSON object"),
        (b'{"a": 1, "a": 2}', "duplicate field 'a'"),
        (b"[" * 100_000, "not valid JSON"),
    ],
)
def test_unparseable_manifests(data: bytes, complaint: str) -> None:
    with pytest.raises(CorruptManifestError, match=complaint) as info:
        Manifest.from_json(data, where=WHERE)
    assert info.value.where == WHERE


def test_constructing_an_invalid_manifest_fails(manifest: Manifest) -> None:
    with pytest.raises(CorruptManifestError, match="message_count"):
        dataclasses.replace(manifest, message_count=99)


def test_read_manifest_checks_the_key(manifest: Manifest) -> None:
    assert read_manifest(manifest.to_json(), manifest.key) == manifest
    moved = object_key(QUEUE, SegmentKind.MANIFEST, 0)
    with pytest.raises(CorruptManifestError, match="describes") as info:
        read_manifest(manifest.to_json(), moved)
    assert info.value.where == moved
    other_queue = object_key(dataclasses.replace(QUEUE, queue_id=6), SegmentKind.MANIFEST, 4)
    with pytest.raises(CorruptManifestError, match="describes"):
        read_manifest(manifest.to_json(), other_queue)
    with pytest.raises(CorruptManifestError, match="COMMIT_LOG object is not a manifest"):
        read_manifest(manifest.to_json(), manifest.commit_log_key)
    with pytest.raises(CorruptManifestError, match="not a manifest key"):
        read_manifest(manifest.to_json(), "somewhere/else.json")


@pytest.fixture(scope="module")
def compressed(manifest: Manifest) -> Manifest:
    """``manifest`` as format 3: its COMMIT_LOG object stored compressed."""
    ref = dataclasses.replace(manifest.commit_log, framed=Framed(321, "0a1b2c3d"))
    return dataclasses.replace(manifest, format_version=COMPRESSED_VERSION, commit_log=ref)


def test_a_compressed_manifest_round_trips_with_its_stored_digest(compressed: Manifest) -> None:
    data = compressed.to_json()
    assert _doc(compressed)["commit_log"] == {
        "name": compressed.commit_log.name, "size": compressed.commit_log.size,
        "digest": compressed.commit_log.digest, "compression": "zstd", "stored_size": 321,
        "stored_digest": "0a1b2c3d",
    }  # fmt: skip
    assert Manifest.from_json(data, where=WHERE) == compressed
    assert Manifest.from_json(data, where=WHERE).to_json() == data


@pytest.mark.parametrize(
    ("changes", "complaint"),
    [
        ({"commit_log__stored_digest": _DELETE}, "lacks field 'stored_digest'"),
        ({"commit_log__stored_digest": "0A1B2C3D"}, "commit_log.stored_digest '0A1B2C3D' is not 8"),
        ({"commit_log__stored_digest": "0" * 64}, "commit_log.stored_digest '0+' is not 8"),
        ({"commit_log__stored_digest": None}, "'stored_digest' is NoneType"),
        ({"commit_log__stored_size": -1}, "commit_log.stored_size -1 < 0"),
        ({"commit_log__stored_size": _DELETE}, "lacks field 'stored_size'"),
    ],
)
def test_a_compressed_manifest_without_a_valid_stored_digest_is_corrupt(
    compressed: Manifest, changes: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(CorruptManifestError, match=complaint) as info:
        Manifest.from_json(_corrupt(compressed, **changes), where=WHERE)
    assert info.value.where == WHERE


def test_a_plain_manifest_with_a_stored_digest_is_corrupt(manifest: Manifest) -> None:
    with pytest.raises(CorruptManifestError, match="lacks field 'compression'"):
        Manifest.from_json(_corrupt(manifest, commit_log__stored_digest="0a1b2c3d"), where=WHERE)
