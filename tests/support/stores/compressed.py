"""Test helper: turn some of a local cold copy's segments into compressed ones, as a
sidecar with ``cold.compression = "zstd"`` would have written them (manifest format 3,
the COMMIT_LOG object as seekable zstd frames, size and digest those of the plain bytes).
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from tieredstore.cold.batch import HEAD_PROBE, BatchHead, read_batch_head
from tieredstore.cold.compressed.framed import Framed, decode_stored
from tieredstore.cold.compressed.frames import FrameSettings, encode
from tieredstore.cold.manifest import COMPRESSED_VERSION, Manifest, read_manifest
from tieredstore.errors import CorruptFrameError

#: Small frames, so every segment of a test store has several.
TEST_FRAMES = FrameSettings(frame_bytes=4096, level=3)


def compress_segment(cold: Path, m: Manifest, frames: FrameSettings = TEST_FRAMES) -> Manifest:
    """Rewrite segment ``m`` under ``cold`` compressed; return its new manifest (same key)."""
    cl_path = cold / m.commit_log_key
    stored = encode(cl_path.read_bytes(), frames)
    cl_path.write_bytes(stored)
    ref = dataclasses.replace(m.commit_log, framed=Framed(len(stored)))
    new = dataclasses.replace(m, format_version=COMPRESSED_VERSION, commit_log=ref)
    (cold / new.key).write_bytes(new.to_json())
    return new


def compress_every_other(cold: Path) -> list[Manifest]:
    """Compress every other segment (in key order) of the local cold store ``cold``;
    return the compressed segments' manifests."""
    keys = sorted(str(p.relative_to(cold)) for p in cold.rglob("MANIFEST/*.json"))
    return [compress_segment(cold, read_manifest((cold / k).read_bytes(), k)) for k in keys[::2]]


def silent_flip(obj: bytes, key: str) -> bytes:
    """The compressed batch object ``obj`` (stored at ``key``) with one bit of its data
    section flipped such that its frames still decode to the same data (found by brute
    force: a frame header's unused bits): only the stored data digest tells."""
    head = read_batch_head(obj[:HEAD_PROBE], key=key, object_size=len(obj))
    if isinstance(head, int):
        head = read_batch_head(obj[:head], key=key, object_size=len(obj))
    assert isinstance(head, BatchHead) and head.framed is not None, f"{key}: not compressed"
    want = decode_stored(obj, head.framed, where=key)
    for at in range(head.data_offset, len(obj)):
        for bit in range(8):
            flipped = bytearray(obj)
            flipped[at] ^= 1 << bit
            with contextlib.suppress(CorruptFrameError):
                if decode_stored(bytes(flipped), head.framed, where=key) == want:
                    return bytes(flipped)
    raise AssertionError(f"{key}: every flip of its data section changes what it decodes to")
