"""EncodeAhead: the whole frames of a file that grows, encoded in a thread of their own,
finish into the object a one-go encoding writes; a failure only drops the prefix."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from tieredstore.cold.compressed.encode_ahead import EncodeAhead, encoded_path
from tieredstore.cold.compressed.frames import FrameSettings, encode, encode_file

SETTINGS = FrameSettings(frame_bytes=1000, level=1)
DATA = b"".join(b"record %d|" % i + bytes([i % 251]) * (i % 97) for i in range(1500))


def _grow(paths: list[Path], ahead: EncodeAhead, rng: random.Random) -> None:
    """Append DATA to every file in random pieces, telling ``ahead`` after each."""
    at = [0] * len(paths)
    while min(at) < len(DATA):
        job = rng.randrange(len(paths))
        n = min(rng.randint(1, 3000), len(DATA) - at[job])
        with paths[job].open("ab") as f:
            f.write(DATA[at[job] : at[job] + n])
        at[job] += n
        ahead.grown(job, at[job])


def test_frames_encoded_as_files_grow_finish_into_the_one_go_encoding(tmp_path: Path) -> None:
    paths = [tmp_path / f"segment-{i}" for i in range(3)]
    ahead = EncodeAhead(paths, [True, False, True], SETTINGS)
    try:
        _grow(paths, ahead, random.Random(5))
        prefixes = ahead.finish()
    finally:
        ahead.close()
    assert set(prefixes) == {0, 2}  # the one not chosen is not encoded
    assert not encoded_path(paths[1]).exists()
    want = encode(DATA, SETTINGS)
    for job, prefix in prefixes.items():
        assert prefix.raw == len(DATA) // 1000 * 1000  # every whole frame, ahead
        size, _crc = encode_file(paths[job], encoded_path(paths[job]), SETTINGS, prefix)
        assert encoded_path(paths[job]).read_bytes() == want
        assert size == len(want)


def test_a_file_that_cannot_be_read_loses_only_its_prefix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    paths = [tmp_path / "gone", tmp_path / "here"]
    paths[1].write_bytes(DATA)
    ahead = EncodeAhead(paths, [True, True], SETTINGS)
    with caplog.at_level(logging.WARNING):
        ahead.grown(0, len(DATA))  # never written: the encoder cannot open it
        ahead.grown(1, len(DATA))
        prefixes = ahead.finish()
    ahead.close()
    assert set(prefixes) == {1}
    assert "left to the upload" in caplog.text
