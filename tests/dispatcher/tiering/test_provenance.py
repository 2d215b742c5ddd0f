"""The sidecar writes what must be in cold into cold: the tiering record (its topic rules,
since when), an init record per queue before its first manifest, and a retention record
before retention deletes a head (tieredstore.cold.provenance,
tieredstore.dispatcher.tiering.provenance_writer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.dispatcher.conftest import TierExpiring
from tests.support.sidecar.settings import BROKER, CLUSTER

# SPEC: the store the `store` fixture (tests/dispatcher/conftest.py) writes.
from tests.support.stores.retention import END, SPEC, H, retention_settings
from tieredstore.backends.base import Backend
from tieredstore.backends.memory import MemoryBackend
from tieredstore.backends.posix import PosixBackend
from tieredstore.canonical_json import canonical
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.cold.layout import (
    QueuePath,
    broker_prefix,
    lease_key,
    retention_key,
    stop_key,
    tiering_key,
)
from tieredstore.cold.provenance import (
    QueueInit,
    StopMark,
    earliest_inits,
    publish_tiering_rules,
    read_queue_record,
    read_queue_records,
    read_tiering_record,
)
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.dispatcher.maintenance.gc import delete_garbage, scan_garbage
from tieredstore.dispatcher.maintenance.retention import DeletionStep
from tieredstore.dispatcher.tiering.provenance_writer import ProvenanceWriter
from tieredstore.dispatcher.topic_filter import TopicFilter
from tieredstore.errors import CorruptProvenanceError
from tieredstore.hot.store import HotStore
from tieredstore.metadata.reconcile import rebuild
from tieredstore.metadata.rows import QueueRow, QueueState, SegmentRow
from tieredstore.topic_rules import TopicRules


def _parse_init(data: bytes, key: str) -> QueueInit:
    rec = read_queue_record(data, key, broker_prefix(CLUSTER, BROKER) + "/")
    assert isinstance(rec, QueueInit)
    return rec


async def _inits(backend: Backend) -> dict[tuple[str, int], QueueInit]:
    """Every queue's init record in force, read as the verifier and rebuild do (either
    layout)."""
    prefix = broker_prefix(CLUSTER, BROKER) + "/"
    found: list[QueueInit] = []
    for info in await backend.list(prefix + "_queues/"):
        recs = read_queue_records(await backend.read(info.key), info.key, prefix)
        found += [r for r in recs if isinstance(r, QueueInit)]
    return {(r.topic, r.queue_id): r for r in earliest_inits(found)}


async def test_the_sidecar_records_its_rules_and_every_queues_init(
    store: Path, tmp_path: Path, tier_expiring: TierExpiring
) -> None:
    clock = VirtualClock(start_ms=END)
    await tier_expiring(tmp_path, clock)
    cold = tmp_path / "cold"
    key = tiering_key(CLUSTER, BROKER)
    record = read_tiering_record((cold / key).read_bytes(), key)
    assert [e.rules for e in record.history] == [
        TopicFilter.of(retention_settings(tmp_path).tiering).rules()
    ]
    assert record.current.since_ms == END and record.current.lease_epoch == 1
    hot = HotStore(store)
    inits = await _inits(PosixBackend(cold))
    # One object holds them all (the first tick initialised every queue).
    assert len(list((cold / broker_prefix(CLUSTER, BROKER) / "_queues").rglob("*.json"))) == 1
    assert set(inits) == {(q.topic, q.queue_id) for q in hot.queues()}
    for q in hot.queues():
        init = inits[(q.topic, q.queue_id)]
        assert (init.init_offset, init.policy) == (hot.queue_range(q.topic, q.queue_id).min,
                                                   "earliest")  # fmt: skip


async def test_a_reload_with_other_rules_adds_an_entry_since_then(
    store: Path, tmp_path: Path, tier_expiring: TierExpiring
) -> None:
    clock = VirtualClock(start_ms=END)
    await tier_expiring(tmp_path, clock)
    later = END + 60_000
    clock.set_ms(later)
    settings = retention_settings(tmp_path, tiering__exclude_topics=["SynthTopic1"])
    async with open_runtime(settings, clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.tick()
    key = tiering_key(CLUSTER, BROKER)
    record = read_tiering_record((tmp_path / "cold" / key).read_bytes(), key)
    assert [(e.since_ms, e.rules.exclude) for e in record.history] == [
        (END, ()), (later, ("SynthTopic1",))
    ]  # fmt: skip
    assert record.decide("SynthTopic1").tiered is False
    assert "exclude_topics 'SynthTopic1'" in record.decide("SynthTopic1").rule


async def test_excluding_a_tiered_topic_records_where_each_queue_stopped(
    store: Path, tmp_path: Path, tier_expiring: TierExpiring
) -> None:
    clock = VirtualClock(start_ms=END)
    await tier_expiring(tmp_path, clock)
    cold = tmp_path / "cold"
    later = END + 60_000
    settings = retention_settings(tmp_path, tiering__exclude_topics=["SynthTopic1"])
    for now in (later, later + 1000):  # a restart under the same rules keeps the records
        clock.set_ms(now)
        async with open_runtime(settings, clock=clock) as rt:
            await rt.dispatcher.start(wait_for_lease=False)
            await rt.dispatcher.tick()
            rows = rt.catalogue.queues.all()
    prefix = broker_prefix(CLUSTER, BROKER) + "/"
    stopped = sorted(p.relative_to(cold).as_posix() for p in cold.rglob("STOPPED/*.json"))
    expected = []
    for row in rows:
        if row.topic != "SynthTopic1":
            continue
        mark = read_queue_record(
            (
                cold / stop_key(QueuePath(CLUSTER, BROKER, row.topic, row.queue_id), later)
            ).read_bytes(),
            stop_key(QueuePath(CLUSTER, BROKER, row.topic, row.queue_id), later),
            prefix,
        )
        assert isinstance(mark, StopMark)
        assert (mark.stop_offset, mark.excluded_since_ms, mark.stopped_at_ms) == (
            row.cold_commit, later, later,
        )  # fmt: skip
        assert row.cold_commit > row.init_offset  # it was tiered: its history is owed
        expected.append(mark.key)
    assert stopped == sorted(expected) and len(expected) == SPEC.queues


async def test_retention_records_the_new_first_offset_before_the_manifest_goes(
    store: Path, tmp_path: Path, tier_expiring: TierExpiring
) -> None:
    clock = VirtualClock(start_ms=END)
    await tier_expiring(tmp_path, clock)
    cold = tmp_path / "cold"
    seen: list[tuple[DeletionStep, bool, bool]] = []

    def observe(seg: SegmentRow, step: DeletionStep) -> None:
        q = QueuePath(CLUSTER, BROKER, seg.topic, seg.queue_id)
        mark = cold / retention_key(q, seg.end_offset)
        seen.append((step, mark.exists(), (cold / seg.manifest.key).exists()))

    clock.set_ms(END + int(2 * H * 1000))
    async with open_runtime(
        retention_settings(tmp_path), clock=clock, on_deletion_step=observe
    ) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        assert (await rt.retention.run_pass()).expired
    # The record is there from the first deletion on; never a manifest gone without it.
    assert seen[:2] == [(DeletionStep.MARKED, False, True), (DeletionStep.MANIFEST, True, False)]
    assert all(mark for step, mark, _ in seen if step is not DeletionStep.MARKED)


async def _writer(hot: HotStore, clock: VirtualClock) -> tuple[ProvenanceWriter, MemoryBackend]:
    backend = MemoryBackend.from_url("memory://provenance-" + str(id(clock)))
    lease = Lease(backend, lease_key(CLUSTER, BROKER), clock)
    await lease.acquire(wait=False)
    return ProvenanceWriter(backend, lease, hot, cluster=CLUSTER, broker=BROKER), backend


def _row(topic: str, queue_id: int, init: int, cold_min: int, commit: int) -> QueueRow:
    return QueueRow(topic, queue_id, init, cold_min, commit, 0, 0, QueueState.ACTIVE, 0)


async def test_inits_are_written_only_where_hot_proves_the_start(store: Path) -> None:
    hot = HotStore(store)
    writer, backend = await _writer(hot, VirtualClock(start_ms=END))
    lo = hot.queue_range("SynthTopic0", 0).min
    rows = [
        _row("SynthTopic0", 0, lo, lo, lo),  # new: nothing tiered yet
        _row("SynthTopic1", 0, 0, 0, 40),  # tiered by an older sidecar, head intact
        _row("SynthTopic1", 1, 0, 30, 40),  # its head removed: retention left no record
    ]
    await writer.ensure_inits(rows, "latest")

    inits = await _inits(backend)
    first = inits[("SynthTopic0", 0)]
    assert (first.init_offset, first.policy) == (lo, "latest")
    adopted = inits[("SynthTopic1", 0)]
    assert (adopted.init_offset, adopted.policy) == (0, "adopted")
    assert ("SynthTopic1", 1) not in inits
    # A later process's call never writes another record for a queue that has one.
    writer._settled = None  # a restart: nothing known in memory
    objects = await backend.list(broker_prefix(CLUSTER, BROKER) + "/_queues/")
    await writer.ensure_inits([_row("SynthTopic0", 0, lo + 5, lo + 5, lo + 5)], "earliest")
    assert await backend.list(broker_prefix(CLUSTER, BROKER) + "/_queues/") == objects
    assert (await _inits(backend))[("SynthTopic0", 0)] == first


async def test_an_offset_above_hot_min_is_never_labelled_earliest(store: Path) -> None:
    # A row initialised under another policy (say latest), nothing tiered yet, its init
    # record written under earliest: the verifier holds an earliest init to hot min.
    hot = HotStore(store)
    writer, backend = await _writer(hot, VirtualClock(start_ms=END))
    lo = hot.queue_range("SynthTopic0", 0).min
    await writer.ensure_inits(
        [_row("SynthTopic0", 0, lo, lo, lo), _row("SynthTopic0", 1, lo + 7, lo + 7, lo + 7)],
        "earliest",
    )
    inits = await _inits(backend)
    for qid, expected in ((0, (lo, "earliest")), (1, (lo + 7, "adopted"))):
        init = inits[("SynthTopic0", qid)]
        assert (init.init_offset, init.policy) == expected


def _records(cold: Path) -> set[str]:
    prefix = cold / broker_prefix(CLUSTER, BROKER)
    found = set((prefix / "_queues").rglob("*.json")) | {prefix / "_tiering.json"}
    return {p.relative_to(cold).as_posix() for p in found}


async def test_gc_never_collects_the_records_and_rebuild_starts_queues_from_them(
    store: Path, tmp_path: Path, tier_expiring: TierExpiring
) -> None:
    clock = VirtualClock(start_ms=END)
    await tier_expiring(tmp_path, clock)
    clock.set_ms(END + int(2 * H * 1000))
    async with open_runtime(retention_settings(tmp_path), clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        assert (await rt.retention.run_pass()).expired
        records = _records(tmp_path / "cold")
        assert any("/RETENTION/" in k for k in records)
        report = await scan_garbage(rt.backend, cluster=CLUSTER, broker=BROKER,
                                    now_ms=clock.now_ms() + 10**9, grace_s=0)  # fmt: skip
        assert not report.garbage and not report.findings
        await delete_garbage(report, backend=rt.backend, lease=rt.dispatcher.lease)
        assert _records(tmp_path / "cold") == records
        expected = {(q.topic, q.queue_id): q.cold_min for q in rt.catalogue.queues.all()}
        # A catalogue rebuilt from the bucket starts each queue where its records say
        # (the retention watermark), so every remaining manifest is adopted.
        rebuilt = await rebuild(rt.backend, tmp_path / "state2", cluster=CLUSTER, broker=BROKER)
    assert rebuilt.clean, rebuilt
    assert {(q.topic, q.queue_id): q.init_offset for q in rebuilt.created} == expected


# -- the init policy on record (issue 46) ------------------------------------------------


async def test_the_record_says_the_init_policy_and_since_when_it_changed(
    store: Path, tmp_path: Path, tier_expiring: TierExpiring
) -> None:
    clock = VirtualClock(start_ms=END)
    await tier_expiring(tmp_path, clock)  # the retention settings: earliest
    key = tiering_key(CLUSTER, BROKER)
    record = read_tiering_record((tmp_path / "cold" / key).read_bytes(), key)
    assert [e.init_policy for e in record.history] == ["earliest"]
    assert record.always_earliest
    later = END + 60_000
    clock.set_ms(later)
    settings = retention_settings(tmp_path, tiering__init_policy="latest")
    async with open_runtime(settings, clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.tick()
    record = read_tiering_record((tmp_path / "cold" / key).read_bytes(), key)
    assert [(e.since_ms, e.init_policy) for e in record.history] == [
        (END, "earliest"), (later, "latest")
    ]  # fmt: skip
    assert not record.always_earliest  # a queue first seen since then began at hot max


def _v1(since_ms: int) -> bytes:
    entry = {"lease_epoch": 1, "rules": TopicRules().to_doc(), "since_ms": since_ms,
             "writer_id": "old@h"}  # fmt: skip
    doc = {"broker": BROKER, "cluster": CLUSTER, "format_version": 1, "history": [entry]}
    return canonical(doc)


async def test_a_format_1_record_reads_with_the_policy_unknown_and_is_upgraded() -> None:
    key = tiering_key(CLUSTER, BROKER)
    old = read_tiering_record(_v1(END), key)
    assert [e.init_policy for e in old.history] == [None] and not old.always_earliest
    backend = MemoryBackend.from_url("memory://provenance-v1")
    await backend.create(key, _v1(END))
    new = await publish_tiering_rules(
        backend, CLUSTER, BROKER, TopicRules(), now_ms=END + 1, writer_id="w@h",
        lease_epoch=2, init_policy="earliest",
    )  # fmt: skip
    assert [(e.since_ms, e.init_policy) for e in new.history] == [
        (END, None),
        (END + 1, "earliest"),
    ]
    stored = await backend.read(key)
    assert b'"format_version":2' in stored and read_tiering_record(stored, key) == new
    assert not new.always_earliest  # queues the old sidecar began: policy not on record


async def test_a_record_created_over_queues_tiered_before_starts_unknown() -> None:
    backend = MemoryBackend.from_url("memory://provenance-fresh")
    made = await publish_tiering_rules(backend, CLUSTER, BROKER, TopicRules(), now_ms=END,
                                       writer_id="w@h", lease_epoch=3, init_policy="earliest",
                                       tiered_before=True)  # fmt: skip
    assert [e.init_policy for e in made.history] == [None, "earliest"]
    assert not made.always_earliest


def test_a_policy_the_setting_would_refuse_is_a_corrupt_record() -> None:
    key = tiering_key(CLUSTER, BROKER)
    bad = (
        _v1(END)
        .replace(b'"format_version":1', b'"format_version":2')
        .replace(b'"lease_epoch":1,', b'"init_policy":"oldest","lease_epoch":1,')
    )
    with pytest.raises(CorruptProvenanceError, match="init_policy 'oldest' is not a policy"):
        read_tiering_record(bad, key)
