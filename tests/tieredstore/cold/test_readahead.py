"""ReadAhead: parts (and decoded frames of compressed objects) fetched ahead for sequential
readers, bounded by size, never a stale failure. Over the real in-memory backend, counted
by the real counting wrapper."""

from __future__ import annotations

import random

import pytest

from tieredstore.backends.base import Backend
from tieredstore.backends.counting import CountingBackend
from tieredstore.backends.forwarding import ForwardingBackend
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.cold.compressed.framed import Framed
from tieredstore.cold.compressed.frames import FrameSettings, encode
from tieredstore.cold.readahead import ReadAhead
from tieredstore.errors import (
    BackendUnavailableError,
    CorruptFrameError,
    DigestMismatchError,
    ObjectNotFoundError,
)

DATA = bytes(random.Random(5).randbytes(1000))
KEY = "seg/COMMIT_LOG/obj"


class Counted:
    """A memory backend holding DATA, with every read's range recorded."""

    def __init__(self) -> None:
        reset_memory_stores()
        self.memory = MemoryBackend("readahead")
        self.reads = 0
        self.backend = CountingBackend(self.memory, on_request=self._request, on_bytes=_ignore)

    def _request(self, op: str) -> None:
        self.reads += op == "read"


def _ignore(_op: str, _n: int) -> None:
    return None


@pytest.fixture
async def store() -> Counted:
    counted = Counted()
    await counted.memory.write(KEY, DATA)
    return counted


async def test_a_sequential_reader_finds_the_next_part_fetched(store: Counted) -> None:
    cache = ReadAhead(store.backend, capacity_bytes=10_000, part_bytes=100)
    assert await cache.read(KEY, 0, 30, len(DATA)) == DATA[0:30]
    await cache.settle()
    assert store.reads == 2  # part 0 for the read, part 1 ahead
    assert await cache.read(KEY, 30, 100, len(DATA)) == DATA[30:100]
    await cache.settle()
    assert store.reads == 2, "part 0 is cached, part 1 already fetched"
    assert await cache.read(KEY, 100, 250, len(DATA)) == DATA[100:250]  # 2 missing, 3 ahead
    await cache.settle()
    assert store.reads == 4
    assert (cache.stats.misses, cache.stats.prefetches) == (2, 2)  # parts 0, 2; 1, 3
    # The last part has no next one; a read across every part is exact.
    assert await cache.read(KEY, 0, 1000, len(DATA)) == DATA
    await cache.settle()
    assert store.reads == 10 and cache.stats.parts == 10
    await cache.close()
    await cache.close()


@pytest.mark.parametrize("capacity", [0, 100, 250, 600])
async def test_memory_stays_within_the_capacity(store: Counted, capacity: int) -> None:
    cache = ReadAhead(store.backend, capacity_bytes=capacity, part_bytes=100)
    rng = random.Random(capacity)
    for _ in range(200):
        start = rng.randrange(0, 990)
        end = rng.randrange(start + 1, min(start + 150, 1000) + 1)
        assert await cache.read(KEY, start, end, len(DATA)) == DATA[start:end]
        # A read keeps the parts it needs even when they alone pass the capacity.
        needed = ((end - 1) // 100 - start // 100 + 1) * 100
        assert cache.stats.bytes <= max(capacity, needed)
        if capacity == 0:
            assert cache.stats.parts == 0
        await cache.settle()
    await cache.close()


class FailingReads(ForwardingBackend):
    """Fails the next ``failures`` reads with a retryable error."""

    def __init__(self, inner: Backend, failures: int) -> None:
        super().__init__(inner)
        self.failures = failures

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        if self.failures > 0:
            self.failures -= 1
            raise BackendUnavailableError("injected", where=key)
        return await self.inner.read(key, start, end)


async def test_a_failed_fetch_is_not_cached(store: Counted) -> None:
    failing = FailingReads(store.backend, failures=2)  # the read and its prefetch
    cache = ReadAhead(failing, capacity_bytes=10_000, part_bytes=100)
    with pytest.raises(BackendUnavailableError):
        await cache.read(KEY, 0, 10, len(DATA))
    await cache.settle()
    assert cache.stats.parts == 0 and cache.stats.bytes == 0
    assert await cache.read(KEY, 0, 10, len(DATA)) == DATA[:10]
    await cache.close()


async def test_a_deleted_object_is_not_found_and_a_bad_range_refused(store: Counted) -> None:
    cache = ReadAhead(store.backend, capacity_bytes=10_000, part_bytes=100)
    with pytest.raises(ObjectNotFoundError):
        await cache.read("seg/COMMIT_LOG/gone", 0, 10, 50)
    for start, end in ((0, 0), (10, 5), (990, 1001), (-1, 3)):
        with pytest.raises(ValueError, match="not inside an object"):
            await cache.read(KEY, start, end, len(DATA))
    await cache.close()


# -- compressed objects: decoded frames cached -------------------------------------------
PAYLOAD = b"".join(b"record %06d " % i + bytes([i % 7]) * (i % 50) for i in range(400))
FRAME = 1000


async def _framed(store: Counted, key: str) -> Framed:
    stored = encode(PAYLOAD, FrameSettings(frame_bytes=FRAME, level=3))
    await store.memory.write(key, stored)
    return Framed(len(stored))


async def test_small_sequential_reads_of_a_compressed_object_decode_each_frame_once(
    store: Counted,
) -> None:
    key = "seg/COMMIT_LOG/sequential.zst"
    framed = await _framed(store, key)
    frames = -(-len(PAYLOAD) // FRAME)
    cache = ReadAhead(store.backend, capacity_bytes=frames * FRAME, part_bytes=100)
    got = []
    for start in range(0, len(PAYLOAD), 37):  # a consumer pulling a few records at a time
        end = min(start + 37, len(PAYLOAD))
        got.append((await cache.read_framed(key, start, end, framed)).tobytes())
        await cache.settle()
    assert b"".join(got) == PAYLOAD
    assert cache.stats.decodes == frames  # each frame once: read or fetched ahead
    assert store.reads == 1 + frames  # the seek table (cached by the decoder), each frame
    assert cache.stats.prefetches == frames - 1 and cache.stats.misses == 1
    await cache.close()


@pytest.mark.parametrize("capacity", [0, FRAME, 2500])
async def test_decoded_frames_stay_within_the_capacity(store: Counted, capacity: int) -> None:
    key = f"seg/COMMIT_LOG/bounded-{capacity}.zst"
    framed = await _framed(store, key)
    cache = ReadAhead(store.backend, capacity_bytes=capacity, part_bytes=100)
    rng = random.Random(capacity)
    for _ in range(100):
        start = rng.randrange(0, len(PAYLOAD) - 1)
        end = rng.randrange(start + 1, min(start + 1500, len(PAYLOAD)) + 1)
        got = await cache.read_framed(key, start, end, framed)
        assert got.tobytes() == PAYLOAD[start:end]
        # A read keeps the frames it needs even when they alone pass the capacity.
        needed = ((end - 1) // FRAME - start // FRAME + 1) * FRAME
        assert cache.stats.bytes <= max(capacity, needed)
        if capacity == 0:
            assert cache.stats.parts == 0 and cache.stats.decodes == 0
        await cache.settle()
    await cache.close()


async def test_a_damaged_frame_is_a_digest_mismatch_and_not_cached(store: Counted) -> None:
    key = "seg/COMMIT_LOG/damaged.zst"
    stored = bytearray(encode(PAYLOAD, FrameSettings(frame_bytes=FRAME, level=3)))
    stored[20] ^= 0xFF  # inside frame 0's compressed block
    await store.memory.write(key, bytes(stored))
    cache = ReadAhead(store.backend, capacity_bytes=10 * FRAME, part_bytes=100)
    for _ in range(2):  # the second read decodes again: a failure is never cached
        with pytest.raises(DigestMismatchError, match="frame 0"):
            await cache.read_framed(key, 0, 10, Framed(len(stored)))
        await cache.settle()
    assert cache.stats.decodes == 3  # frame 0 twice, frame 1 ahead once (then cached)
    assert (await cache.read_framed(key, FRAME, FRAME + 10, Framed(len(stored)))).tobytes() == (
        PAYLOAD[FRAME : FRAME + 10]
    )
    with pytest.raises(CorruptFrameError, match="range read ends at"):
        await cache.read_framed(key, 0, len(PAYLOAD) + 1, Framed(len(stored)))
    with pytest.raises(ValueError, match="empty or negative"):
        await cache.read_framed(key, 5, 5, Framed(len(stored)))
    await cache.close()
