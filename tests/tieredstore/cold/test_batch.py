"""Batch objects: the encoding round-trips, the header is read in one or two steps, and
every malformed object, index or fence is refused with one line naming its key."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tieredstore.canonical_json import canonical, parse_object
from tieredstore.cold.batch import (
    BATCH_FORMAT_COMPRESSED,
    BATCH_FORMAT_VERSION,
    BATCH_FORMATS,
    BATCH_MAGIC,
    HEAD_PROBE,
    BatchFence,
    BatchHead,
    BatchIndex,
    BatchSlice,
    SlicePart,
    Withdrawn,
    build_batch,
    check_slice,
    commit_log_span,
    consume_queue_span,
    data_section,
    decoded_batch,
    encode_batch,
    head_reads,
    read_batch_head,
)
from tieredstore.cold.compressed.framed import Framed, decode_stored
from tieredstore.cold.compressed.frames import FrameSettings
from tieredstore.cold.digests import DigestAlgorithm, digest
from tieredstore.cold.layout import batch_key
from tieredstore.cold.manifest import DIGEST_ALGORITHM
from tieredstore.errors import (
    CorruptBatchError,
    CorruptFrameError,
    CorruptManifestError,
    UnsupportedFormatError,
)

CLUSTER, BROKER = "DefaultCluster", "broker-a"
KEY = batch_key(CLUSTER, BROKER, 7)


def _part(
    topic: str,
    queue_id: int,
    start: int = 100,
    count: int = 3,
    cl_base: int = 5000,
    size: int = 250,
) -> SlicePart:
    return SlicePart(
        topic=topic,
        queue_id=queue_id,
        start_offset=start,
        end_offset=start + count,
        cl_base=cl_base,
        commit_log=bytes((queue_id + i) % 251 for i in range(size)),
        consume_queue=bytes((7 * i + queue_id) % 253 for i in range(20 * count)),
        min_store_timestamp=1_767_225_600_000,
        max_store_timestamp=1_767_225_601_000,
    )


PARTS = (
    _part("TopicB", 0),
    _part("TopicA", 3, start=0, count=1, cl_base=0, size=92),
    _part("TopicA", 1, start=40, count=5, size=1000),
)


def _build(parts: tuple[SlicePart, ...] = PARTS, sequence: int = 7) -> tuple[BatchIndex, bytes]:
    return build_batch(
        cluster=CLUSTER,
        broker=BROKER,
        sequence=sequence,
        writer_id="w@h",
        lease_epoch=3,
        created_at_ms=1_767_225_605_000,
        parts=parts,
    )


def _head(obj: bytes, key: str = KEY) -> BatchHead | BatchFence | int:
    return read_batch_head(obj[:HEAD_PROBE], key=key, object_size=len(obj))


def _object(doc: dict[str, Any], data: bytes | None = None) -> bytes:
    """A batch object around the index ``doc`` (data of ``data_size`` bytes by default)."""
    index = canonical(doc)
    if data is None:
        data = bytes(max(0, doc.get("data_size", 0)))
    return BATCH_MAGIC + len(index).to_bytes(8, "big") + index + data


def _doc() -> dict[str, Any]:
    index, _ = _build()
    doc: dict[str, Any] = json.loads(index.to_json())
    return doc


# -- round trips ----------------------------------------------------------------------------


def test_build_lays_out_slices_in_queue_order_each_commit_log_then_consume_queue() -> None:
    index, obj = _build()
    assert [(s.topic, s.queue_id) for s in index.slices] == [
        ("TopicA", 1),
        ("TopicA", 3),
        ("TopicB", 0),
    ]
    a1, a3, b0 = index.slices
    assert (a1.commit_log_at, a1.consume_queue_at) == (0, 1000)
    assert (a3.commit_log_at, a3.consume_queue_at) == (1100, 1192)
    assert (b0.commit_log_at, b0.consume_queue_at) == (1212, 1462)
    assert index.data_size == 1522
    assert index.digest_algorithm == DIGEST_ALGORITHM.value
    assert (a1.cl_base, a1.cl_end, a1.message_count, a1.cq_base) == (5000, 6000, 5, 800)
    assert (a1.commit_log_size, a1.consume_queue_size) == (1000, 100)
    assert index.key == KEY
    assert str(index.queue(a1)) == "TopicA/1"
    assert obj[:8] == BATCH_MAGIC
    assert len(obj) == 16 + len(index.to_json()) + index.data_size


def test_read_head_in_one_go_and_the_spans_slice_each_part() -> None:
    index, obj = _build()
    head = _head(obj)
    assert isinstance(head, BatchHead)
    assert head.index == index
    assert head.data_offset == 16 + len(index.to_json())
    assert head.object_size == len(obj)
    parts = {(p.topic, p.queue_id): p for p in PARTS}
    for piece in head.index.slices:
        part = parts[(piece.topic, piece.queue_id)]
        cl, cq = commit_log_span(head, piece), consume_queue_span(head, piece)
        assert obj[cl[0] : cl[1]] == part.commit_log
        assert obj[cq[0] : cq[1]] == part.consume_queue
        assert check_slice(head.index, piece, part.commit_log, part.consume_queue) == ""


def test_an_index_longer_than_the_probe_is_read_in_two_steps() -> None:
    parts = tuple(_part(f"Topic{n:04d}", n % 8, count=1, size=100) for n in range(400))
    index, obj = _build(parts)
    assert 16 + len(index.to_json()) > HEAD_PROBE
    needed = _head(obj)
    assert needed == 16 + len(index.to_json())
    assert isinstance(needed, int)
    head = read_batch_head(obj[:needed], key=KEY, object_size=len(obj))
    assert isinstance(head, BatchHead) and head.index == index


def _drive(obj: bytes, *, cut: int = 0) -> tuple[object, list[int]]:
    """Run :func:`head_reads` over ``obj``, each read ``cut`` bytes short; return what it
    returned and the sizes it asked for."""
    asked: list[int] = []
    reads = head_reads(KEY, len(obj))
    try:
        want = next(reads)
        while True:
            asked.append(want)
            want = reads.send(obj[: max(want - cut, 0)])
    except StopIteration as done:
        return done.value, asked


def test_head_reads_probe_first_then_the_whole_header() -> None:
    index, obj = _build()
    head, asked = _drive(obj)
    assert len(obj) < HEAD_PROBE  # a small batch: read whole at once
    assert isinstance(head, BatchHead) and head.index == index and asked == [len(obj)]
    parts = tuple(_part(f"Topic{n:04d}", n % 8, count=1, size=100) for n in range(400))
    index, obj = _build(parts)
    head, asked = _drive(obj)
    assert isinstance(head, BatchHead) and head.index == index
    assert asked == [HEAD_PROBE, 16 + len(index.to_json())]


def test_head_reads_refuse_a_short_read_and_a_growing_header() -> None:
    _, obj = _build()
    with pytest.raises(CorruptBatchError, match=rf"read {len(obj) - 1} bytes of an object"):
        _drive(obj, cut=1)
    with pytest.raises(CorruptBatchError, match="shorter than the 16-byte header"):
        _drive(b"")  # an empty object listed: refused without a read of 0 bytes

    def replaced_each_time() -> None:  # an object whose index is longer at every read
        reads = head_reads(KEY, 1 << 30)
        want = next(reads)
        while True:
            length = (want + 1000).to_bytes(8, "big")
            want = reads.send((BATCH_MAGIC + length).ljust(want, b" "))

    with pytest.raises(CorruptBatchError, match="kept growing") as caught:
        replaced_each_time()
    assert caught.value.where == KEY


def test_a_tiny_probe_asks_for_the_fixed_header_then_the_index() -> None:
    index, obj = _build()
    assert read_batch_head(obj[:5], key=KEY, object_size=len(obj)) == 16
    assert read_batch_head(obj[:16], key=KEY, object_size=len(obj)) == 16 + len(index.to_json())
    assert read_batch_head(b"", key=KEY, object_size=len(obj)) == 16


def test_the_worked_example_of_docs_format_md() -> None:
    parts = (
        SlicePart("TopicA", 0, 100, 102, 5200, b"r" * 180, b"u" * 40,
                  1_767_225_600_000, 1_767_225_601_000),
        SlicePart("TopicB", 3, 7, 8, 0, b"s" * 92, b"v" * 20,
                  1_767_225_600_500, 1_767_225_600_500),
    )  # fmt: skip
    index, obj = build_batch(
        cluster=CLUSTER, broker=BROKER, sequence=42, writer_id="w@h", lease_epoch=3,
        created_at_ms=1_767_225_605_000, parts=parts,
    )  # fmt: skip
    assert index.key == (
        "212d6b50_DefaultCluster/broker-a/_batches/a1d0c6e800000000000000000042.batch"
    )
    assert len(index.to_json()) == 743
    assert obj[:16].hex(" ") == "54 53 42 41 54 43 48 01 00 00 00 00 00 00 02 e7"
    head = read_batch_head(obj, key=index.key, object_size=len(obj))
    assert isinstance(head, BatchHead)
    assert (head.data_offset, head.object_size) == (759, 1091)
    spans = [(commit_log_span(head, s), consume_queue_span(head, s)) for s in index.slices]
    assert spans == [((759, 939), (939, 979)), ((979, 1071), (1071, 1091))]
    doc = (Path(__file__).resolve().parents[3] / "docs" / "format.md").read_text()
    assert index.to_json().decode() in doc
    fence = BatchFence(CLUSTER, BROKER, 43, 4, "9a0e@host-2", 1_767_229_200_000)
    assert fence.to_json().decode() in doc and fence.key in doc


def test_index_and_fence_encodings_are_canonical() -> None:
    index, _ = _build()
    raw = index.to_json()
    assert BatchIndex.from_json(raw, where=KEY).to_json() == raw
    assert raw == canonical(json.loads(raw))
    fence = BatchFence(CLUSTER, BROKER, 7, lease_epoch=4, writer_id="w2@h", created_at_ms=9)
    assert fence.to_json() == canonical(json.loads(fence.to_json()))
    assert fence.to_json().startswith(b"{")


slice_parts = st.builds(
    lambda topic, qid, start, count, cl_base, cl, seed: SlicePart(
        topic=topic,
        queue_id=qid,
        start_offset=start,
        end_offset=start + count,
        cl_base=cl_base,
        commit_log=cl,
        consume_queue=bytes((seed + i) % 256 for i in range(20 * count)),
        min_store_timestamp=1,
        max_store_timestamp=2,
    ),
    st.sampled_from(["A", "B", "%RETRY%g", "Tö"]),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**40),
    st.integers(1, 20),
    st.integers(0, 2**50),
    st.binary(min_size=1, max_size=300),
    st.integers(0, 255),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(slice_parts, min_size=1, max_size=12, unique_by=lambda p: (p.topic, p.queue_id)))
def test_every_part_comes_back_from_its_spans(parts: list[SlicePart]) -> None:
    index, obj = _build(tuple(parts))
    head = _head(obj)
    assert isinstance(head, BatchHead)
    assert BatchIndex.from_json(index.to_json(), where=KEY) == index
    by_queue = {(p.topic, p.queue_id): p for p in parts}
    for piece in head.index.slices:
        part = by_queue[(piece.topic, piece.queue_id)]
        cl, cq = commit_log_span(head, piece), consume_queue_span(head, piece)
        assert obj[cl[0] : cl[1]] == part.commit_log
        assert obj[cq[0] : cq[1]] == part.consume_queue
    assert sum(s.commit_log_size + s.consume_queue_size for s in index.slices) == index.data_size


# -- writing refuses what would not check ------------------------------------------------


def test_encode_refuses_data_that_does_not_check() -> None:
    index, obj = _build()
    data = bytearray(obj[16 + len(index.to_json()) :])
    with pytest.raises(CorruptBatchError, match="data section is 1521 bytes") as short:
        encode_batch(index, bytes(data[:-1]))
    assert KEY in str(short.value)
    data[1100] ^= 1  # the first byte of TopicA/3's commit log
    with pytest.raises(CorruptBatchError, match="slice TopicA/3: commit_log digest") as bad:
        encode_batch(index, bytes(data))
    assert KEY in str(bad.value)
    data[1100] ^= 1
    data[-1] ^= 1  # the last byte of TopicB/0's consume queue
    with pytest.raises(CorruptBatchError, match="slice TopicB/0: consume_queue digest"):
        encode_batch(index, bytes(data))


def test_check_slice_names_size_and_digest_problems() -> None:
    index, _ = _build()
    piece = index.slices[1]
    part = PARTS[1]
    assert "commit_log is 91 bytes, the index says 92" in check_slice(
        index, piece, part.commit_log[:-1], part.consume_queue
    )
    assert "consume_queue digest" in check_slice(
        index, piece, part.commit_log, bytes(len(part.consume_queue))
    )


def test_build_refuses_a_consume_queue_of_the_wrong_length_and_a_queue_twice() -> None:
    with pytest.raises(CorruptBatchError, match=r"consume_queue is 59 bytes, not 20 \* 3"):
        _build((replace(PARTS[0], consume_queue=PARTS[0].consume_queue[:-1]),))
    with pytest.raises(CorruptBatchError, match="each queue at most once") as twice:
        _build((PARTS[0], PARTS[0]))
    assert KEY in str(twice.value)
    with pytest.raises(CorruptBatchError, match="at least one slice"):
        _build(())


def test_a_sha256_index_reads_and_checks() -> None:
    index, obj = _build()
    data = obj[16 + len(index.to_json()) :]
    slices = tuple(
        replace(
            s,
            commit_log_digest=digest(
                data[s.commit_log_at : s.commit_log_at + s.commit_log_size], DigestAlgorithm.SHA256
            ),
            consume_queue_digest=digest(
                data[s.consume_queue_at : s.consume_queue_at + s.consume_queue_size],
                DigestAlgorithm.SHA256,
            ),
        )
        for s in index.slices
    )
    sha = replace(index, digest_algorithm="sha256", slices=slices)
    head = _head(encode_batch(sha, data))
    assert isinstance(head, BatchHead) and head.index.algorithm is DigestAlgorithm.SHA256


# -- reading refuses damage ---------------------------------------------------------------


def _refused(obj: bytes, match: str, key: str = KEY) -> None:
    with pytest.raises(CorruptBatchError, match=match) as caught:
        _head(obj, key)
    assert key in str(caught.value)
    assert not isinstance(caught.value, UnsupportedFormatError)
    assert "\n" not in str(caught.value)


def _set_slice(i: int, **changes: Any) -> dict[str, Any]:
    doc = _doc()
    doc["slices"][i].update(changes)
    return doc


def _with(**changes: Any) -> dict[str, Any]:
    doc = _doc()
    doc.update(changes)
    return doc


def _swap_first_two() -> dict[str, Any]:
    doc = _doc()
    doc["slices"][0], doc["slices"][1] = doc["slices"][1], doc["slices"][0]
    return doc


def _queue_twice() -> dict[str, Any]:
    doc = _doc()
    doc["slices"][1].update(queue_id=1)
    return doc


INVARIANTS = [
    (_with(format_version=0), "unsupported batch format_version 0"),
    (_with(cluster="a/b"), "contains '/'"),
    (_with(broker=".."), "path traversal"),
    (_with(sequence=-1), r"sequence -1 is outside"),
    (_with(digest_algorithm="md5"), "digest_algorithm 'md5' is not one of"),
    (_with(slices=[], data_size=0), "at least one slice"),
    (_swap_first_two(), "slice TopicA/1 is not after TopicA/3"),
    (_queue_twice(), "each queue at most once"),
    (_set_slice(0, topic="_batches"), "slice _batches/1: topic name"),
    (_set_slice(0, queue_id=-1), r"queue id -1 is outside"),
    (_set_slice(0, end_offset=40), r"queue offsets \[40, 40\) are not a non-empty range"),
    (_set_slice(0, start_offset=-1), r"queue offsets \[-1, 45\)"),
    (_set_slice(0, cl_end=5000), r"cold commitlog range \[5000, 5000\)"),
    (_set_slice(0, min_store_timestamp=2, max_store_timestamp=1), "not 0 <= min <= max"),
    (_set_slice(2, commit_log_at=1500), r"bytes \[1500, 1750\) are not inside \[0, 1522\)"),
    (_set_slice(0, commit_log_at=-1), r"bytes \[-1, 999\) are not inside"),
    (_set_slice(1, consume_queue_at=1000), "overlap another range"),
    (
        _set_slice(2, commit_log_at=1213, consume_queue_at=1463) | {"data_size": 1523},
        r"data bytes \[1212, 1213\) belong to no slice",
    ),
    (_with(data_size=1530), r"data bytes \[1522, 1530\) belong to no slice"),
    (_set_slice(0, commit_log_digest="abc"), "commit_log_digest 'abc' is not 8 lowercase hex"),
    (_set_slice(0, consume_queue_digest="ABCDEF01"), "consume_queue_digest 'ABCDEF01'"),
    (_with(lease_epoch=0), r"lease_epoch 0 < 1"),
    (_with(writer_id=""), "writer_id is empty"),
    (_with(created_at_ms=-1), "created_at_ms -1 < 0"),
]


@pytest.mark.parametrize(("doc", "match"), INVARIANTS)
def test_every_invariant_is_refused_naming_the_key(doc: dict[str, Any], match: str) -> None:
    _refused(_object(doc), match)


JSON_PROBLEMS = [
    (_with(extra=1), "has unknown field 'extra'"),
    ({k: v for k, v in _doc().items() if k != "writer_id"}, "lacks field 'writer_id'"),
    (_with(lease_epoch=True), "field 'lease_epoch' is bool, not int"),
    (_with(sequence="7"), "field 'sequence' is str, not int"),
    (_with(slices={"a": 1}), "field 'slices' is dict, not list"),
    (_with(slices=[1]), "batch slice 0 is not a JSON object"),
    (_set_slice(1, extra=1), "batch slice 1 has unknown field 'extra'"),
    (_set_slice(1, cl_base=1.5), "field 'cl_base' is float, not int"),
]


@pytest.mark.parametrize(("doc", "match"), JSON_PROBLEMS)
def test_json_problems_are_refused_naming_the_key(doc: dict[str, Any], match: str) -> None:
    _refused(_object(doc), match)


def test_duplicate_fields_and_bad_json_are_refused() -> None:
    raw = canonical(_doc())
    dup = raw[:-1] + b',"writer_id":"x"}'
    _refused(BATCH_MAGIC + len(dup).to_bytes(8, "big") + dup + bytes(1522), "duplicate field")
    bad = b"[1, 2"
    _refused(BATCH_MAGIC + len(bad).to_bytes(8, "big") + bad, "is not valid JSON")


def test_a_newer_format_is_unsupported_not_merely_corrupt() -> None:
    with pytest.raises(UnsupportedFormatError, match="format_version 3") as caught:
        _head(_object(_with(format_version=max(BATCH_FORMATS) + 1, anything="new")))
    assert KEY in str(caught.value)
    # It is a kind of CorruptManifestError, as for every record: not of CorruptBatchError.
    assert isinstance(caught.value, CorruptManifestError)


def test_wrong_magic_is_refused() -> None:
    _, obj = _build()
    _refused(b"TSBATCH\x02" + obj[8:], "not the batch magic")
    _refused(b"PK\x03\x04" + obj[4:], "not the batch magic")
    with pytest.raises(CorruptBatchError, match="not the batch magic"):
        read_batch_head(b"XS", key=KEY, object_size=len(obj))  # even in a short probe


def test_truncated_and_oversized_objects_are_refused() -> None:
    index, obj = _build()
    _refused(obj[:-1], r"data_size 1522 bytes != object size")
    _refused(obj + b"\0", r"data_size 1522 bytes != object size")
    header = 16 + len(index.to_json())
    _refused(obj[: header - 1], r"index length \d+ overruns the object")
    _refused(obj[:header], r"data_size 1522 bytes != object size")
    _refused(obj[:12], "shorter than the 16-byte header")
    _refused(b"", "shorter than the 16-byte header")
    with pytest.raises(CorruptBatchError, match="given 11 bytes of an object of 10"):
        read_batch_head(obj[:11], key=KEY, object_size=10)
    huge = BATCH_MAGIC + (2**64 - 1).to_bytes(8, "big") + b"{}"
    _refused(huge, "overruns the object")


def test_a_batch_at_another_key_or_a_non_batch_key_is_refused() -> None:
    _, obj = _build()
    _refused(
        obj,
        "describes .*00000000000000000007.batch, not the key",
        key=batch_key(CLUSTER, BROKER, 8),
    )
    _refused(obj, "not the key it is stored at", key=batch_key(CLUSTER, "broker-b", 7))
    _refused(obj, "not the key it is stored at", key=batch_key("OtherCluster", BROKER, 7))
    _refused(obj, "not a batch key", key=KEY.replace(".batch", ".json"))
    _refused(obj, "not a batch key", key="212d6b50_DefaultCluster/broker-a/T/0/MANIFEST/x")


def test_direct_construction_refuses_naming_the_key() -> None:
    index, _ = _build()
    with pytest.raises(CorruptBatchError, match="lease_epoch 0 < 1") as caught:
        replace(index, lease_epoch=0)
    assert KEY in str(caught.value)
    with pytest.raises(CorruptBatchError, match="cold commitlog range"):
        replace(index.slices[0], cl_end=index.slices[0].cl_base)
    with pytest.raises(CorruptBatchError, match="'a/b'"):
        replace(index, cluster="a/b")  # no key to name: the parts instead


# -- fences -------------------------------------------------------------------------------


def _fence(**changes: Any) -> BatchFence:
    values: dict[str, Any] = {
        "cluster": CLUSTER,
        "broker": BROKER,
        "sequence": 7,
        "lease_epoch": 4,
        "writer_id": "w2@h",
        "created_at_ms": 1_767_229_200_000,
    }
    values.update(changes)
    return BatchFence(**values)


def test_a_fence_round_trips_through_read_batch_head() -> None:
    fence = _fence()
    assert fence.key == KEY
    raw = fence.to_json()
    assert read_batch_head(raw, key=KEY, object_size=len(raw)) == fence
    assert read_batch_head(raw[:1], key=KEY, object_size=len(raw)) == len(raw)
    assert fence.describe() == f"batch fence of epoch 4 (w2@h) at {KEY}"
    assert json.loads(raw)["fence_version"] == 1


def test_a_fence_withdrawing_slices_round_trips_and_a_plain_fence_is_unchanged() -> None:
    withdrawn = (Withdrawn("TopicA", 0, 150), Withdrawn("TopicB", 3, 0))
    fence = _fence(withdrawn=withdrawn)
    raw = fence.to_json()
    assert read_batch_head(raw, key=KEY, object_size=len(raw)) == fence
    assert json.loads(raw)["withdrawn"] == [
        {"from_offset": 150, "queue_id": 0, "topic": "TopicA"},
        {"from_offset": 0, "queue_id": 3, "topic": "TopicB"},
    ]
    assert "withdrawn" not in json.loads(_fence().to_json())
    documented = BatchFence(
        CLUSTER, BROKER, 44, 5, "9a0e@host-2", 1_767_229_200_000,
        withdrawn=(Withdrawn("TopicA", 0, 150),),
    )  # fmt: skip
    doc = (Path(__file__).resolve().parents[3] / "docs" / "format.md").read_text()
    assert documented.to_json().decode() in doc
    assert fence.describe().endswith("withdrawing TopicA/0 from offset 150, TopicB/3 from offset 0")
    for bad, match in (
        (tuple(reversed(withdrawn)), "not sorted by"),
        ((withdrawn[0], withdrawn[0]), "not sorted by"),
        ((Withdrawn("TopicA", 0, -1),), "from_offset is outside"),
        ((Withdrawn("", 0, 1),), "withdrawn /0"),
    ):
        with pytest.raises(CorruptBatchError, match=match):
            _fence(withdrawn=bad)
    _refused(canonical(json.loads(raw) | {"withdrawn": []}), "not a non-empty list")
    extra = json.loads(raw)
    extra["withdrawn"][0]["extra"] = 1
    _refused(canonical(extra), "unknown field 'extra'")


def test_fence_problems_are_refused_naming_the_key() -> None:
    raw = _fence().to_json()
    _refused(raw, "batch fence describes .*, not the key", key=batch_key(CLUSTER, BROKER, 6))
    for doc, match in (
        (json.loads(raw) | {"lease_epoch": 0}, "lease_epoch 0 < 1"),
        (json.loads(raw) | {"writer_id": ""}, "writer_id is empty"),
        (json.loads(raw) | {"extra": 1}, "unknown field 'extra'"),
        (json.loads(raw) | {"fence_version": 0}, "unsupported batch fence_version 0"),
        ({k: v for k, v in json.loads(raw).items() if k != "fence_version"}, "lacks field"),
    ):
        _refused(canonical(doc), match)
    _refused(b"{" + bytes(HEAD_PROBE), "a batch fence is at most")
    newer = canonical(json.loads(raw) | {"fence_version": 2})
    with pytest.raises(UnsupportedFormatError, match="fence_version 2") as caught:
        _head(newer)
    assert KEY in str(caught.value)
    with pytest.raises(CorruptBatchError, match="sequence -1"):
        _fence(sequence=-1)


def test_batch_slice_properties() -> None:
    piece = BatchSlice(
        topic="T",
        queue_id=0,
        start_offset=10,
        end_offset=14,
        cl_base=100,
        cl_end=500,
        commit_log_at=0,
        consume_queue_at=400,
        commit_log_digest="0" * 8,
        consume_queue_digest="1" * 8,
        min_store_timestamp=0,
        max_store_timestamp=0,
    )
    assert (piece.message_count, piece.cq_base) == (4, 200)
    assert (piece.commit_log_size, piece.consume_queue_size) == (400, 80)


# -- compressed batches (format 2) ------------------------------------------------------------

ZSTD = FrameSettings(frame_bytes=512, level=3)


def _compressed(parts: tuple[SlicePart, ...] = PARTS) -> tuple[BatchIndex, bytes]:
    return build_batch(
        cluster=CLUSTER, broker=BROKER, sequence=7, writer_id="w@h", lease_epoch=3,
        created_at_ms=1_767_225_605_000, parts=parts, frames=ZSTD,
    )  # fmt: skip


def test_a_plain_batch_stays_format_1_without_the_compression_fields() -> None:
    index, obj = _build()
    assert index.format_version == BATCH_FORMAT_VERSION and not index.compressed
    assert b"compression" not in obj and b"stored_data" not in obj
    head = _head(obj)
    assert isinstance(head, BatchHead) and head.framed is None and head.size == len(obj)


def test_a_compressed_batch_keeps_uncompressed_coordinates_and_digests_its_stored_bytes() -> None:
    plain_index, plain = _build()
    index, obj = _compressed()
    assert (index.format_version, index.compression) == (BATCH_FORMAT_COMPRESSED, "zstd")
    # Slices, data_size and slice digests are those of the plain batch.
    assert (index.slices, index.data_size) == (plain_index.slices, plain_index.data_size)
    head = _head(obj)
    assert isinstance(head, BatchHead) and head.index == index
    assert head.object_size == len(obj) == head.data_offset + index.stored_data_size
    assert index.stored_data_digest == digest(obj[head.data_offset :], DigestAlgorithm.CRC32C)
    assert head.framed == Framed(len(obj), index.stored_data_digest, at=head.data_offset)
    plain_head = _head(plain)
    assert isinstance(plain_head, BatchHead)
    assert data_section(head, obj) == data_section(plain_head, plain) == plain[-index.data_size :]
    assert decoded_batch(obj, key=KEY)[head.data_offset :] == plain[-index.data_size :]
    assert BatchIndex.from_json(index.to_json(), where=KEY).to_json() == index.to_json()


def test_a_format_1_reader_refuses_format_2_as_unsupported() -> None:
    """What the reader before compression did: ``format_version`` read as one of {1}."""
    index, _ = _compressed()
    fields = parse_object(index.to_json(), error=CorruptBatchError, what="batch index", where=KEY)
    with pytest.raises(
        UnsupportedFormatError, match=r"format_version 2 \(this tieredstore reads 1\)"
    ):
        fields.version("format_version", {BATCH_FORMAT_VERSION}, label="batch ")


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"compression": "lz4"}, "compression 'lz4' is not 'zstd'"),
        ({"stored_data_size": 0}, "stored_data_size 0 <= 0"),
        ({"stored_data_digest": "ABCDEF01"}, "stored_data_digest 'ABCDEF01' is not 8 lowercase"),
    ],
)
def test_invalid_compression_fields_are_refused(change: dict[str, Any], problem: str) -> None:
    index, _ = _compressed()
    doc = json.loads(index.to_json()) | change
    with pytest.raises(CorruptBatchError, match=problem):
        BatchIndex.from_json(canonical(doc), where=KEY)
    plain = _doc() | {"compression": ""}
    with pytest.raises(CorruptBatchError, match="unknown field 'compression'"):
        BatchIndex.from_json(canonical(plain), where=KEY)
    missing = {k: v for k, v in json.loads(index.to_json()).items() if k != "stored_data_digest"}
    with pytest.raises(CorruptBatchError, match="lacks field 'stored_data_digest'"):
        BatchIndex.from_json(canonical(missing), where=KEY)


def test_a_cut_compressed_batch_is_refused_as_a_cut_plain_one() -> None:
    index, obj = _compressed()
    size = index.stored_data_size
    _refused(obj[:-1], rf"stored_data_size {size} bytes != object size")
    _refused(obj + b"\0", rf"stored_data_size {size} bytes != object size")


def test_every_flipped_stored_bit_of_a_compressed_batch_is_found() -> None:
    """The stored digest catches every single-bit flip in the data section, including
    those that decode to the same data (found here by brute force: zstd's frame checksums
    cover the decoded bytes, not a frame header's unused bits)."""
    _, obj = _compressed()
    head = _head(obj)
    assert isinstance(head, BatchHead) and head.framed is not None
    frames_alone = dataclasses.replace(head.framed, stored_digest=None)
    want = decode_stored(obj, frames_alone, where=KEY)
    silent = 0
    for at in range(head.data_offset, len(obj)):
        for bit in range(8):
            flipped = bytearray(obj)
            flipped[at] ^= 1 << bit
            with pytest.raises(CorruptFrameError):
                data_section(head, bytes(flipped))
            with contextlib.suppress(CorruptFrameError):  # what the frames alone say
                silent += decode_stored(bytes(flipped), frames_alone, where=KEY) == want
    assert silent > 0
