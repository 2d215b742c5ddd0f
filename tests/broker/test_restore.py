"""Disaster recovery, proven by a real broker: lose a broker, restore it from cold, boot a
stock RocketMQ broker on the restored store and consume with the stock Java client.

One module-scoped source broker (:func:`source`) receives the traffic and is tiered,
then stopped and its store deleted. Each test restores into a fresh directory and boots
a broker on it (same name server, same broker name): the full restore (every message at
its original offset, key lookups, the consumer group resuming, new messages continuing
the offsets, the sidecar tiering on), a subset (one topic, one time window) and a topic
whose oldest cold segments expired (its queues start above offset 0).
"""

from __future__ import annotations

import asyncio
import shutil
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker.restore_scenario import (
    BROKER,
    CLUSTER,
    ORDERS,
    PAYMENTS,
    TOPICS,
    Dump,
    Source,
    consume_group,
    dump,
    plan_batch,
    produce,
    query_keys,
    queue_counts,
    wait_dispatched,
)
from tests.support.broker.rocketmq import (
    BrokerSettings,
    LocalCluster,
    missing_tools,
    prepare_toolchain,
)
from tests.support.broker.scenario import now_ms, wait_for_clean_stop
from tests.support.broker.traffic import ExpectedMessage
from tieredstore.backends import open_backend
from tieredstore.cli.main import main
from tieredstore.cold.history import EntryKind, load_history, span_bytes
from tieredstore.cold.manifest import COMPRESSED_VERSION, FORMAT_VERSION
from tieredstore.cold.reader import ColdReader
from tieredstore.cold.segment import verify_segment
from tieredstore.formats.msgid import decode_offset_msg_id
from tieredstore.hot.store import HotStore

#: The first bytes of a zstd frame (RFC 8878: magic number 0xFD2FB528, little-endian).
ZSTD_MAGIC = bytes.fromhex("28b52ffd")


def tieredstore(*args: str, batching: bool = False, compression: str = "zstd") -> int:
    """Run a ``tieredstore`` command in this process; return its exit code
    (``batching``: ``tiering.batching`` on, else off: per-queue segments, which the
    expiry test expires; ``compression``: ``cold.compression``, in frames of 16 KiB so
    that a segment has several; from the environment as a user sets them)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TIEREDSTORE_TIERING_BATCHING", "true" if batching else "false")
        env.setenv("TIEREDSTORE_COLD_COMPRESSION", compression)
        env.setenv("TIEREDSTORE_COLD_FRAME_SIZE", "16K")
        return main(list(args))


pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    missing = missing_tools()
    if missing:
        pytest.skip(f"real-broker tests need {', '.join(missing)} on PATH")
    settings = BrokerSettings(cluster=CLUSTER, broker_name=BROKER)
    cluster = LocalCluster(prepare_toolchain(), tmp_path_factory.mktemp("restore"), settings)
    work = tmp_path_factory.mktemp("restore-cold")
    with cluster:
        cluster.create_topics(dict(TOPICS))
        batch1 = produce(cluster, plan_batch(1, 0, 450), "batch1")
        wait_dispatched(cluster, queue_counts(batch1))
        orders1 = {(m.queue_id, m.queue_offset) for m in batch1 if m.topic == ORDERS}
        consumed = consume_group(cluster, ORDERS, len(orders1), "group-before")
        assert consumed == orders1
        src = Source(cluster, work / "cold", work / "state", tuple(batch1), (), frozenset(), 0, 0)
        batched = work / "cold-batch"
        for cold in (None, batched):  # segment 1 (and its batch object), uncompressed
            args = src.sidecar_args(cluster.store_root, "--guard", "none", cold=cold)
            assert tieredstore(*args, batching=cold is not None, compression="none") == 0
        start = now_ms()
        batch2 = produce(cluster, plan_batch(2, 450, 240), "batch2")
        end = now_ms()
        wait_dispatched(cluster, queue_counts(batch1 + batch2))
        wait_for_clean_stop(cluster)  # the broker writes config/ as it stops
        # Segment 2 (and its batch object) compressed: the cold copy holds both kinds, as
        # a store does once compression is turned on; config copied.
        for cold in (None, batched):
            args = src.sidecar_args(cluster.store_root, cold=cold)
            assert tieredstore(*args, batching=cold is not None) == 0
        shutil.rmtree(cluster.store_root)  # the broker is lost
        yield Source(
            cluster,
            src.cold,
            src.state,
            tuple(batch1),
            tuple(batch2),
            frozenset(consumed),
            start,
            end,
            batched,
        )


def _assert_served(d: Dump, expected: list[ExpectedMessage], *, exact: bool = True) -> None:
    """Every message at its original queue offset with its body, tags, keys, properties
    (``exact``: and no other message)."""
    if exact:
        assert len(d.messages) == len(expected)
    for m in expected:
        got = d.messages[(m.topic, m.queue_id, m.queue_offset)]
        assert got.msg_id == m.msg_id
        assert (got.body_sha256, got.body_length) == (m.body_sha256, m.body_length)
        assert got.tags == m.tags
        assert got.keys == " ".join(m.keys)
        assert {k: got.properties.get(k) for k in m.properties} == dict(m.properties)


def _restored(
    source: Source, tmp_path_factory: pytest.TempPathFactory, name: str, *extra: str
) -> Path:
    out = tmp_path_factory.mktemp(name) / "store"
    assert tieredstore(*source.restore_args(out, *extra)) == 0
    assert tieredstore(*source.restore_args(out, "--check")) == 0
    return out


@pytest.fixture(scope="module")
def full_restore(source: Source, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _restored(source, tmp_path_factory, "restored-full")


def test_a_restore_through_batch_objects_is_the_restore_through_segments(
    source: Source, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The same broker tiered with batching on (its two runs' segments are batch slices)
    restores to the very same files as through per-queue segments: every byte the
    broker tests below serve from the segment restore is what the batch restore holds.
    Both stop at batch 2's end (a later test tiers more into the segment copy)."""
    assert source.batched is not None
    until = ("--until", str(source.batch2_end_ms))
    trees = []
    for name, cold in (("via-segments", None), ("via-batches", source.batched)):
        out = tmp_path_factory.mktemp(name) / "store"
        assert tieredstore(*source.restore_args(out, *until, cold=cold)) == 0
        assert tieredstore(*source.restore_args(out, "--check", cold=cold)) == 0
        trees.append({p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()})
    segments, batches = trees
    assert sorted(segments) == sorted(batches)
    own = Path("tieredstore-restore.json")  # the restore's record: names its cold store
    assert [f for f in segments if segments[f] != batches[f]] == [own]
    assert any("commitlog" in str(f) for f in segments)

    async def kinds() -> set[EntryKind]:
        async with open_backend(str(source.batched)) as backend:
            history = await load_history(backend, CLUSTER, BROKER)
            return {link.kind for link in history.links()}

    assert asyncio.run(kinds()) == {EntryKind.SLICE}


def test_the_cold_copy_holds_plain_then_compressed_segments_that_verify(source: Source) -> None:
    """Batch 1 was tiered uncompressed (format 2), batch 2 compressed (format 3: its
    COMMIT_LOG object starts with the zstd frame magic); every segment's digests check,
    and the restores below read the copy as one."""

    async def formats() -> dict[int, set[bytes]]:
        out: dict[int, set[bytes]] = defaultdict(set)
        async with open_backend(str(source.cold)) as backend:
            for link in (await load_history(backend, CLUSTER, BROKER)).links():
                assert link.manifest is not None
                cl = link.commit_log
                verify_segment(link, await span_bytes(backend, cl),
                               await span_bytes(backend, link.consume_queue))  # fmt: skip
                magic = await backend.read_exact(cl.key, 0, 4)
                out[link.manifest.format_version].add(magic)
        return out

    found = asyncio.run(formats())
    assert sorted(found) == [FORMAT_VERSION, COMPRESSED_VERSION]
    assert found[COMPRESSED_VERSION] == {ZSTD_MAGIC}
    assert ZSTD_MAGIC not in found[FORMAT_VERSION]


def test_full_restore_serves_every_message(source: Source, full_restore: Path) -> None:
    cluster = source.cluster
    counts = queue_counts(source.messages)
    cluster.start_broker_on(full_restore)
    try:
        d = dump(cluster, list(TOPICS), "dump-full")
        assert d.ranges == {q: (0, n) for q, n in counts.items()}
        _assert_served(d, list(source.messages))
        _assert_keys_found(cluster, source.messages)
        # The group resumes at its backed-up offset: exactly batch 2 is delivered.
        orders2 = {(m.queue_id, m.queue_offset) for m in source.batch2 if m.topic == ORDERS}
        assert consume_group(cluster, ORDERS, len(orders2), "group-after") == orders2
        batch3 = produce(cluster, plan_batch(3, 690, 30), "batch3")
    finally:
        cluster.stop_broker()
    _assert_offsets_continue(batch3, counts)
    _assert_offset_ids_follow_positions(full_restore, d)
    # The sidecar tiers the restored broker on into the same cold prefix.
    assert tieredstore(*source.sidecar_args(full_restore, "--guard", "none")) == 0
    _assert_cold_ends(source, queue_counts(list(source.messages) + batch3))


def _assert_keys_found(cluster: LocalCluster, messages: tuple[ExpectedMessage, ...]) -> None:
    by_topic: dict[str, dict[str, ExpectedMessage]] = defaultdict(dict)
    for m in messages[::37]:
        for key in (*m.keys, f"uniq:{m.msg_id}"):
            by_topic[m.topic][key] = m
    for topic, wanted in by_topic.items():
        found = query_keys(cluster, topic, list(wanted), f"keys-{topic}")
        for key, m in wanted.items():
            assert (m.topic, m.queue_id, m.queue_offset) in found[key], key


def _assert_offsets_continue(
    batch3: list[ExpectedMessage], counts: dict[tuple[str, int], int]
) -> None:
    per_queue: dict[tuple[str, int], list[int]] = defaultdict(list)
    for m in batch3:
        per_queue[(m.topic, m.queue_id)].append(m.queue_offset)
    for q, offsets in per_queue.items():
        assert sorted(offsets) == list(range(counts[q], counts[q] + len(offsets))), q


def _assert_offset_ids_follow_positions(store: Path, d: Dump) -> None:
    """offsetMsgId = store host + the record's new commitlog position."""
    hot = HotStore(store)
    for (topic, qid, offset), got in list(d.messages.items())[::25]:
        _, _, physical = decode_offset_msg_id(got.offset_msg_id)
        unit = hot.read_units(topic, qid, offset, offset + 1)[0]
        assert physical == int(unit["commitlog_offset"])


def _assert_cold_ends(source: Source, counts: dict[tuple[str, int], int]) -> None:
    import asyncio

    async def ends() -> dict[tuple[str, int], int]:
        async with open_backend(str(source.cold)) as backend:
            reader = ColdReader(backend, CLUSTER, BROKER)
            return {q: (await reader.range(*q)).commit for q in counts}

    assert asyncio.run(ends()) == counts


def test_subset_restore_one_topic_one_window(
    source: Source, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = _restored(
        source,
        tmp_path_factory,
        "restored-subset",
        "--topics",
        PAYMENTS,
        "--since",
        str(source.batch2_start_ms),
        "--until",
        str(source.batch2_end_ms),
    )
    first = queue_counts(source.batch1, PAYMENTS)
    both = queue_counts(source.messages, PAYMENTS)
    cluster = source.cluster
    cluster.start_broker_on(out)
    try:
        d = dump(cluster, [PAYMENTS], "dump-subset")
    finally:
        cluster.stop_broker()
    # Queues start where batch 2 started: above 0, and the broker says so.
    assert d.ranges == {q: (first[q], both[q]) for q in both}
    _assert_served(d, [m for m in source.batch2 if m.topic == PAYMENTS])


def test_restore_after_expiry_starts_queues_above_zero(
    source: Source, full_restore: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    first_end = max(_segment_end_times(source))
    # Retention 1 h, evaluated just past the oldest segments' newest message + 1 h:
    # only each queue's first segment (batch 1) has expired. The sidecar's hot store is
    # the restored broker's now.
    assert (
        tieredstore(
            "expire",
            "--store",
            str(full_restore),
            "--cold",
            str(source.cold),
            "--state-dir",
            str(source.state),
            "--cluster",
            CLUSTER,
            "--broker",
            BROKER,
            "--topic",
            ORDERS,
            "--retention",
            "1h",
            "--now",
            str(first_end + 3_600_000 + 1),
        )
        == 0
    )

    async def cold_ranges() -> dict[tuple[str, int], tuple[int, int]]:
        async with open_backend(str(source.cold)) as backend:
            reader = ColdReader(backend, CLUSTER, BROKER)
            rngs = {q: await reader.range(*q) for q in queue_counts(source.messages, ORDERS)}
            return {q: (r.min, r.commit) for q, r in rngs.items()}

    cold = asyncio.run(cold_ranges())
    first = queue_counts(source.batch1, ORDERS)
    assert {q: lo for q, (lo, _) in cold.items()} == dict(first)
    out = _restored(source, tmp_path_factory, "restored-expired", "--topics", ORDERS)
    cluster = source.cluster
    cluster.start_broker_on(out)
    try:
        d = dump(cluster, [ORDERS], "dump-expired")
    finally:
        cluster.stop_broker()
    assert d.ranges == cold
    assert all(lo > 0 for lo, _ in d.ranges.values())
    # Batch 2 is all there (batch 3, if the full-restore test tiered it, follows it).
    _assert_served(d, [m for m in source.batch2 if m.topic == ORDERS], exact=False)
    assert len(d.messages) == sum(hi - lo for lo, hi in d.ranges.values())


def _segment_end_times(source: Source) -> list[int]:
    """The newest store time of each ORDERS queue's first segment."""
    import asyncio

    from tieredstore.cold.layout import QueuePath, SegmentKind, kind_prefix, parse_object_key
    from tieredstore.cold.manifest import read_manifest

    async def read() -> list[int]:
        out = []
        async with open_backend(str(source.cold)) as backend:
            for topic, qid in queue_counts(source.messages, ORDERS):
                prefix = kind_prefix(QueuePath(CLUSTER, BROKER, topic, qid), SegmentKind.MANIFEST)
                keys = [i.key for i in await backend.list(prefix + "/")]
                first = min(keys, key=lambda k: parse_object_key(k).base_offset)
                out.append(read_manifest(await backend.read(first), first).max_store_timestamp)
        return out

    return asyncio.run(read())
