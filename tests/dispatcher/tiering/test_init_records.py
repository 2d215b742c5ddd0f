"""The init records of the queues one tick initialises are one object
(``_queues/_inits/<stamp>-<digest>.json``, tieredstore.cold.provenance.InitRecords); the
per-queue objects 0.1.x wrote (``_queues/<topic>/<queueId>/INIT.json``) are still read:
by the sidecar on start (which queues have one), by a catalogue rebuild and by the
verifier's listing. A crash between the object and the catalogue is finished by the
next process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.retention import END, SPEC, retention_settings
from tieredstore.backends.base import Backend
from tieredstore.backends.memory import MemoryBackend
from tieredstore.backends.posix import PosixBackend
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.cold.layout import (
    QueuePath,
    broker_prefix,
    init_key,
    inits_key,
    lease_key,
    parse_inits_key,
    parse_queue_record_key,
)
from tieredstore.cold.provenance import (
    InitRecords,
    QueueInit,
    create_init_records,
    create_record,
    earliest_inits,
    is_queue_record_key,
    read_init_records,
    read_queue_records,
)
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.dispatcher.tiering.provenance_writer import ProvenanceWriter
from tieredstore.errors import CorruptProvenanceError, InvalidNameError, LeaseLostError
from tieredstore.hot.store import HotRange, HotStore, QueueKey
from tieredstore.metadata.reconcile import rebuild
from tieredstore.metadata.rows import QueueRow, QueueState
from tieredstore.verifier.readers import ColdLocation, list_cold_objects

__all__ = ["SPEC"]  # the `store` fixture's store (tests/dispatcher/conftest.py)

PREFIX = broker_prefix(CLUSTER, BROKER) + "/"
INITS = PREFIX + "_queues/_inits/"


def _row(topic: str, queue_id: int, init: int) -> QueueRow:
    return QueueRow(topic, queue_id, init, init, init, 0, 0, QueueState.ACTIVE, 0)


async def _writer(backend: Backend, hot: HotStore, clock: VirtualClock) -> ProvenanceWriter:
    lease = Lease(backend, lease_key(CLUSTER, BROKER), clock)
    await lease.acquire(wait=False)
    return ProvenanceWriter(backend, lease, hot, cluster=CLUSTER, broker=BROKER)


def _rows(hot: HotStore) -> list[QueueRow]:
    return [_row(q.topic, q.queue_id, hot.queue_range(q.topic, q.queue_id).min)
            for q in hot.queues()]  # fmt: skip


async def _keys(backend: Backend, prefix: str) -> list[str]:
    return sorted(i.key for i in await backend.list(prefix))


async def _inits(backend: Backend) -> dict[tuple[str, int], QueueInit]:
    found: list[QueueInit] = []
    for key in await _keys(backend, PREFIX + "_queues/"):
        recs = read_queue_records(await backend.read(key), key, PREFIX)
        found += [r for r in recs if isinstance(r, QueueInit)]
    return {(r.topic, r.queue_id): r for r in earliest_inits(found)}


async def test_one_tick_s_queues_get_one_object_and_a_repeat_writes_nothing(
    store: Path,
) -> None:
    hot, clock = HotStore(store), VirtualClock(start_ms=END)
    backend = MemoryBackend.from_url("memory://inits-one")
    writer = await _writer(backend, hot, clock)
    rows = _rows(hot)
    assert len(rows) > 1
    await writer.ensure_inits(rows, "earliest")
    objects = await _keys(backend, PREFIX + "_queues/")
    assert len(objects) == 1 and objects[0].startswith(INITS)
    inits = await _inits(backend)
    assert {q: (i.init_offset, i.policy) for q, i in inits.items()} == {
        (r.topic, r.queue_id): (r.init_offset, "earliest") for r in rows
    }
    # The same records again (a repeat after a crash) land on the same key: no-op.
    again = InitRecords.of(inits.values())
    assert again.key == objects[0]
    await create_init_records(backend, again)
    assert await _keys(backend, PREFIX + "_queues/") == objects


async def test_a_mixed_store_is_read_and_only_queues_without_a_record_get_one(
    store: Path, tmp_path: Path
) -> None:
    hot, clock = HotStore(store), VirtualClock(start_ms=END)
    backend = PosixBackend(tmp_path / "cold")
    writer = await _writer(backend, hot, clock)
    rows = _rows(hot)
    old, new = rows[0], rows[1:]
    # A queue 0.1.x initialised: its own INIT.json, policy latest.
    await create_record(backend, QueueInit.new(
        QueuePath(CLUSTER, BROKER, old.topic, old.queue_id), old.init_offset, "latest",
        created_at_ms=END - 1000, writer_id="old@host", lease_epoch=1,
    ))  # fmt: skip
    await writer.ensure_inits(rows, "earliest")
    inits = await _inits(backend)
    assert inits[(old.topic, old.queue_id)].policy == "latest"  # read, not written again
    assert all(inits[(r.topic, r.queue_id)].policy == "earliest" for r in new)
    objects = await _keys(backend, PREFIX + "_queues/")
    assert objects == sorted([init_key(QueuePath(CLUSTER, BROKER, old.topic, old.queue_id)),
                              *(k for k in objects if k.startswith(INITS))])  # fmt: skip
    assert len(objects) == 2
    # The verifier's listing and a rebuilt catalogue read both layouts.
    listing = list_cold_objects(ColdLocation(str(tmp_path / "cold")), CLUSTER, BROKER)
    assert {(i.topic, i.queue_id): i.policy for i in listing.inits} == {
        q: i.policy for q, i in inits.items()
    }
    assert not listing.unrecognised
    report = await rebuild(backend, tmp_path / "state2", cluster=CLUSTER, broker=BROKER)
    assert {(q.topic, q.queue_id): q.init_offset for q in report.created} == {
        (r.topic, r.queue_id): r.init_offset for r in rows
    }


async def test_a_queue_in_two_objects_has_the_earliest_record(store: Path) -> None:
    hot, clock = HotStore(store), VirtualClock(start_ms=END)
    backend = MemoryBackend.from_url("memory://inits-two")
    q = QueuePath(CLUSTER, BROKER, "SynthTopic0", 0)
    first = QueueInit.new(q, 5, "earliest", created_at_ms=END, writer_id="a@h", lease_epoch=1)
    later = QueueInit.new(q, 9, "latest", created_at_ms=END + 1, writer_id="b@h", lease_epoch=1)
    for rec in (later, first):
        await create_init_records(backend, InitRecords.of([rec]))
    assert len(await _keys(backend, INITS)) == 2
    assert (await _inits(backend))[("SynthTopic0", 0)] == first
    # The sidecar counts the queue as initialised and writes nothing more for it.
    writer = await _writer(backend, hot, clock)
    await writer.ensure_inits([_row("SynthTopic0", 0, 5)], "earliest")
    assert len(await _keys(backend, INITS)) == 2


async def test_a_fenced_writer_writes_no_init_records(store: Path) -> None:
    hot, clock = HotStore(store), VirtualClock(start_ms=END)
    backend = MemoryBackend.from_url("memory://inits-fenced")
    writer = await _writer(backend, hot, clock)
    await backend.delete(lease_key(CLUSTER, BROKER))
    other = Lease(backend, lease_key(CLUSTER, BROKER), clock)
    await other.acquire(wait=False)  # taken over: the first writer is fenced
    with pytest.raises(LeaseLostError):
        await writer.lease.renew()  # learns of it
    with pytest.raises(LeaseLostError):
        await writer.ensure_inits(_rows(hot), "earliest")
    assert await _keys(backend, PREFIX + "_queues/") == []


async def test_a_crash_after_the_object_before_any_segment_is_finished_by_a_restart(
    store: Path, tmp_path: Path
) -> None:
    clock = VirtualClock(start_ms=END)
    settings = retention_settings(tmp_path)
    cold = PosixBackend(tmp_path / "cold")
    # The first process discovers the queues (catalogue rows), writes their init records
    # and dies before it tiers anything: nothing of it but the object is in cold.
    async with open_runtime(settings, clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        rows = await rt.dispatcher.discover()
        await rt.dispatcher.provenance.before_tiering(rows, settings.tiering)
        written = await _keys(cold, PREFIX + "_queues/")
        assert len(written) == 1 and written[0].startswith(INITS)
        assert all(r.cold_commit == r.init_offset for r in rt.catalogue.queues.all())
    # The next one finds the records in force, writes no other, and tiers everything.
    clock.set_ms(END + 1000)
    async with open_runtime(settings, clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        assert not (await rt.dispatcher.catch_up()).errors
        assert await _keys(cold, PREFIX + "_queues/") == written
        hot = HotStore(store)
        assert all(r.cold_commit == hot.queue_range(r.topic, r.queue_id).max
                   for r in rt.catalogue.queues.all())  # fmt: skip
        inits = await _inits(cold)
        assert set(inits) == {(r.topic, r.queue_id) for r in rt.catalogue.queues.all()}
    # A crash that loses the object's catalogue instead (a state directory gone): a
    # rebuild starts every queue from its record in the object.
    report = await rebuild(cold, tmp_path / "state2", cluster=CLUSTER, broker=BROKER)
    assert {(q.topic, q.queue_id): q.init_offset for q in report.created} == {
        q: i.init_offset for q, i in inits.items()
    }


def _records(*queue_ids: int) -> InitRecords:
    return InitRecords.of(
        QueueInit.new(
            QueuePath(CLUSTER, BROKER, "T", q),
            7,
            "earliest",
            created_at_ms=END,
            writer_id="w@h",
            lease_epoch=2,
        )
        for q in queue_ids
    )


def test_an_object_whose_content_is_not_what_its_key_names_is_corrupt() -> None:
    records = _records(0, 1)
    assert read_init_records(records.to_json(), records.key) == records
    changed = records.to_json().replace(b'"earliest"', b'"latest"', 1)
    with pytest.raises(CorruptProvenanceError, match="records describe"):
        read_init_records(changed, records.key)
    with pytest.raises(CorruptProvenanceError, match="records describe"):
        read_init_records(records.to_json(), _records(0).key)  # another object's name
    with pytest.raises(CorruptProvenanceError, match="format_version"):
        read_init_records(records.to_json().replace(b'"format_version":1', b'"format_version":2'),
                          records.key)  # fmt: skip


def test_a_queue_twice_in_one_object_is_corrupt() -> None:
    one = _records(0).inits[0]
    with pytest.raises(CorruptProvenanceError, match="repeated"):
        InitRecords((one, one))


async def test_the_range_discovery_chose_the_offset_in_is_the_one_on_record(
    store: Path,
) -> None:
    # Discovery read the new queue's hot range once to choose its init offset; the init
    # record is judged by that range, not by another read of the hot store.
    hot, clock = HotStore(store), VirtualClock(start_ms=END)
    backend = MemoryBackend.from_url("memory://inits-ranges")
    writer = await _writer(backend, hot, clock)
    rng = hot.queue_range("SynthTopic0", 0)
    row = _row("SynthTopic0", 0, rng.min + 7)
    chosen_in = HotRange(rng.min + 7, rng.max)  # as discovery saw it
    await writer.ensure_inits([row], "earliest", {QueueKey("SynthTopic0", 0): chosen_in})
    assert (await _inits(backend))[("SynthTopic0", 0)].policy == "earliest"
    # Without it, the hot store read now says the offset is above hot min: adopted.
    other = MemoryBackend.from_url("memory://inits-ranges-unread")
    await (await _writer(other, hot, clock)).ensure_inits([row], "earliest")
    assert (await _inits(other))[("SynthTopic0", 0)].policy == "adopted"


async def test_discovery_keeps_the_ranges_it_chose_new_queues_offsets_in(
    store: Path, tmp_path: Path
) -> None:
    settings = retention_settings(tmp_path, tiering__init_policy="latest")
    async with open_runtime(settings, clock=VirtualClock(start_ms=END)) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        rows = await rt.dispatcher.discover()
        hot = HotStore(store)
        ranges = rt.dispatcher.discovery.new_ranges
        assert ranges == {QueueKey(r.topic, r.queue_id): hot.queue_range(r.topic, r.queue_id)
                          for r in rows}  # fmt: skip
        assert all(r.init_offset == ranges[QueueKey(r.topic, r.queue_id)].max for r in rows)
        await rt.dispatcher.discover()  # nothing new: nothing kept
        assert rt.dispatcher.discovery.new_ranges == {}


def test_the_inits_directory_is_no_queue_and_holds_only_names_it_makes() -> None:
    key = _records(0).key
    assert parse_inits_key(key, PREFIX) == (END, key.rsplit("-", 1)[1][:-5])
    assert parse_queue_record_key(key, PREFIX) is None and is_queue_record_key(key, PREFIX)
    assert parse_inits_key(init_key(QueuePath(CLUSTER, BROKER, "T", 0)), PREFIX) is None
    with pytest.raises(InvalidNameError):
        parse_inits_key(INITS + "stray.json", PREFIX)
    with pytest.raises(InvalidNameError):
        inits_key(CLUSTER, BROKER, END, "NOT-HEX")
