"""Compressing a segment's first frames while the tiering pass still gathers the rest.

With ``cold.compression = "zstd"`` a segment's COMMIT_LOG object is its spool file as
seekable zstd frames. Encoded only once the pass
(:mod:`tieredstore.dispatcher.tiering.commitlog_pass`) has gathered the whole round,
zstd runs after the pass, on the critical path. The pass writes every segment's spool
file front to back, so each whole frame is final as soon as the file has grown past it:
:class:`EncodeAhead` encodes those frames in a thread of its own while the pass goes on
(:func:`~tieredstore.cold.compressed.frames.encode_prefix`, the frames
:func:`~tieredstore.cold.compressed.frames.encode_file` writes for the same bytes), and
the upload then writes only the last frames and the seek table. The object is the same
byte for byte.

Only the segments that will be uploaded as segments are encoded ahead (a segment that
goes into a batch object is compressed with the batch). Encoding ahead never fails the
pass: an error drops that segment's prefix (the upload encodes the whole file), and the
encoded files live in the round's spool directory, removed with it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tieredstore.cold.compressed.frames import EncodedPrefix, FrameSettings, encode_prefix

__all__ = ["EncodeAhead", "encoded_path"]

log = logging.getLogger(__name__)


def encoded_path(spool: Path) -> Path:
    """Where a spool file's encoding is written: beside it, ``<spool>.zst``."""
    return spool.with_name(spool.name + ".zst")


class EncodeAhead:
    """Encodes the whole frames of the chosen spool files as they grow (module doc).

    :meth:`grown` is called by the spool's writer after it wrote to a file; the encoding
    runs in one thread of its own. :meth:`finish` waits for it and returns each file's
    prefix; :meth:`close` stops it (idempotent)."""

    def __init__(self, paths: Sequence[Path], chosen: Sequence[bool], settings: FrameSettings):
        self.settings = settings
        self._paths = paths
        self._prefix: dict[int, EncodedPrefix | None] = {
            job: EncodedPrefix(encoded_path(paths[job])) for job, on in enumerate(chosen) if on
        }
        self._asked = dict.fromkeys(self._prefix, 0)  # bytes each file had when last asked
        self._lock = threading.Lock()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="encode-ahead")

    def grown(self, job: int, size: int) -> None:
        """``job``'s spool file now holds ``size`` bytes: encode its whole frames once a
        new one is complete."""
        asked = self._asked.get(job)
        if asked is None or size // self.settings.frame_bytes == asked // self.settings.frame_bytes:
            return
        self._asked[job] = size
        self._thread.submit(self._encode, job, size)

    def _encode(self, job: int, size: int) -> None:
        with self._lock:
            prefix = self._prefix[job]
        if prefix is None:
            return
        try:
            prefix = encode_prefix(self._paths[job], prefix, size, self.settings)
        except OSError as exc:  # the upload encodes the whole file instead
            log.warning("encoding %s ahead failed, left to the upload: %s", self._paths[job], exc)
            prefix = None
        with self._lock:
            self._prefix[job] = prefix

    def finish(self) -> dict[int, EncodedPrefix]:
        """Wait for every encoding asked for; each chosen file's prefix (none for a file
        whose encoding failed)."""
        self._thread.shutdown(wait=True)
        with self._lock:
            return {job: p for job, p in self._prefix.items() if p is not None and p.raw}

    def close(self) -> None:
        """Stop: encodings not yet begun are dropped; one under way is waited for."""
        self._thread.shutdown(wait=True, cancel_futures=True)
