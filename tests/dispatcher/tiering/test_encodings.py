"""A round's compressed COMMIT_LOG objects, encoded ahead of their uploads
(:class:`~tieredstore.dispatcher.tiering.uploader.Encodings`): each started encoding is
taken once and is the one encoder's output, a retry or a segment never started encodes
then, a failure surfaces in ``take``, and ``settle`` leaves no encoding running
(cancelled or not)."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from tieredstore.cold.compressed.frames import FrameSettings, encode
from tieredstore.cold.digests import DigestAlgorithm, hasher
from tieredstore.dispatcher.tiering.commitlog_pass import Spooled
from tieredstore.dispatcher.tiering.uploader import Encodings, encoded_path

FRAMES = FrameSettings(64 << 10, 1)


def _spooled(directory: Path, name: str, data: bytes) -> Spooled:
    path = directory / f"{name}.spool"
    path.write_bytes(data)
    return Spooled(path, len(data), "", 0, 0)


def _payload(i: int, size: int = 300_000) -> bytes:
    """Half text that compresses, half bytes that do not."""
    text = b"".join(b'{"order":%d,"sku":"A-%d"}' % (i, n) for n in range(size // 60))
    return text + os.urandom(size - len(text)) if len(text) < size else text[:size]


def _encode_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("encode")]


def test_a_started_encoding_is_taken_once_and_is_the_encoders_output(tmp_path: Path) -> None:
    segments = [_spooled(tmp_path, str(i), _payload(i)) for i in range(6)]
    encodings = Encodings(FRAMES, threads=2)

    async def run() -> None:
        started = encodings.start(segments)
        for spooled in segments:
            got = await encodings.take(spooled)
            stored = got.path.read_bytes()
            assert got.path == encoded_path(spooled)
            assert stored == encode(spooled.path.read_bytes(), FRAMES)
            crc = hasher(DigestAlgorithm.CRC32C)
            crc.update(stored)
            assert (got.framed.stored_size, got.framed.stored_digest) == (
                len(stored),
                crc.hexdigest(),
            )
        await encodings.settle(started)

    asyncio.run(run())
    assert not _encode_threads()


def test_a_retry_or_a_segment_never_started_is_encoded_when_taken(tmp_path: Path) -> None:
    started, never = _spooled(tmp_path, "a", _payload(1)), _spooled(tmp_path, "b", _payload(2))
    encodings = Encodings(FRAMES, threads=1)

    async def run() -> None:
        round_ = encodings.start([started])
        first = await encodings.take(started)
        first.path.unlink()  # the upload attempt deletes its copy, then is retried
        again = await encodings.take(started)
        assert again.path.read_bytes() == encode(started.path.read_bytes(), FRAMES)
        assert again.framed == first.framed
        late = await encodings.take(never)
        assert late.path.read_bytes() == encode(never.path.read_bytes(), FRAMES)
        await encodings.settle(round_)

    asyncio.run(run())


def test_a_failed_encoding_raises_from_take_and_the_next_take_encodes_afresh(
    tmp_path: Path,
) -> None:
    missing = Spooled(tmp_path / "gone.spool", 10, "", 0, 0)
    encodings = Encodings(FRAMES, threads=1)

    async def run() -> None:
        started = encodings.start([missing])
        with pytest.raises(FileNotFoundError, match=r"gone\.spool"):
            await encodings.take(missing)
        missing.path.write_bytes(b"0123456789")
        got = await encodings.take(missing)
        assert got.path.read_bytes() == encode(b"0123456789", FRAMES)
        await encodings.settle(started)

    asyncio.run(run())


def test_settle_leaves_no_encoding_running_and_no_copy_cut_short(tmp_path: Path) -> None:
    segments = [_spooled(tmp_path, str(i), _payload(i, 2_000_000)) for i in range(12)]
    encodings = Encodings(FRAMES, threads=2)

    async def run() -> None:
        await encodings.settle(encodings.start(segments))  # nothing taken: ended early

    asyncio.run(run())
    assert not _encode_threads()
    for spooled in segments:  # each either never began or was finished
        copy = encoded_path(spooled)
        if copy.exists():
            assert copy.read_bytes() == encode(spooled.path.read_bytes(), FRAMES)
    # The same instance serves the next round.
    asyncio.run(_take_all(encodings, segments[:2]))


async def _take_all(encodings: Encodings, segments: list[Spooled]) -> None:
    started = encodings.start(segments)
    for spooled in segments:
        assert (await encodings.take(spooled)).path.exists()
    await encodings.settle(started)


def test_a_cancelled_settle_still_waits_for_the_running_encodings(tmp_path: Path) -> None:
    segments = [_spooled(tmp_path, str(i), _payload(i, 2_000_000)) for i in range(8)]
    encodings = Encodings(FRAMES, threads=2)

    async def run() -> None:
        settling = asyncio.ensure_future(encodings.settle(encodings.start(segments)))
        await asyncio.sleep(0)  # let it begin waiting, then cancel the round
        settling.cancel()
        with pytest.raises(asyncio.CancelledError):
            await settling
        assert not _encode_threads()

    asyncio.run(run())


def test_threads_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="threads must be at least 1"):
        Encodings(FRAMES, threads=0)


def test_one_round_settling_leaves_an_overlapping_rounds_encodings_alone(tmp_path: Path) -> None:
    """A tick's round may still run while the next tick's starts: the first one's end
    neither cancels nor waits for the second's encodings, whose copies are taken whole."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = [_spooled(tmp_path / "a", str(i), _payload(i, 1_000_000)) for i in range(4)]
    second = [_spooled(tmp_path / "b", str(i), _payload(i + 9, 2_000_000)) for i in range(8)]
    encodings = Encodings(FRAMES, threads=2)

    async def run() -> None:
        earlier, later = encodings.start(first), encodings.start(second)
        settling = asyncio.ensure_future(encodings.settle(earlier))
        taken = [await encodings.take(spooled) for spooled in second]  # while it settles
        await settling
        for spooled, got in zip(second, taken, strict=True):
            assert got.path.read_bytes() == encode(spooled.path.read_bytes(), FRAMES)
        await encodings.settle(later)

    asyncio.run(run())
    assert not _encode_threads()
