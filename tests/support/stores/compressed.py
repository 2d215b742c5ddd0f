"""Test helper: turn some of a local cold copy's segments into compressed ones, as a
sidecar with ``cold.compression = "zstd"`` would have written them (manifest format 3,
the COMMIT_LOG object as seekable zstd frames, size and digest those of the plain bytes,
stored_size and stored_digest those of the compressed ones).
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from tieredstore.backends.base import Backend
from tieredstore.cold.batch import HEAD_PROBE, BatchHead, read_batch_head
from tieredstore.cold.compressed.framed import decode_stored, encode_framed
from tieredstore.cold.compressed.frames import FrameSettings, decode_whole
from tieredstore.cold.manifest import COMPRESSED_VERSION, Manifest, read_manifest
from tieredstore.cold.segment import Segment
from tieredstore.errors import CorruptFrameError

#: Small frames, so every segment of a test store has several.
TEST_FRAMES = FrameSettings(frame_bytes=4096, level=3)


def compress_segment(cold: Path, m: Manifest, frames: FrameSettings = TEST_FRAMES) -> Manifest:
    """Rewrite segment ``m`` under ``cold`` compressed; return its new manifest (same key)."""
    cl_path = cold / m.commit_log_key
    stored, framed = encode_framed(cl_path.read_bytes(), frames)
    cl_path.write_bytes(stored)
    ref = dataclasses.replace(m.commit_log, framed=framed)
    new = dataclasses.replace(m, format_version=COMPRESSED_VERSION, commit_log=ref)
    (cold / new.key).write_bytes(new.to_json())
    return new


def compress_every_other(cold: Path) -> list[Manifest]:
    """Compress every other segment (in key order) of the local cold store ``cold``;
    return the compressed segments' manifests."""
    keys = sorted(str(p.relative_to(cold)) for p in cold.rglob("MANIFEST/*.json"))
    return [compress_segment(cold, read_manifest((cold / k).read_bytes(), k)) for k in keys[::2]]


def silent_flip(stored: bytes) -> bytes:
    """``stored`` (a whole seekable zstd object) with one byte flipped such that it still
    decodes to the very same payload: found by trying every position and bit in turn
    (about 3-5 % of single-byte flips are such; the first is taken).

    Raises:
        AssertionError: no such flip exists in ``stored``.
    """
    payload = decode_whole(stored, where="silent_flip")
    damaged = bytearray(stored)
    for at in range(len(stored)):
        for bit in range(8):
            damaged[at] ^= 1 << bit
            try:
                if decode_whole(memoryview(damaged), where="silent_flip") == payload:
                    return bytes(damaged)
            except CorruptFrameError:
                pass
            damaged[at] ^= 1 << bit
    raise AssertionError("every single-bit flip of the object changes what it decodes to")


async def upload_compressed(
    backend: Backend, segment: Segment, frames: FrameSettings = TEST_FRAMES
) -> Manifest:
    """Write ``segment`` as a sidecar with ``cold.compression = "zstd"`` would, in commit
    order (COMMIT_LOG compressed, CONSUME_QUEUE, then its format-3 manifest); return it."""
    stored, framed = encode_framed(segment.commit_log, frames)
    m = segment.manifest
    ref = dataclasses.replace(m.commit_log, framed=framed)
    m = dataclasses.replace(m, format_version=COMPRESSED_VERSION, commit_log=ref)
    await backend.write(m.commit_log_key, stored)
    await backend.write(m.consume_queue_key, segment.consume_queue)
    await backend.write(m.key, m.to_json())
    return m


def silent_batch_flip(obj: bytes, key: str) -> bytes:
    """The compressed batch object ``obj`` (stored at ``key``) with one bit of its data
    section flipped such that its frames still decode to the same data (found by brute
    force: a frame header's unused bits): only the stored data digest tells."""
    head = read_batch_head(obj[:HEAD_PROBE], key=key, object_size=len(obj))
    if isinstance(head, int):
        head = read_batch_head(obj[:head], key=key, object_size=len(obj))
    assert isinstance(head, BatchHead) and head.framed is not None, f"{key}: not compressed"
    framed = dataclasses.replace(head.framed, stored_digest=None)  # decoding alone
    want = decode_stored(obj, framed, where=key)
    for at in range(head.data_offset, len(obj)):
        for bit in range(8):
            flipped = bytearray(obj)
            flipped[at] ^= 1 << bit
            with contextlib.suppress(CorruptFrameError):
                if decode_stored(bytes(flipped), framed, where=key) == want:
                    return bytes(flipped)
    raise AssertionError(f"{key}: every flip of its data section changes what it decodes to")
