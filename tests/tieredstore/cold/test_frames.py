"""Seekable zstd objects: frames decode alone, ranges in uncompressed coordinates, and
damage is a digest-mismatch kind of error, never a zstd exception."""

from __future__ import annotations

import contextlib
import errno
import functools
import random
from pathlib import Path

import pytest
import zstandard

from tests.support.stores.compressed import silent_flip
from tieredstore.backends.memory import MemoryBackend
from tieredstore.cold.compressed.framed import (
    Framed,
    encode_framed,
    read_range,
    read_range_with,
    read_whole,
)
from tieredstore.cold.compressed.frames import (
    FAST_HASH_LOG,
    MAX_FRAME_BYTES,
    FrameIndex,
    FrameSettings,
    decode,
    decode_whole,
    encode,
    encode_file,
    stored_bound,
)
from tieredstore.cold.digests import DigestAlgorithm, digest
from tieredstore.errors import CorruptFrameError, DigestMismatchError
from tieredstore.settings.declaration import SETTINGS, ColdSettings

# Compressible but not trivial: records of a few shapes with varying bytes.
DATA = b"".join(
    i.to_bytes(4, "big") + b"topic-%d|" % (i % 7) + bytes([i % 251]) * (i % 300)
    for i in range(2_000)
)
FRAME = 4_096


def _index(obj: bytes) -> FrameIndex:
    return FrameIndex.parse(obj, len(obj), where="obj")


def _read(obj: bytes, start: int, end: int) -> bytes:
    index = _index(obj)
    if end > index.size:  # as read_range says it
        raise CorruptFrameError(f"holds {index.size} bytes")
    first, last = index.frames(start, end)
    got = decode(index, first, last, obj[index.at[first] : index.at[last]], where="obj")
    base = int(index.starts[first]) if first < last else start
    return got[start - base : end - base]


def test_a_payload_comes_back_whole_and_smaller() -> None:
    obj = encode(DATA, FrameSettings(FRAME, 3))
    index = _index(obj)
    assert (index.size, index.count) == (len(DATA), -(-len(DATA) // FRAME))
    assert len(obj) < len(DATA) // 2
    assert _read(obj, 0, len(DATA)) == DATA


@pytest.mark.parametrize(
    ("start", "end"),
    [(0, 1), (FRAME - 1, FRAME + 1), (FRAME, 2 * FRAME), (5, 3 * FRAME + 7), (100, 100)],
)
def test_a_range_decodes_only_the_frames_it_overlaps(start: int, end: int) -> None:
    obj = encode(DATA, FrameSettings(FRAME, 3))
    first, last = _index(obj).frames(start, end)
    assert last - first == (-(-end // FRAME) - start // FRAME if end > start else 0)
    assert _read(obj, start, end) == DATA[start:end]


def test_random_ranges_match_the_payload() -> None:
    obj = encode(DATA, FrameSettings(1_000, 3))
    rng = random.Random(50)
    for _ in range(200):
        a, b = sorted(rng.randrange(len(DATA) + 1) for _ in range(2))
        assert _read(obj, a, b) == DATA[a:b]


def test_an_empty_payload_is_a_seek_table_alone() -> None:
    obj = encode(b"", FrameSettings(FRAME, 3))
    index = _index(obj)
    assert (index.count, index.size, len(obj)) == (0, 0, 17)
    assert _read(obj, 0, 0) == b""


def test_an_exact_multiple_of_the_frame_size_has_no_empty_last_frame() -> None:
    data = DATA[: 8 * FRAME]
    index = _index(encode(data, FrameSettings(FRAME, 3)))
    assert index.count == 8
    assert [int(x) for x in index.starts] == [i * FRAME for i in range(9)]
    assert _read(encode(data, FrameSettings(FRAME, 3)), 7 * FRAME, 8 * FRAME) == data[7 * FRAME :]


@pytest.mark.parametrize("level", [-7, -1, 1, 2, 3, 19, 22])
def test_every_level_writes_frames_with_their_size_and_checksum(level: int) -> None:
    """The compressor's parameters are built by hand (the fast levels' smaller hash
    table): each frame must still carry its content size (the reader checks it against
    the seek table) and its checksum (a flipped byte must fail its frame), at any level."""
    settings = FrameSettings(FRAME, level)
    obj = encode(DATA, settings)
    index = _index(obj)
    for i in range(index.count):
        frame = obj[index.at[i] : index.at[i + 1]]
        params = zstandard.get_frame_parameters(frame)
        assert params.has_checksum
        assert params.content_size == index.starts[i + 1] - index.starts[i]
    assert decode_whole(obj, where="obj") == DATA


def test_the_fast_levels_use_the_small_hash_table_and_the_others_their_own() -> None:
    """Levels 1 and below (zstd's fast strategy) compress with a hash table of at most
    FAST_HASH_LOG; other levels keep zstd's own parameters, so their output is what
    ``zstd`` at that level writes for a frame of that size."""
    for level in (-7, -1, 1):
        frame = FrameSettings(1 << 20, level).compressor().compress(DATA)
        small = zstandard.ZstdCompressionParameters.from_level(
            level, source_size=1 << 20, hash_log=FAST_HASH_LOG,
            write_checksum=1, write_content_size=1,
        )  # fmt: skip
        assert frame == zstandard.ZstdCompressor(compression_params=small).compress(DATA)
    for level in (2, 3, 19):
        frame = FrameSettings(1 << 20, level).compressor().compress(DATA)
        plain = zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=True)
        assert frame == plain.compress(DATA)


def test_a_range_outside_the_payload_is_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        _index(encode(DATA, FrameSettings(FRAME, 3))).frames(0, len(DATA) + 1)


def test_a_plain_zstd_decoder_decompresses_an_object() -> None:
    """What ``zstd -d`` does: every frame in turn, the seek table skipped."""
    obj = encode(DATA, FrameSettings(FRAME, 3))
    reader = zstandard.ZstdDecompressor().stream_reader(obj, read_across_frames=True)
    assert reader.read() == DATA


def test_a_flipped_byte_is_a_corrupt_frame_or_changes_nothing() -> None:
    """Every flip fails a frame's checksum or the seek table, except flips of bits zstd
    never reads (padding of an entropy-coded stream), which decode to the same payload:
    the bytes the digests cover are intact."""
    obj = encode(DATA[:20_000], FrameSettings(FRAME, 3))
    caught = 0
    for at in range(len(obj)):
        bad = bytearray(obj)
        bad[at] ^= 0x40
        try:
            got = _read(bytes(bad), 0, 20_000)
        except CorruptFrameError:
            caught += 1
        else:
            assert got == DATA[:20_000], at
    assert caught > 0.95 * len(obj)
    assert issubclass(CorruptFrameError, DigestMismatchError)


def test_a_cut_object_and_foreign_bytes_are_corrupt_frames() -> None:
    obj = encode(DATA, FrameSettings(FRAME, 3))
    for data in (obj[:-1], obj[1:], DATA[:100], b""):
        with pytest.raises(CorruptFrameError):
            _index(data)


async def test_read_range_and_read_whole_give_plain_and_framed_bytes_alike() -> None:
    backend = MemoryBackend("frames-test")
    obj = encode(DATA, FrameSettings(FRAME, 3))
    await backend.write("plain", DATA)
    await backend.write("framed", obj)
    framed = Framed(len(obj))
    for a, b in [(0, len(DATA)), (FRAME - 3, FRAME + 3), (len(DATA) - 1, len(DATA)), (9, 9)]:
        assert await read_range(backend, "framed", a, b, framed) == DATA[a:b]
        assert await read_range(backend, "plain", a, b, None) == DATA[a:b]
    assert await read_whole(backend, "framed", framed) == DATA
    assert await read_whole(backend, "plain", None) == DATA


def _same_size_other_frames(obj: bytes) -> tuple[bytes, bytes]:
    """Another payload, framed differently, whose object is exactly as long as ``obj``."""
    rng = random.Random(7)
    for n in range(len(obj) - 200, len(obj)):
        payload = rng.randbytes(n)  # incompressible: frames stored raw, sizes predictable
        other = encode(payload, FrameSettings(2 * FRAME, 3))
        if len(other) == len(obj):
            return payload, other
    raise AssertionError("no payload gives an object of the same size")


def test_two_stores_with_the_same_key_and_size_do_not_share_a_seek_table() -> None:
    """An executor reading two cold stores caches each object's seek table by store, key
    and stored size: an object of the same key and size in another store, framed
    otherwise, reads its own frames (sharing the table would make it a false CORRUPT)."""
    first = random.Random(3).randbytes(4 * FRAME + 10)
    obj = encode(first, FrameSettings(FRAME, 3))
    second, other = _same_size_other_frames(obj)
    assert _index(obj).count != _index(other).count
    for store, stored, payload in (("file:///a/cold", obj, first), ("s3://b/cold", other, second)):
        fetch = functools.partial(_slice, stored)
        got = read_range_with(fetch, "k", 10, 3 * FRAME, Framed(len(stored)), store=store)
        assert got == payload[10 : 3 * FRAME]


def _slice(data: bytes, a: int, b: int) -> bytes:
    return data[a:b]


async def test_a_seek_table_longer_than_the_first_tail_read_is_read_again() -> None:
    backend = MemoryBackend("frames-big-table")
    obj = encode(DATA, FrameSettings(100, 3))  # thousands of frames
    await backend.write("framed", obj)
    assert await read_range(backend, "framed", 5_000, 5_321, Framed(len(obj))) == DATA[5_000:5_321]


async def test_a_flipped_byte_read_through_the_decoder_is_a_corrupt_frame() -> None:
    backend = MemoryBackend("frames-flip")
    obj = bytearray(encode(DATA, FrameSettings(FRAME, 3)))
    obj[len(obj) // 3] ^= 1
    await backend.write("framed", bytes(obj))
    with pytest.raises(CorruptFrameError):
        await read_whole(backend, "framed", Framed(len(obj)))
    with pytest.raises(CorruptFrameError):
        await read_range(backend, "framed", 0, len(DATA), Framed(len(obj)))


@pytest.mark.parametrize("data", [DATA, DATA[: FRAME * 2], DATA[:1], b""])
def test_a_file_is_encoded_as_its_bytes_would_be(tmp_path: Path, data: bytes) -> None:
    """Frames of whole and cut lengths, one byte, an empty file (which cannot be mapped)."""
    src, dst = tmp_path / "spool", tmp_path / "spool.zst"
    src.write_bytes(data)
    size, crc = encode_file(src, dst, FrameSettings(FRAME, 3))
    assert size == dst.stat().st_size
    assert crc == digest(dst.read_bytes(), DigestAlgorithm.CRC32C)
    assert dst.read_bytes() == encode(data, FrameSettings(FRAME, 3))


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux /dev/full")
def test_a_full_disk_while_encoding_is_the_disks_error(tmp_path: Path) -> None:
    """The spool file is mapped while frames are written: a failed write must come out as
    itself (the caller reports the full disk), not as an error about the mapping."""
    src = tmp_path / "spool"
    src.write_bytes(DATA * 8)
    with pytest.raises(OSError, match="No space left") as failed:
        encode_file(src, Path("/dev/full"), FrameSettings(FRAME * 64, 1))
    assert failed.value.errno == errno.ENOSPC


def test_the_frame_size_setting_stops_at_the_largest_frame_a_seek_table_holds() -> None:
    assert ColdSettings.default_of("frame_size") <= MAX_FRAME_BYTES
    (frame_size,) = [s for s in SETTINGS if s.key == "cold.frame_size"]
    assert frame_size.parse(MAX_FRAME_BYTES) == MAX_FRAME_BYTES
    with pytest.raises(ValueError, match="between"):
        frame_size.parse(MAX_FRAME_BYTES + 1)


async def test_a_flip_that_decodes_identically_fails_read_whole_on_its_stored_digest() -> None:
    """About 3-5 % of flips touch bits zstd never reads: the payload and its digest are
    unchanged, so only the stored bytes' CRC-32C tells. A range read cannot check it."""
    backend = MemoryBackend("frames-silent")
    obj, framed = encode_framed(DATA, FrameSettings(FRAME, 3))
    assert framed == Framed(len(obj), digest(obj, DigestAlgorithm.CRC32C))
    damaged = silent_flip(obj)
    assert decode_whole(damaged, where="t") == DATA  # what the uncompressed digest sees
    await backend.write("framed", damaged)
    bad = digest(damaged, DigestAlgorithm.CRC32C)
    with pytest.raises(CorruptFrameError) as caught:
        await read_whole(backend, "framed", framed)
    assert str(caught.value) == (
        f"stored digest is {bad}, its commit point says {framed.stored_digest} (framed)"
    )
    assert await read_range(backend, "framed", 0, len(DATA), framed) == DATA  # not checked
    assert await read_whole(backend, "framed", Framed(len(obj))) == DATA  # none recorded


def test_a_damaged_frame_header_is_a_corrupt_frame_not_a_huge_allocation() -> None:
    """A flip in a frame header's content size once made zstd allocate what it claimed
    (petabytes: a MemoryError); every flip of a header byte is a corrupt frame, or
    decodes to the payload."""
    obj = encode(DATA, FrameSettings(FRAME, 3))
    starts = _index(obj).at[:-1]
    for start in (int(a) for a in starts[:3]):
        for at in range(start, start + 14):
            for mask in (0x01, 0x80, 0xB5):
                damaged = bytearray(obj)
                damaged[at] ^= mask
                with contextlib.suppress(CorruptFrameError):
                    assert decode_whole(memoryview(damaged), where="t") == DATA


@pytest.mark.parametrize("size", [0, 1, 1000, (64 << 10) - 1, 64 << 10, (64 << 10) + 1, 200_005])
def test_stored_bound_holds_for_bytes_that_do_not_compress(size: int) -> None:
    """The room a writer reserves for an encoded copy: never less than the encoder makes
    of random bytes (its worst case), and not loose beyond zstd's own bound."""
    settings = FrameSettings(64 << 10, 1)
    stored = len(encode(random.Random(size).randbytes(size), settings))
    frames = -(-size // settings.frame_bytes)
    assert stored <= stored_bound(size, settings) <= size + size // 256 + 96 * frames + 32
