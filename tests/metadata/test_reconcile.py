"""Reconcile and rebuild: the catalogue against manifests in a real (in-memory) bucket."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.compressed import upload_compressed
from tests.support.stores.segments import chain, upload
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.clock import VirtualClock
from tieredstore.cold.layout import (
    QueuePath,
    config_copy_key,
    lease_key,
    parse_object_key,
    quarantine_key,
)
from tieredstore.cold.manifest import Manifest
from tieredstore.cold.segment import Segment, read_segment
from tieredstore.errors import (
    CatalogueError,
    CorruptManifestError,
    DigestMismatchError,
    ObjectNotFoundError,
)
from tieredstore.findings import FindingKind
from tieredstore.metadata.catalogue import DB_NAME, Catalogue
from tieredstore.metadata.reconcile import ReconcileReport, rebuild, reconcile
from tieredstore.metadata.rows import QueueRow, QueueState, SegmentRow

Q0 = QueuePath(CLUSTER, BROKER, "TopicTest", 0)
Q1 = QueuePath(CLUSTER, BROKER, "TopicTest", 1)
QR = QueuePath(CLUSTER, BROKER, "%RETRY%group", 0)


@pytest.fixture
async def backend() -> AsyncIterator[MemoryBackend]:
    async with MemoryBackend(f"reconcile-{uuid.uuid4().hex}") as made:
        yield made
    reset_memory_stores()


async def _tier(catalogue: Catalogue, backend: MemoryBackend, segments: list[Segment]) -> None:
    """What the dispatcher does per segment: objects, manifest, then the catalogue."""
    first = segments[0].manifest
    catalogue.queues.ensure(first.topic, first.queue_id, first.start_offset)
    for seg in segments:
        catalogue.segments.commit(await upload(backend, seg))


async def _synthetic_store(catalogue: Catalogue, backend: MemoryBackend) -> None:
    await _tier(catalogue, backend, chain(Q0, [4, 3, 5]))
    await _tier(catalogue, backend, chain(Q1, [2, 2], start=100))
    await _tier(catalogue, backend, chain(QR, [6]))


def _snapshot(cat: Catalogue) -> tuple[list[QueueRow], list[list[SegmentRow]]]:
    queues = cat.queues.all()
    return queues, [cat.segments.of(q.topic, q.queue_id) for q in queues]


def _delete_database(state_dir: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        (state_dir / f"{DB_NAME}{suffix}").unlink(missing_ok=True)


def _kinds(report: ReconcileReport) -> list[tuple[FindingKind, str]]:
    return [(i.kind, i.key) for i in report.findings]


# -- rebuild -----------------------------------------------------------------------------


async def test_rebuild_from_manifests_gives_an_equal_catalogue(
    catalogue: Catalogue, backend: MemoryBackend, state_dir: Path, clock: VirtualClock
) -> None:
    await _synthetic_store(catalogue, backend)
    before = _snapshot(catalogue)
    catalogue.close()
    _delete_database(state_dir)

    report = await rebuild(backend, state_dir, cluster=CLUSTER, broker=BROKER, clock=clock)

    assert report.clean, report.findings
    assert len(report.adopted) == 6
    assert [(q.topic, q.queue_id) for q in report.created] == [
        ("%RETRY%group", 0), ("TopicTest", 0), ("TopicTest", 1),
    ]  # fmt: skip
    with Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER, clock=clock) as rebuilt:
        assert _snapshot(rebuilt) == before


async def test_rebuild_keeps_compressed_segments_byte_identical(
    catalogue: Catalogue, backend: MemoryBackend, state_dir: Path, clock: VirtualClock
) -> None:
    """A format-3 manifest rebuilt from its catalogue row (schema v7's cl_stored_digest
    beside cl_stored_size) is the very bytes stored in cold, stored digest included."""
    segments = chain(Q0, [4, 3, 5])
    catalogue.queues.ensure(Q0.topic, Q0.queue_id, 0)
    for seg in segments[:2]:
        catalogue.segments.commit(await upload_compressed(backend, seg))
    catalogue.segments.commit(await upload(backend, segments[2]))  # a store of both kinds
    catalogue.close()
    _delete_database(state_dir)

    report = await rebuild(backend, state_dir, cluster=CLUSTER, broker=BROKER, clock=clock)

    assert report.clean, report.findings
    with Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER, clock=clock) as rebuilt:
        rows = rebuilt.segments.of(Q0.topic, Q0.queue_id)
        assert [r.manifest.commit_log.framed is not None for r in rows] == [True, True, False]
        for row in rows:
            assert row.manifest.to_json() == await backend.read(row.manifest.key)
        assert (await reconcile(rebuilt, backend)).clean


async def test_rebuild_after_expiry_starts_at_the_first_manifest(
    catalogue: Catalogue, backend: MemoryBackend, state_dir: Path, clock: VirtualClock
) -> None:
    segments = chain(Q0, [4, 3, 5])
    await _tier(catalogue, backend, segments)
    expired = segments[0].manifest
    catalogue.segments.mark_deleting(Q0.topic, 0, 0)  # expiry, in its order
    for key in (expired.key, expired.consume_queue_key, expired.commit_log_key):
        await backend.delete(key)
    catalogue.segments.drop(Q0.topic, 0, 0)
    before = catalogue.segments.of(Q0.topic, 0)
    catalogue.close()
    _delete_database(state_dir)

    assert (await rebuild(backend, state_dir, cluster=CLUSTER, broker=BROKER, clock=clock)).clean

    with Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER, clock=clock) as rebuilt:
        row = rebuilt.queues.get(Q0.topic, 0)
        assert row is not None
        assert (row.init_offset, row.cold_min, row.cq_base) == (4, 4, 80)
        assert (row.cold_commit, row.cold_cl_end) == (12, segments[2].manifest.cl_end)
        assert rebuilt.segments.of(Q0.topic, 0) == before


async def test_rebuild_refuses_to_overwrite(
    catalogue: Catalogue, backend: MemoryBackend, state_dir: Path
) -> None:
    catalogue.close()
    with pytest.raises(CatalogueError, match="already exists") as info:
        await rebuild(backend, state_dir, cluster=CLUSTER, broker=BROKER)
    assert info.value.where == str(state_dir / DB_NAME)


# -- reconcile: adoption -------------------------------------------------------------------


async def test_a_clean_catalogue_stays_as_it_is(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    await _synthetic_store(catalogue, backend)
    before = _snapshot(catalogue)
    report = await reconcile(catalogue, backend)
    assert report == ReconcileReport()
    assert str(report) == "adopted 0 segments, created 0 queues, 0 issues"
    assert _snapshot(catalogue) == before


async def test_a_manifest_the_catalogue_missed_is_adopted_once(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    segments = chain(Q0, [4, 3, 5])
    await _tier(catalogue, backend, segments[:2])
    missed = await upload(backend, segments[2])  # crash before the catalogue commit

    report = await reconcile(catalogue, backend)

    assert report.clean
    assert [s.manifest for s in report.adopted] == [missed]
    row = catalogue.queues.get(Q0.topic, 0)
    assert row is not None and (row.cold_commit, row.cold_cl_end) == (12, missed.cl_end)
    assert (await reconcile(catalogue, backend)) == ReconcileReport()


async def test_a_queue_the_catalogue_never_saw_is_created(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    await _tier(catalogue, backend, chain(Q0, [2]))
    for seg in chain(Q1, [3, 1], start=40):
        await upload(backend, seg)
    report = await reconcile(catalogue, backend)
    assert report.clean
    assert [(q.topic, q.queue_id, q.init_offset, q.cq_base) for q in report.created] == [
        ("TopicTest", 1, 40, 800)
    ]
    assert [s.start_offset for s in catalogue.segments.of(Q1.topic, 1)] == [40, 43]


async def test_uncommitted_objects_are_not_adopted(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    segments = chain(Q0, [4, 3])
    await _tier(catalogue, backend, segments[:1])
    m = segments[1].manifest  # objects written, manifest not: a crash before the commit point
    await backend.write(m.commit_log_key, segments[1].commit_log)
    await backend.write(m.consume_queue_key, segments[1].consume_queue)
    assert (await reconcile(catalogue, backend)) == ReconcileReport()
    assert len(catalogue.segments.of(Q0.topic, 0)) == 1


async def test_our_own_files_are_ignored_and_foreign_keys_listed(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    await _tier(catalogue, backend, chain(Q0, [4]))
    m = chain(Q0, [4])[0].manifest
    await backend.write(lease_key(CLUSTER, BROKER), b"{}")
    await backend.write(quarantine_key(parse_object_key(m.key), stamp_ms=1), b"{}")
    copy = config_copy_key(CLUSTER, BROKER, "topics.json", 1, "0" * 64)
    await backend.write(copy, b"{}")
    stray = m.commit_log_key + ".tmp-123"
    await backend.write(stray, b"x")
    report = await reconcile(catalogue, backend)
    assert report.clean
    assert report.unrecognised == (stray,)


# -- reconcile: what it reports ------------------------------------------------------------


async def test_missing_objects_are_reported_and_rows_kept(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    await _synthetic_store(catalogue, backend)
    m0, m1 = (s.manifest for s in catalogue.segments.of(Q0.topic, 0)[:2])
    await backend.delete(m0.key)
    await backend.delete(m1.commit_log_key)
    before = _snapshot(catalogue)

    report = await reconcile(catalogue, backend)

    assert _kinds(report) == [
        (FindingKind.MISSING_OBJECT, m0.key),
        (FindingKind.MISSING_OBJECT, m1.commit_log_key),
    ]
    assert "TopicTest/0[0, 4)" in report.findings[0].detail
    assert _snapshot(catalogue) == before  # never silently dropped


async def test_deleting_segments_may_lack_objects(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    await _tier(catalogue, backend, chain(Q0, [4, 3]))
    first = catalogue.segments.mark_deleting(Q0.topic, 0, 0).manifest
    await backend.delete(first.key)  # expiry interrupted after its first delete
    assert (await reconcile(catalogue, backend)).clean


async def test_wrong_object_size_is_reported(catalogue: Catalogue, backend: MemoryBackend) -> None:
    segments = chain(Q0, [4, 3])
    await _tier(catalogue, backend, segments)
    m = segments[1].manifest
    await backend.write(m.consume_queue_key, segments[1].consume_queue + b"\x00" * 20)
    report = await reconcile(catalogue, backend)
    assert _kinds(report) == [(FindingKind.SIZE_MISMATCH, m.consume_queue_key)]
    assert "is 80 bytes, expected 60" in report.findings[0].detail


async def test_corrupt_manifest_blocks_adoption_of_what_follows(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    segments = chain(Q0, [4, 3, 5])
    await _tier(catalogue, backend, segments[:1])
    bad = await upload(backend, segments[1])
    await backend.write(bad.key, bad.to_json()[:-1])
    after = await upload(backend, segments[2])

    report = await reconcile(catalogue, backend)

    assert _kinds(report) == [
        (FindingKind.CORRUPT_MANIFEST, bad.key),
        (FindingKind.NOT_ADOPTED, after.key),
    ]
    row = catalogue.queues.get(Q0.topic, 0)
    assert row is not None and row.cold_commit == 4


async def test_gap_after_the_catalogue_is_reported(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    segments = chain(Q0, [4, 3, 5])
    await _tier(catalogue, backend, segments[:1])
    beyond = await upload(backend, segments[2])  # [7, 12) while cold commit is 4
    report = await reconcile(catalogue, backend)
    assert _kinds(report) == [(FindingKind.GAP, beyond.key)]
    assert "does not continue TopicTest/0 at offset 4" in report.findings[0].detail


async def test_overlapping_manifest_is_reported(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    await _tier(catalogue, backend, chain(Q0, [4, 3]))
    other: Manifest = await upload(backend, chain(Q0, [2, 3])[1])  # [2, 5) vs [0, 4), [4, 7)
    report = await reconcile(catalogue, backend)
    assert _kinds(report) == [(FindingKind.OVERLAP, other.key)]


async def test_manifest_with_missing_object_is_not_adopted(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    segments = chain(Q0, [4, 3])
    await _tier(catalogue, backend, segments[:1])
    m = await upload(backend, segments[1])
    await backend.delete(m.commit_log_key)
    report = await reconcile(catalogue, backend)
    assert _kinds(report) == [(FindingKind.MISSING_OBJECT, m.commit_log_key)]
    assert len(catalogue.segments.of(Q0.topic, 0)) == 1


async def test_manifests_of_a_paused_queue_are_not_adopted(
    catalogue: Catalogue, backend: MemoryBackend
) -> None:
    segments = chain(Q0, [4, 3])
    await _tier(catalogue, backend, segments[:1])
    m = await upload(backend, segments[1])
    catalogue.queues.set_state(Q0.topic, 0, QueueState.PAUSED)
    report = await reconcile(catalogue, backend)
    assert _kinds(report) == [(FindingKind.NOT_ADOPTED, m.key)]
    assert "is PAUSED" in report.findings[0].detail


async def test_reconcile_needs_a_writer(
    catalogue: Catalogue, backend: MemoryBackend, state_dir: Path
) -> None:
    with (
        Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER, read_only=True) as reader,
        pytest.raises(CatalogueError, match="writable"),
    ):
        await reconcile(reader, backend)


# -- reading a segment back: each failure names its object ----------------------------------


async def test_read_segment_round_trip_and_failures(backend: MemoryBackend) -> None:
    seg = chain(Q0, [4])[0]
    m = await upload(backend, seg)
    assert await read_segment(backend, m.key) == seg

    await backend.write(m.key, b'{"format_version": 1}')
    with pytest.raises(CorruptManifestError, match="lacks field") as corrupt:
        await read_segment(backend, m.key)
    assert corrupt.value.where == m.key

    await backend.write(m.key, m.to_json())
    tampered = bytearray(seg.commit_log)
    tampered[-1] ^= 0xFF
    await backend.write(m.commit_log_key, bytes(tampered))
    with pytest.raises(DigestMismatchError) as digest:
        await read_segment(backend, m.key)
    assert digest.value.where == f"{backend.url}/{m.commit_log_key}"

    await backend.delete(m.consume_queue_key)
    await backend.write(m.commit_log_key, seg.commit_log)
    with pytest.raises(ObjectNotFoundError) as missing:
        await read_segment(backend, m.key)
    assert missing.value.where is not None and m.consume_queue_key in missing.value.where
