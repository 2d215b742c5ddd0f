"""ColdReader: messages and offsets by time, from the cold store alone.

Stores are tiered by the real dispatcher (synthetic and the golden real-broker store),
or, for exact timestamp layouts, segments are built by hand with the real segment
builder. Reads are compared with the hot store and with what the producer wrote.
"""

from __future__ import annotations

import bisect
import builtins
import hashlib
import itertools
import random
import zlib
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.fixtures_sidecar import Tier
from tests.support.broker.make_golden import GOLDEN_MANIFEST, GOLDEN_STORE
from tests.support.broker.manifest import Manifest as GoldenManifest
from tests.support.broker.traffic import Kind
from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.oracle import build_segment
from tests.support.stores.segments import upload
from tieredstore.backends.base import Backend, ObjectInfo
from tieredstore.backends.forwarding import ForwardingBackend
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.cold.layout import QueuePath
from tieredstore.cold.manifest import Manifest
from tieredstore.cold.reader import BoundaryType, ColdMessage, ColdReader
from tieredstore.errors import (
    CorruptRecordError,
    CorruptUnitError,
    ObjectNotFoundError,
    OffsetOutOfRangeError,
)
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE, make_units
from tieredstore.formats.record import MessageRecord, SysFlag
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.hot.synth import SynthSpec, generate_messages, synthesize

LOWER, UPPER = BoundaryType.LOWER, BoundaryType.UPPER


def _same_record(cold: ColdMessage, hot: MessageRecord) -> None:
    """Equal to the hot record in every field but physicalOffset (the cold offset)."""
    assert cold.record == hot.with_offsets(
        queue_offset=hot.queue_offset, physical_offset=cold.cold_commitlog_offset
    )


# -- synthetic stores -----------------------------------------------------------------
SPECS = {
    "plain": SynthSpec(topics=2, queues=2, messages=1500, body_max=2000, compress_over=0, seed=1),
    "zlib-v2-ipv6": SynthSpec(
        topics=2,
        queues=2,
        messages=1500,
        body_max=6000,
        compress_over=1000,
        long_topic=True,
        ipv6=True,
        prepared_every=40,
        seed=2,
    ),
    "json-zlib": SynthSpec(
        topics=2,
        queues=2,
        messages=800,
        body_min=2,
        body_max=9000,
        compress_over=4096,
        seed=4,
        body_kind="json",
    ),
}


@pytest.fixture(params=sorted(SPECS))
async def tiered(
    request: pytest.FixtureRequest, tmp_path: Path, tier: Tier
) -> tuple[SynthSpec, Path, str]:
    spec = SPECS[request.param]
    synthesize(tmp_path / "store", spec)
    reset_memory_stores()
    cold = f"memory://reader-{request.param}"
    await tier(tmp_path / "store", cold, tmp_path / "state")
    return spec, tmp_path / "store", cold


@pytest.mark.slow
async def test_read_returns_exactly_what_the_producer_wrote(
    tiered: tuple[SynthSpec, Path, str],
) -> None:
    spec, store, cold = tiered
    hot = HotStore(store)
    sent = [p for p in generate_messages(spec) if p.has_cq_unit]
    reader = ColdReader(MemoryBackend.from_url(cold), CLUSTER, BROKER)
    read = 0
    for q in hot.queues():
        rng = await reader.range(q.topic, q.queue_id)
        assert (rng.min, rng.commit) == (0, hot.queue_range(q.topic, q.queue_id).max)
        messages = await reader.read(q.topic, q.queue_id, rng.min, rng.count + 10)
        assert [m.queue_offset for m in messages] == list(range(rng.min, rng.commit))
        for m in messages:
            _same_record(m, hot.read_message(q.topic, q.queue_id, m.queue_offset))
        read += len(messages)
        # What the producer wrote, in send order per queue.
        plans = [p for p in sent if (p.topic, p.queue_id) == (q.topic, q.queue_id)]
        assert len(plans) == len(messages)
        for plan, m in zip(plans, messages, strict=True):
            body = plan.body
            if plan.sys_flag & SysFlag.COMPRESSED:
                assert m.to_json()["compression"] == "ZLIB"
                body = zlib.decompress(body)
            # The record keeps its flags; a consumer sees COMPRESSED cleared (the body
            # it gets is inflated), the compression-type bits kept.
            stored = hot.read_message(q.topic, q.queue_id, m.queue_offset).sys_flag
            assert m.record.sys_flag == stored
            assert bool(stored & SysFlag.COMPRESSED) == bool(plan.sys_flag & SysFlag.COMPRESSED)
            assert m.to_json()["sysFlag"] == m.sys_flag == stored & ~int(SysFlag.COMPRESSED)
            assert m.body == body
            assert m.record.properties == plan.properties
            assert m.msg_id == plan.properties["UNIQ_KEY"]
            assert m.record.store_timestamp == plan.store_timestamp
            assert m.record.born_timestamp == plan.born_timestamp
            assert m.record.tags == plan.properties.get("TAGS")
            assert m.record.keys == plan.properties["KEYS"].split(" ")
    assert read == len(sent)


async def test_json_form_of_a_message(tiered: tuple[SynthSpec, Path, str]) -> None:
    _, store, cold = tiered
    reader = ColdReader(MemoryBackend.from_url(cold), CLUSTER, BROKER)
    q = HotStore(store).queues()[0]
    (m,) = await reader.read(q.topic, q.queue_id, 3, 1)
    doc = m.to_json()
    assert (doc["topic"], doc["queueId"], doc["queueOffset"]) == (q.topic, q.queue_id, 3)
    assert doc["coldCommitLogOffset"] == m.cold_commitlog_offset
    # Store host + cold commitlog offset, upper-case hex.
    offset_id = str(doc["offsetMsgId"])
    assert offset_id == offset_id.upper()
    assert offset_id.endswith(f"{m.cold_commitlog_offset:016X}")
    assert doc["bodyEncoding"] == "utf-8"  # synthetic bodies are hex text
    assert str(doc["body"]).encode() == m.body
    binary = ColdMessage(m.queue_offset, m.cold_commitlog_offset, 0, m.record, b"\xff\x00")
    assert binary.body_text() == ("base64", "/wA=")


@pytest.mark.slow
async def test_batches_and_segment_boundaries_do_not_change_a_read(
    tiered: tuple[SynthSpec, Path, str],
) -> None:
    _, store, cold = tiered
    backend = MemoryBackend.from_url(cold)
    whole = ColdReader(backend, CLUSTER, BROKER)
    small = ColdReader(backend, CLUSTER, BROKER, batch_bytes=1, cache_manifests=1)
    q = HotStore(store).queues()[-1]
    rng = await whole.range(q.topic, q.queue_id)
    everything = await whole.read(q.topic, q.queue_id, rng.min, rng.count)
    for start, count in ((0, 1), (5, 200), (rng.commit - 3, 50), (17, rng.count)):
        got = await small.read(q.topic, q.queue_id, start, count)
        assert got == everything[start : start + count]
    assert len(await whole.read(q.topic, q.queue_id, rng.commit - 1, 1000)) == 1


async def test_offsets_outside_cold_are_refused_with_the_range(tmp_path: Path, tier: Tier) -> None:
    spec = SynthSpec(topics=1, queues=1, messages=300, queue_start=100, seed=4)
    synthesize(tmp_path / "store", spec)
    reset_memory_stores()
    await tier(tmp_path / "store", "memory://reader-range", tmp_path / "state")
    reader = ColdReader(MemoryBackend.from_url("memory://reader-range"), CLUSTER, BROKER)
    topic = spec.topic_names()[0]
    rng = await reader.range(topic, 0)
    assert (rng.min, rng.commit) == (100, 400)
    assert len(await reader.read(topic, 0, 100, 1)) == 1
    assert len(await reader.read(topic, 0, 399, 5)) == 1
    for offset in (0, 99, 400, 10_000):
        with pytest.raises(OffsetOutOfRangeError, match=rf"offset {offset} .*\[100, 400\)"):
            await reader.read(topic, 0, offset, 1)
    with pytest.raises(OffsetOutOfRangeError, match="nothing tiered yet"):
        await reader.read(topic, 7, 0, 1)
    with pytest.raises(OffsetOutOfRangeError, match="nothing in cold"):
        await reader.offset_by_time(topic, 7, 0)
    with pytest.raises(ValueError, match="count"):
        await reader.read(topic, 0, 100, 0)


# -- offset by time on hand-built segments ----------------------------------------------
QUEUE = QueuePath(CLUSTER, BROKER, "TimeTopic", 0)


async def put_queue(
    backend: Backend, start: int, timestamps: Sequence[int], splits: Sequence[int]
) -> list[Manifest]:
    """Commit segments holding offsets ``start..`` with these store times, cut at ``splits``."""
    records = [
        MessageRecord.build(
            topic=QUEUE.topic,
            body=f"m{start + i}".encode(),
            queue_id=QUEUE.queue_id,
            queue_offset=start + i,
            physical_offset=10_000 + i * 1000,
            store_timestamp=ts,
        ).encode()
        for i, ts in enumerate(timestamps)
    ]
    cuts = [0, *splits, len(records)]
    manifests, cl_base = [], 0
    for a, b in itertools.pairwise(cuts):
        units = make_units(
            [10_000 + i * 1000 for i in range(a, b)], [len(r) for r in records[a:b]], [0] * (b - a)
        )
        seg = build_segment(
            QUEUE,
            start_offset=start + a,
            cl_base=cl_base,
            records=records[a:b],
            units=units,
            writer_id="test@host",
            lease_epoch=1,
            created_at_ms=0,
        )
        manifests.append(await upload(backend, seg))
        cl_base = seg.manifest.cl_end
    return manifests


# The worked example of tieredstore.cold.reader's docstring: (T, LOWER, UPPER).
TABLE = [(500, 10, 10), (1000, 10, 12), (2000, 13, 12), (3000, 13, 14), (9000, 15, 14)]


@pytest.mark.parametrize("splits", [[], [3], [2], [1, 2, 4]], ids=str)
async def test_the_docstring_table(splits: list[int]) -> None:
    backend = MemoryBackend.from_url(f"memory://table-{splits}")
    await put_queue(backend, 10, [1000, 1000, 1000, 3000, 3000], splits)
    reader = ColdReader(backend, CLUSTER, BROKER)
    for ts, lower, upper in TABLE:
        assert await reader.offset_by_time(QUEUE.topic, 0, ts, LOWER) == lower, ts
        assert await reader.offset_by_time(QUEUE.topic, 0, ts, UPPER) == upper, ts
    assert await reader.offset_by_time(QUEUE.topic, 0, 1000) == 10  # LOWER by default


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
async def test_offset_by_time_agrees_with_a_brute_force_search(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 60)
    stamps: list[int] = []
    t = 1_000
    for _ in range(n):
        t += rng.choice((0, 0, 1, 5, 40))  # runs of equal store times, gaps between
        stamps.append(t)
    splits = sorted(rng.sample(range(1, n), k=min(n - 1, rng.randint(0, 6))))
    start = rng.randint(0, 500)
    backend = MemoryBackend.from_url(f"memory://brute-{seed}")
    await put_queue(backend, start, stamps, splits)
    reader = ColdReader(backend, CLUSTER, BROKER)
    for ts in range(stamps[0] - 2, stamps[-1] + 3):
        lower = start + bisect.bisect_left(stamps, ts)
        upper = start + max(bisect.bisect_right(stamps, ts) - 1, 0)
        assert await reader.offset_by_time(QUEUE.topic, 0, ts, LOWER) == lower, ts
        assert await reader.offset_by_time(QUEUE.topic, 0, ts, UPPER) == upper, ts


async def test_offset_by_time_matches_the_hot_store(tmp_path: Path, tier: Tier) -> None:
    spec = SynthSpec(topics=1, queues=2, messages=800, interval_ms=3, seed=9)
    synthesize(tmp_path / "store", spec)
    reset_memory_stores()
    await tier(tmp_path / "store", "memory://reader-hot", tmp_path / "state")
    hot = HotStore(tmp_path / "store")
    reader = ColdReader(MemoryBackend.from_url("memory://reader-hot"), CLUSTER, BROKER)
    first, last = spec.start_time, spec.start_time + 3 * spec.messages
    for q in hot.queues():
        for ts in range(first - 5, last + 5, 37):
            expected = hot.offset_by_time(q.topic, q.queue_id, ts)
            assert await reader.offset_by_time(q.topic, q.queue_id, ts) == expected


# -- damage, and segments that vanish ---------------------------------------------------
@pytest.mark.parametrize(
    ("byte", "words"),
    [
        (27, "queueOffset field 2, expected 3"),  # last byte of the queueOffset field
        (35, "physicalOffset field"),  # last byte of the (rewritten) physicalOffset
        (15, "queueId field 1, expected 0"),  # last byte of the queueId field
    ],
)
async def test_a_record_that_does_not_match_its_unit_is_named(byte: int, words: str) -> None:
    backend = MemoryBackend.from_url(f"memory://damage-record-{byte}")
    m = (await put_queue(backend, 0, [1, 2, 3, 4], [2]))[1]
    data = bytearray(await backend.read(m.commit_log_key))
    second = len(data) // 2  # records are equal-sized here: the segment's second record
    data[second + byte] ^= 0x01
    await backend.write(m.commit_log_key, bytes(data))
    reader = ColdReader(backend, CLUSTER, BROKER)
    assert len(await reader.read(QUEUE.topic, 0, 2, 1)) == 1
    with pytest.raises(CorruptRecordError) as info:
        await reader.read(QUEUE.topic, 0, 2, 2)
    message = str(info.value)
    assert f"record of queue offset 3: {words}" in message
    assert f"{m.commit_log_key}@{second}" in message


async def test_a_unit_pointing_outside_its_segment_is_named() -> None:
    backend = MemoryBackend.from_url("memory://damage-unit")
    m = (await put_queue(backend, 0, [1, 2, 3], []))[0]
    data = bytearray(await backend.read(m.consume_queue_key))
    data[CQ_UNIT_SIZE + 7] ^= 0x40  # unit of offset 1: its cold commitlog offset
    await backend.write(m.consume_queue_key, bytes(data))
    reader = ColdReader(backend, CLUSTER, BROKER)
    with pytest.raises(CorruptUnitError, match=rf"queue offset 1 .*{m.consume_queue_key}@20"):
        await reader.read(QUEUE.topic, 0, 0, 3)


class ExpiringBackend(ForwardingBackend):
    """Expiry racing a reader: right after a listing, the oldest segment is deleted."""

    def __init__(self, inner: Backend, victim: Manifest) -> None:
        super().__init__(inner)
        self.victim = victim

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        listed = await self.inner.list(prefix)
        for key in (self.victim.key, self.victim.consume_queue_key, self.victim.commit_log_key):
            await self.inner.delete(key)  # the expiry order: manifest first
        return listed


async def test_a_segment_expired_while_reading_is_out_of_range_not_damage() -> None:
    inner = MemoryBackend.from_url("memory://expiring")
    first = (await put_queue(inner, 0, [1, 2, 3, 4], [2]))[0]
    reader = ColdReader(ExpiringBackend(inner, first), CLUSTER, BROKER)
    with pytest.raises(OffsetOutOfRangeError, match="expired while it was being read"):
        await reader.read(QUEUE.topic, 0, 0, 1)
    # A reader that already holds the manifest finds the objects gone: also expiry.
    cached = ColdReader(inner, CLUSTER, BROKER)
    again = (await put_queue(inner, 0, [1, 2, 3, 4], [2]))[0]  # a new upload attempt
    assert len(await cached.read(QUEUE.topic, 0, 0, 1)) == 1
    cached.backend = ExpiringBackend(inner, again)
    with pytest.raises(OffsetOutOfRangeError, match="expired while it was being read"):
        await cached.read(QUEUE.topic, 0, 0, 1)


async def test_an_object_missing_under_its_manifest_is_reported() -> None:
    backend = MemoryBackend.from_url("memory://missing-object")
    m = (await put_queue(backend, 0, [1, 2], []))[0]
    await backend.delete(m.commit_log_key)
    with pytest.raises(ObjectNotFoundError):
        await ColdReader(backend, CLUSTER, BROKER).read(QUEUE.topic, 0, 0, 1)


# -- the golden store, written by a real RocketMQ broker ----------------------------------
@pytest.fixture(scope="module")
def golden() -> GoldenManifest:
    return GoldenManifest.load(GOLDEN_MANIFEST)


async def test_golden_store_reads_back_what_the_producers_sent(
    golden: GoldenManifest, tmp_path: Path, tier: Tier
) -> None:
    reset_memory_stores()
    await tier(GOLDEN_STORE, "memory://golden", tmp_path / "state")
    reader = ColdReader(MemoryBackend.from_url("memory://golden"), CLUSTER, BROKER)
    normal = [m for m in golden.messages if m.kind is Kind.NORMAL]
    assert len(normal) > 600
    store_host = golden.store_host.split(":")
    for sent in normal:
        (got,) = await reader.read(sent.topic, sent.queue_id, sent.queue_offset, 1)
        assert got.msg_id == sent.msg_id
        assert hashlib.sha256(got.body).hexdigest() == sent.body_sha256
        assert len(got.body) == sent.body_length
        assert got.record.tags == sent.tags
        assert tuple(got.record.keys) == sent.keys
        assert dict(sent.properties).items() <= got.record.properties.items()
        assert str(got.record.store_host) == f"127.0.0.1:{store_host[1]}"
        assert golden.window_start_ms <= got.record.store_timestamp <= golden.window_end_ms


@pytest.mark.slow
async def test_golden_store_offsets_by_time_at_every_boundary(
    golden: GoldenManifest, tmp_path: Path, tier: Tier
) -> None:
    reset_memory_stores()
    await tier(GOLDEN_STORE, "memory://golden-time", tmp_path / "state")
    reader = ColdReader(MemoryBackend.from_url("memory://golden-time"), CLUSTER, BROKER)
    hot = HotStore(GOLDEN_STORE)
    checked = 0
    for q in {QueueKey(m.topic, m.queue_id) for m in golden.messages if m.kind is Kind.NORMAL}:
        rng = await reader.range(q.topic, q.queue_id)
        stamps = [
            m.record.store_timestamp
            for m in await reader.read(q.topic, q.queue_id, rng.min, rng.count)
        ]
        assert stamps == sorted(stamps), f"{q}: store times go backwards"
        assert stamps == [
            hot.read_message(q.topic, q.queue_id, o).store_timestamp
            for o in range(rng.min, rng.commit)
        ]
        for ts in sorted({t + d for t in stamps for d in (-1, 0, 1)}):
            lower = rng.min + bisect.bisect_left(stamps, ts)
            upper = rng.min + max(bisect.bisect_right(stamps, ts) - 1, 0)
            assert await reader.offset_by_time(q.topic, q.queue_id, ts, LOWER) == lower
            assert await reader.offset_by_time(q.topic, q.queue_id, ts, UPPER) == upper
            assert lower == hot.offset_by_time(q.topic, q.queue_id, ts)
            checked += 1
    assert checked > 1000


async def test_a_store_written_by_0_1_0_stays_readable_beside_new_segments() -> None:
    """Format-1 manifests (0.1.0: data objects named by base offset alone) and format-2
    ones (named per upload attempt) in one queue: the reader takes every key from its
    manifest, so both read the same, and GC finds nothing to collect."""
    import dataclasses

    from tieredstore.cold.layout import object_name
    from tieredstore.cold.manifest import ObjectRef
    from tieredstore.dispatcher.maintenance.gc import scan_garbage

    backend = MemoryBackend.from_url("memory://mixed-formats")
    new = await put_queue(backend, 0, [1, 2, 3, 4, 5, 6], [2, 4])
    for m in new[:2]:  # rewrite the two oldest segments as 0.1.0 wrote them
        cl, cq = await backend.read(m.commit_log_key), await backend.read(m.consume_queue_key)
        for key in (m.commit_log_key, m.consume_queue_key, m.key):
            await backend.delete(key)
        old = dataclasses.replace(
            m,
            format_version=1,
            commit_log=ObjectRef(object_name(m.cl_base), m.commit_log.size, m.commit_log.digest),
            consume_queue=ObjectRef(
                object_name(m.cq_base), m.consume_queue.size, m.consume_queue.digest
            ),
        )
        assert old.attempt == "" and old.commit_log_key.endswith(object_name(m.cl_base))
        await backend.write(old.commit_log_key, cl)
        await backend.write(old.consume_queue_key, cq)
        await backend.write(old.key, old.to_json())
    got = await ColdReader(backend, CLUSTER, BROKER).read(QUEUE.topic, 0, 0, 6)
    assert [m.body for m in got] == [f"m{i}".encode() for i in range(6)]
    report = await scan_garbage(backend, cluster=CLUSTER, broker=BROKER, now_ms=10**13, grace_s=0)
    assert report.garbage == () and report.manifests == 3
