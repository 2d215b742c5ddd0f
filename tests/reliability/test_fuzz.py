"""Hostile input: every parser answers garbage with our own error, naming where.

Each property feeds random bytes and single-byte/length mutations of valid inputs to one
parser. The parser may accept (a mutation can be valid) or raise one of our errors whose
message names the file or object (and the byte offset for binary formats); anything else
— an unhandled exception or a hang (pytest-timeout bounds every test) — fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tieredstore.cold.layout import QueuePath, SegmentKind, object_key
from tieredstore.cold.manifest import read_manifest
from tieredstore.cold.segment import parse_cq_object, verify_segment
from tieredstore.dispatcher.lease.lease import LeaseRecord
from tieredstore.errors import TieredStoreError
from tieredstore.formats.checkpoint import Checkpoint
from tieredstore.formats.consumequeue import decode_units
from tieredstore.formats.record import MessageRecord, decode_record, probe_record
from tieredstore.formats.topics import TopicConfig, decode_topics, encode_topics
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

RECORD = MessageRecord.build(
    topic="FuzzTopic", body=b"fuzz body" * 20, queue_id=1, queue_offset=7,
    physical_offset=4096, store_timestamp=1_700_000_000_000, properties={"TAGS": "a", "KEYS": "k"},
).encode()  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn, valid: bytes) -> bytes:
    """A valid input with some bytes flipped, truncated or extended."""
    data = bytearray(valid)
    for _ in range(draw(st.integers(0, 4))):
        if data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(data)))
    tail = draw(st.binary(max_size=16))
    return bytes(data[:cut]) + tail if draw(st.booleans()) else bytes(data)


def _names_where(exc: TieredStoreError, where: str) -> None:
    assert exc.where is not None
    assert where in exc.where
    assert "\n" not in str(exc)


@FUZZ
@given(st.one_of(st.binary(max_size=400), mutated(RECORD)), st.integers(0, 40))
def test_record_decoder(data: bytes, pos: int) -> None:
    pos = min(pos, len(data))
    try:
        decode_record(data, pos, where="cl")
    except TieredStoreError as exc:
        _names_where(exc, f"cl@{pos}")
    probe_record(data, pos, where="cl")  # a scan never raises on bad bytes


@FUZZ
@given(st.one_of(st.binary(max_size=200), mutated(bytes(range(40)) * 2)))
def test_consume_queue_decoder(data: bytes) -> None:
    try:
        units = decode_units(data, where="cq")
    except TieredStoreError as exc:
        _names_where(exc, "cq@")
    else:
        assert len(units) * 20 == len(data)


@FUZZ
@given(st.one_of(st.binary(max_size=80), mutated(Checkpoint(1, 2, 3, 4, 5).encode())))
def test_checkpoint_decoder(data: bytes) -> None:
    try:
        Checkpoint.decode(data, where="checkpoint")
    except TieredStoreError as exc:
        _names_where(exc, "checkpoint@")


TOPICS = encode_topics({"A": TopicConfig("A", 4, 4), "B": TopicConfig("B", 1, 1)})


@FUZZ
@given(st.one_of(st.binary(max_size=200), mutated(TOPICS)))
def test_topics_decoder(data: bytes) -> None:
    try:
        decode_topics(data, where="topics.json")
    except TieredStoreError as exc:
        _names_where(exc, "topics.json")


QUEUE = QueuePath("FuzzCluster", "broker-a", "FuzzTopic", 0)
MANIFEST_KEY = object_key(QUEUE, SegmentKind.MANIFEST, 0)


@pytest.fixture(scope="module")
def segment(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes, bytes]:
    from tests.support.stores.oracle import build_segment

    root = tmp_path_factory.mktemp("fuzz") / "store"
    synthesize(root, SynthSpec(topics=1, queues=1, messages=20, topic_prefix="FuzzTopic"))
    hot = HotStore(root)
    units = hot.read_units("FuzzTopic0", 0, 0, 20)
    records = hot.read_records_bytes(units["commitlog_offset"], units["size"])
    seg = build_segment(
        QueuePath("FuzzCluster", "broker-a", "FuzzTopic0", 0), start_offset=0, cl_base=0,
        records=records, units=units, writer_id="w", lease_epoch=1, created_at_ms=1,
    )  # fmt: skip
    return seg.manifest.to_json(), seg.commit_log, seg.consume_queue


@FUZZ
@given(data=st.data())
def test_manifest_parser(segment: tuple[bytes, bytes, bytes], data: st.DataObject) -> None:
    manifest_json = segment[0]
    key = object_key(QueuePath("FuzzCluster", "broker-a", "FuzzTopic0", 0), SegmentKind.MANIFEST, 0)
    raw = data.draw(st.one_of(st.binary(max_size=300), mutated(manifest_json)))
    try:
        read_manifest(raw, key)
    except TieredStoreError as exc:
        _names_where(exc, key)


@pytest.mark.slow
@FUZZ
@given(data=st.data())
def test_segment_objects(segment: tuple[bytes, bytes, bytes], data: st.DataObject) -> None:
    """Damaged COMMIT_LOG / CONSUME_QUEUE objects never pass and never crash."""
    key = object_key(QueuePath("FuzzCluster", "broker-a", "FuzzTopic0", 0), SegmentKind.MANIFEST, 0)
    manifest = read_manifest(segment[0], key)
    cl = data.draw(mutated(segment[1]))
    cq = data.draw(mutated(segment[2]))
    try:
        verify_segment(manifest, cl, cq)
    except TieredStoreError as exc:
        assert exc.where is not None
        assert "COMMIT_LOG" in exc.where or "CONSUME_QUEUE" in exc.where
    else:
        assert (cl, cq) == (segment[1], segment[2])  # digests: only the original passes
    try:
        parse_cq_object(cq, where="cq-object")
    except TieredStoreError as exc:
        _names_where(exc, "cq-object@")


@FUZZ
@given(st.one_of(st.binary(max_size=120), mutated(LeaseRecord("o@h", 2, 10, 5).to_json())))
def test_lease_parser(data: bytes) -> None:
    try:
        LeaseRecord.from_json(data, where="_lease.json")
    except TieredStoreError as exc:
        _names_where(exc, "_lease.json")


def test_hot_store_files_full_of_garbage(tmp_path: Path) -> None:
    """A store whose files are random bytes: every reader call fails with our error."""
    import random

    rng = random.Random(5)
    root = tmp_path / "store"
    synthesize(root, SynthSpec(topics=1, queues=1, messages=50))
    for path in root.rglob("*"):
        if path.is_file() and path.name != "synth.json":
            path.write_bytes(rng.randbytes(path.stat().st_size))
    hot = HotStore(root)
    for call in (
        hot.checkpoint,
        hot.topics,
        lambda: hot.queue_range("SynthTopic0", 0),
        lambda: hot.read_message("SynthTopic0", 0, 0),
    ):
        try:
            call()
        except TieredStoreError as exc:
            assert exc.where is not None
            assert str(root) in exc.where or "commitlog" in exc.where or "SynthTopic0" in exc.where
    assert list(hot.scan_commitlog()) == []  # nothing parses as a record
    assert json.loads((root / "synth.json").read_text())
