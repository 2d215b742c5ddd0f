"""cold.compression = "zstd": segments tiered compressed read back as the plain ones do,
a store of both kinds reads as one, and damage in a compressed object is a digest
mismatch."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.moto import S3Bucket
from tests.support.sidecar.settings import BROKER, CLUSTER, put_in_force, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot, read_cold
from tests.support.stores.compressed import silent_flip
from tieredstore.backends import open_backend
from tieredstore.backends.base import Backend
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.cold import manifest as manifests
from tieredstore.cold.batch import (
    BATCH_FORMAT_COMPRESSED,
    BATCH_FORMAT_VERSION,
    BatchHead,
    data_section,
)
from tieredstore.cold.compressed.framed import Framed
from tieredstore.cold.compressed.frames import FrameSettings, encode
from tieredstore.cold.digests import DigestAlgorithm, digest
from tieredstore.cold.history import Committed, EntryKind, load_history, read_batch, span_bytes
from tieredstore.cold.manifest import COMPRESSED_VERSION, FORMAT_VERSION, read_manifest
from tieredstore.cold.readahead import ReadAhead
from tieredstore.cold.reader import ColdReader
from tieredstore.cold.segment import verify_segment
from tieredstore.dispatcher.maintenance.gc import scan_garbage
from tieredstore.errors import DigestMismatchError, UnsupportedFormatError
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SyntheticStore, SynthSpec
from tieredstore.metadata.reconcile import reconcile
from tieredstore.settings.declaration import ColdSettings

pytestmark = pytest.mark.slow

SPEC = SynthSpec(
    topics=2, queues=2, messages=1200, body_min=10, body_max=2000,
    commitlog_file_size=256 << 10, cq_file_size=200 * 20, prepared_every=50, seed=50,
)  # fmt: skip
ZSTD = {"cold__compression": "zstd", "cold__frame_size": "8K", "tiering__batching": False}
PLAIN = {"tiering__batching": False}
#: Batching on: the segments cut by age go into batch objects (format 2 when compressed).
BATCHED_ZSTD = {"cold__compression": "zstd", "cold__frame_size": "8K", "tiering__batching": True}
BATCHED = {"tiering__batching": True}


async def _tier(store: Path, cold: str, state: Path, **kw: object) -> None:
    async with open_runtime(settings_for(store, cold, state, **kw)) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        assert not (await rt.dispatcher.catch_up()).errors


async def _versions(backend: Backend) -> list[int]:
    cold = await read_cold(backend, CLUSTER, BROKER)
    return [m.manifest.format_version for q in cold.values() for m in q.manifests if m.manifest]


async def _everything(
    backend: Backend, *, readahead: bool, ahead: ReadAhead | None = None
) -> list[tuple[int, int, bytes]]:
    """Every message of every queue as the cold reader reads it (through ``ahead``, or a
    read-ahead of its own when ``readahead``)."""
    if ahead is None and readahead:
        ahead = ReadAhead(backend, capacity_bytes=1 << 20, part_bytes=4096)
    reader = ColdReader(backend, CLUSTER, BROKER, batch_bytes=5_000, readahead=ahead)
    out = []
    for q, c in sorted((await read_cold(backend, CLUSTER, BROKER)).items()):
        offset = c.start
        while offset < c.end:
            got = await reader.read(q.topic, q.queue_id, offset, 37)
            out += [(m.queue_offset, m.cold_commitlog_offset, m.body) for m in got]
            offset = got[-1].queue_offset + 1
    return out


async def _verify(backend: Backend, link: Committed) -> None:
    cl = await span_bytes(backend, link.commit_log)
    verify_segment(link, cl, await span_bytes(backend, link.consume_queue))


async def test_a_compressed_copy_reads_as_the_plain_one(store: Path, tmp_path: Path) -> None:
    reset_memory_stores()
    await _tier(store, "memory://plain", tmp_path / "plain", **PLAIN)
    await _tier(store, "memory://zstd", tmp_path / "zstd", **ZSTD)
    async with open_backend("memory://plain") as plain, open_backend("memory://zstd") as zstd:
        assert set(await _versions(plain)) == {FORMAT_VERSION}
        assert set(await _versions(zstd)) == {COMPRESSED_VERSION}
        await assert_cold_matches_hot(zstd, HotStore(store), CLUSTER, BROKER)
        expected = await _everything(plain, readahead=True)
        assert len(expected) == SPEC.messages - SPEC.messages // 50
        ahead = ReadAhead(zstd, capacity_bytes=1 << 20, part_bytes=4096)
        assert await _everything(zstd, readahead=True, ahead=ahead) == expected
        # Reads of 5,000 bytes: the read-ahead decodes each 8 KiB frame once, not per read.
        cold = await read_cold(zstd, CLUSTER, BROKER)
        frames = sum(-(-m.commit_log.size // 8192) for q in cold.values() for m in q.manifests)
        assert 0 < ahead.stats.decodes <= frames
        await ahead.close()
        assert await _everything(zstd, readahead=False) == expected
        stored = sum(o.size for o in await zstd.list() if "COMMIT_LOG" in o.key)
        assert stored < sum(o.size for o in await plain.list() if "COMMIT_LOG" in o.key)
        await _assert_encoded_as_plain(plain, zstd)


async def _assert_encoded_as_plain(plain: Backend, zstd: Backend) -> None:
    """Each compressed COMMIT_LOG object is byte for byte the seekable encoding of the
    plain copy's object for the same offsets: the frames of 8 KiB from its first byte,
    at the default level, then the seek table."""
    settings = FrameSettings(8192, ColdSettings.default_of("compression_level"))
    links = {(q, c.start_offset): c for q, cq in (await read_cold(plain, CLUSTER, BROKER)).items()
             for c in cq.manifests}  # fmt: skip
    compared = 0
    for q, cq in (await read_cold(zstd, CLUSTER, BROKER)).items():
        for c in cq.manifests:
            ours = await zstd.read(c.commit_log.key)
            assert ours == encode(await span_bytes(plain, links[q, c.start_offset].commit_log),
                                  settings)  # fmt: skip
            compared += c.commit_log.size > 8192
    assert compared  # segments of several frames among them


class _FirstUploadWaitsForTheRest(MemoryBackend):
    """A memory store whose first compressed COMMIT_LOG upload waits (at most 60 s) until
    every other segment of its round has its encoded copy beside its spool file: with one
    upload at a time and one encode thread, that happens only if the round encodes its
    segments ahead of their uploads."""

    waited = False

    async def write_file(
        self, key: str, path: Path, *, chunk_bytes: int, check: Callable[[], None]
    ) -> int:
        if not self.waited and path.name.endswith(".zst"):
            self.waited = True
            spools = [p for p in path.parent.glob("segment-*") if p.suffix != ".zst"]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while not all(p.with_name(p.name + ".zst").exists() for p in spools):
                if loop.time() > deadline:
                    raise AssertionError(f"{len(spools)} segments, none encoded ahead")
                await asyncio.sleep(0.01)
        return await super().write_file(key, path, chunk_bytes=chunk_bytes, check=check)


async def test_a_round_encodes_its_segments_ahead_of_their_uploads(
    store: Path, tmp_path: Path
) -> None:
    reset_memory_stores()
    waits = _FirstUploadWaitsForTheRest("ahead")
    settings = settings_for(store, "memory://ahead", tmp_path / "state",
                            tiering__concurrency=1, **ZSTD)  # fmt: skip
    async with open_runtime(settings, backend=waits) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        assert not (await rt.dispatcher.catch_up()).errors
    assert waits.waited
    async with open_backend("memory://ahead") as zstd:
        assert set(await _versions(zstd)) == {COMPRESSED_VERSION}
        await assert_cold_matches_hot(zstd, HotStore(store), CLUSTER, BROKER)
    assert not list((tmp_path / "state").rglob("*.zst"))  # the round's copies went with it


async def test_a_store_of_both_kinds_reads_and_verifies_as_one(store: Path, tmp_path: Path) -> None:
    reset_memory_stores()
    await _tier(store, "memory://mixed", tmp_path / "state", **PLAIN)
    SyntheticStore.open(store).append(600)
    await _tier(store, "memory://mixed", tmp_path / "state", **ZSTD)
    async with open_backend("memory://mixed") as backend:
        assert set(await _versions(backend)) == {FORMAT_VERSION, COMPRESSED_VERSION}
        cold = await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)
        assert sum(q.end - q.start for q in cold.values()) == 1800 - 1800 // 50
        assert len(await _everything(backend, readahead=True)) == 1800 - 1800 // 50


async def test_a_flipped_byte_in_a_compressed_segment_is_a_digest_mismatch(
    store: Path, tmp_path: Path
) -> None:
    reset_memory_stores()
    await _tier(store, "memory://flip", tmp_path / "state", **ZSTD)
    async with open_backend("memory://flip") as backend:
        link = next(iter((await read_cold(backend, CLUSTER, BROKER)).values())).manifests[0]
        key = link.commit_log.key
        data = bytearray(await backend.read(key))
        data[len(data) // 2] ^= 0x10
        await backend.write(key, bytes(data))
        with pytest.raises(DigestMismatchError):
            await _verify(backend, link)


async def test_a_flip_that_decodes_identically_fails_on_the_stored_digest_the_uploader_wrote(
    store: Path, tmp_path: Path
) -> None:
    reset_memory_stores()
    await _tier(store, "memory://silent", tmp_path / "state", **ZSTD)
    async with open_backend("memory://silent") as backend:
        link = next(iter((await read_cold(backend, CLUSTER, BROKER)).values())).manifests[0]
        key, framed = link.commit_log.key, link.commit_log.framed
        stored = await backend.read(key)
        assert framed == Framed(len(stored), digest(stored, DigestAlgorithm.CRC32C))
        await backend.write(key, silent_flip(stored))
        with pytest.raises(DigestMismatchError, match=f"stored digest is .*{key}"):
            await _verify(backend, link)


async def test_an_older_reader_refuses_a_compressed_manifest_cleanly(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a reader of manifest formats 1 and 2 only (0.2 before compression) does with
    format 3: the refusal of any newer format, never a misread."""
    reset_memory_stores()
    await _tier(store, "memory://old", tmp_path / "state", **ZSTD)
    async with open_backend("memory://old") as backend:
        key = next(o.key for o in await backend.list() if "/MANIFEST/" in o.key)
        data = await backend.read(key)
        assert json.loads(data)["commit_log"]["compression"] == "zstd"
        monkeypatch.setattr(manifests, "READABLE_VERSIONS", frozenset({1, 2}))
        with pytest.raises(UnsupportedFormatError, match="format_version 3"):
            read_manifest(data, key)


async def test_gc_and_reconcile_find_compressed_segments_clean(store: Path, tmp_path: Path) -> None:
    """Their size checks compare a listing with the stored size, not the decoded one."""
    reset_memory_stores()
    await _tier(store, "memory://clean", tmp_path / "state", **ZSTD)
    settings = settings_for(store, "memory://clean", tmp_path / "state", **ZSTD)
    async with open_runtime(settings) as rt:
        report = await reconcile(rt.catalogue, rt.backend)
        assert report.clean, report.findings
        scan = await scan_garbage(
            rt.backend, cluster=CLUSTER, broker=BROKER, now_ms=0, grace_s=0.0
        )  # fmt: skip
        assert scan.manifests > 0
        assert not scan.findings, scan.findings


async def _batch_versions(backend: Backend) -> list[int]:
    """The format of every batch object (fences aside), by sequence."""
    out = []
    for info in sorted(await backend.list(), key=lambda i: i.key):
        if info.key.endswith(".batch"):
            head = await read_batch(backend, info.key, info.size)
            if isinstance(head, BatchHead):
                out.append(head.index.format_version)
    return out


async def test_compressed_batches_read_as_plain_ones(store: Path, tmp_path: Path) -> None:
    reset_memory_stores()
    await _tier(store, "memory://bplain", tmp_path / "plain", **BATCHED)
    await _tier(store, "memory://bzstd", tmp_path / "zstd", **BATCHED_ZSTD)
    async with open_backend("memory://bplain") as plain, open_backend("memory://bzstd") as zstd:
        assert set(await _batch_versions(plain)) == {BATCH_FORMAT_VERSION}
        assert set(await _batch_versions(zstd)) == {BATCH_FORMAT_COMPRESSED}
        await assert_cold_matches_hot(zstd, HotStore(store), CLUSTER, BROKER)
        expected = await _everything(plain, readahead=True)
        assert await _everything(zstd, readahead=True) == expected
        assert await _everything(zstd, readahead=False) == expected
        for link in (await load_history(zstd, CLUSTER, BROKER)).links():
            await _verify(zstd, link)
        batched = [o.size for o in await zstd.list() if o.key.endswith(".batch")]
        assert sum(batched) < sum(o.size for o in await plain.list() if o.key.endswith(".batch"))


async def test_a_store_of_plain_and_compressed_batches_reads_compacts_and_checks_as_one(
    store: Path, tmp_path: Path
) -> None:
    reset_memory_stores()
    state = tmp_path / "state"
    await _tier(store, "memory://bmixed", state, **BATCHED)
    SyntheticStore.open(store).append(600)
    await _tier(store, "memory://bmixed", state, **BATCHED_ZSTD)
    settings = settings_for(store, "memory://bmixed", state, **BATCHED_ZSTD)
    async with open_runtime(settings) as rt:
        backend = rt.backend
        assert set(await _batch_versions(backend)) == {
            BATCH_FORMAT_VERSION,
            BATCH_FORMAT_COMPRESSED,
        }
        before = await _everything(backend, readahead=True)
        assert len(before) == 1800 - 1800 // 50
        await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)
        report = await reconcile(rt.catalogue, backend)
        assert report.clean, report.findings
        scan = await scan_garbage(backend, cluster=CLUSTER, broker=BROKER, now_ms=0, grace_s=0.0)
        assert not scan.findings, scan.findings
        # Compaction rewrites every slice, plain or compressed, as a segment.
        assert any(rt.catalogue.slices.of(q.topic, q.queue_id) for q in HotStore(store).queues())
        await rt.dispatcher.start(wait_for_lease=False)
        put_in_force(rt.in_force, tiering__segment_max_bytes=1)  # every queue is due
        while (done := await rt.compactor.run_pass()).queues:
            assert not done.problems, done.problems
        assert not any(
            rt.catalogue.slices.of(q.topic, q.queue_id) for q in HotStore(store).queues()
        )
        assert await _everything(backend, readahead=True) == before
        await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)


async def test_a_flipped_byte_in_a_compressed_batch_is_found(store: Path, tmp_path: Path) -> None:
    """A range read of the slice fails its frame (or its digest); the whole batch's stored
    digest catches a flip anywhere in its data section."""
    reset_memory_stores()
    await _tier(store, "memory://bflip", tmp_path / "state", **BATCHED_ZSTD)
    async with open_backend("memory://bflip") as backend:
        links = [
            link for link in (await load_history(backend, CLUSTER, BROKER)).links()
            if link.kind is EntryKind.SLICE
        ]  # fmt: skip
        link = links[0]
        head = await read_batch(backend, link.key, link.commit_log.stored_size)
        assert isinstance(head, BatchHead) and head.framed is not None
        data = bytearray(await backend.read(link.key))
        data[head.data_offset + 40] ^= 0x10  # inside the first frame: the first slice's
        await backend.write(link.key, bytes(data))
        with pytest.raises(DigestMismatchError):
            await _verify(backend, link)
        with pytest.raises(DigestMismatchError):
            data_section(head, bytes(data))


@pytest.mark.s3
async def test_s3_holds_compressed_segments_that_read_back(
    store: Path, tmp_path: Path, s3_bucket: S3Bucket
) -> None:
    """Over S3 (moto), where the uploader streams the encoded spool file in parts."""
    url = f"{s3_bucket.url}/tiered"
    await _tier(
        store, url, tmp_path / "state", cold__endpoint_url=s3_bucket.endpoint_url,
        cold__multipart_threshold="16K", **ZSTD,
    )  # fmt: skip
    async with open_backend(url, options=s3_bucket.options()) as backend:
        assert set(await _versions(backend)) == {COMPRESSED_VERSION}
        await assert_cold_matches_hot(backend, HotStore(store), CLUSTER, BROKER)
        assert (
            len(await _everything(backend, readahead=True)) == SPEC.messages - SPEC.messages // 50
        )
