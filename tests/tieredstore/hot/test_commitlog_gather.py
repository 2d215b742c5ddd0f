"""The hot reader's gather against references: ``HotCommitlog.gather`` against a
``pread`` per record (records interleaved with others', adjacent, out of order or
overlapping, in several files; a copy that outlives the mappings), and the native
``copy_parts`` and ``copy_parts_into`` (``tieredstore/hot/_gather.c``) against their pure
references byte for byte, errors included. The suite's install must have built the native
gather."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tieredstore.errors import OffsetOutOfRangeError, TruncatedDataError
from tieredstore.hot.commitlog import (
    NATIVE,
    HotCommitlog,
    Part,
    copy_parts,
    copy_parts_into,
    pure_copy_parts,
    pure_copy_parts_into,
)
from tieredstore.hot.files import MappedFileList

FILE_SIZE = 64 << 10
FILES = 3


@pytest.fixture(scope="module")
def commitlog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three commit-log files of distinct bytes, named by their base offsets."""
    root = tmp_path_factory.mktemp("commitlog")
    rnd = np.random.default_rng(7)
    for i in range(FILES):
        data = rnd.integers(0, 256, FILE_SIZE, dtype=np.uint8).tobytes()
        (root / f"{i * FILE_SIZE:020d}").write_bytes(data)
    return root


def reference(root: Path, offsets: list[int], sizes: list[int]) -> bytes:
    """Each record read alone from its file (the pure reference)."""
    out = bytearray()
    for offset, size in zip(offsets, sizes, strict=True):
        fd = os.open(root / f"{offset // FILE_SIZE * FILE_SIZE:020d}", os.O_RDONLY)
        try:
            out += os.pread(fd, size, offset % FILE_SIZE)
        finally:
            os.close(fd)
    return bytes(out)


@st.composite
def records(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """Records inside one file each: ascending and interleaved (a queue's records among
    other queues'), adjacent (one run), backwards or overlapping."""
    offsets: list[int] = []
    sizes: list[int] = []
    at = draw(st.integers(0, FILE_SIZE * FILES - 1))
    broken = draw(st.booleans())  # a consume queue pointing backwards or at shared bytes
    steps = ["gap", "adjacent", "back", "overlap"] if broken else ["gap", "gap", "adjacent"]
    for _ in range(draw(st.integers(1, 200))):
        step = draw(st.sampled_from(steps))
        if offsets:
            last_end = offsets[-1] + sizes[-1]
            at = {
                "gap": last_end + draw(st.integers(1, 700)),
                "adjacent": last_end,
                "back": draw(st.integers(0, FILE_SIZE * FILES - 1)),
                "overlap": max(0, last_end - draw(st.integers(1, 50))),
            }[step]
        if at >= FILE_SIZE * FILES:
            break
        room = FILE_SIZE - at % FILE_SIZE  # a record never crosses its file's end
        size = draw(st.integers(0, min(room, 200)))
        offsets.append(at)
        sizes.append(size)
    return offsets, sizes


@settings(max_examples=300, deadline=None)
@given(records())
def test_gather_equals_a_pread_per_record(
    commitlog: Path, case: tuple[list[int], list[int]]
) -> None:
    offsets, sizes = case
    with HotCommitlog(MappedFileList.scan(commitlog)) as cl:
        got = cl.gather(np.array(offsets, np.int64), np.array(sizes, np.int64))
    # Read after the mappings are closed: the copy is the caller's.
    assert bytes(got) == reference(commitlog, offsets, sizes)
    assert isinstance(got, bytearray)  # the caller's to change


def test_the_copy_is_the_callers_to_change(commitlog: Path) -> None:
    """Hundreds of records of one file, each among others' records, written to in place
    (the fingerprint zeroes physicalOffset fields in its copy): the store is untouched."""
    offsets = list(range(0, FILE_SIZE - 100, 160))
    sizes = [100] * len(offsets)
    expected = reference(commitlog, offsets, sizes)
    with HotCommitlog(MappedFileList.scan(commitlog)) as cl:
        got = cl.gather(np.array(offsets, np.int64), np.array(sizes, np.int64))
        got[:4] = b"\0\0\0\0"
        again = cl.gather(np.array(offsets, np.int64), np.array(sizes, np.int64))
    assert bytes(got) == b"\0\0\0\0" + expected[4:]
    assert bytes(again) == expected == reference(commitlog, offsets, sizes)  # store untouched


def _resident(path: Path) -> int:
    """This process's resident bytes of its mapping of ``path`` (``/proc/self/smaps``)."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.endswith(str(path))]
    (rss,) = [x for x in lines[at + 1 : at + 30] if x.startswith("Rss:")][:1]
    return int(rss.split()[1]) * 1024


def test_release_drops_the_pages_below_an_offset_from_the_process_only(
    commitlog: Path,
) -> None:
    """What the fingerprint calls behind itself: the pages below the offset leave the
    resident set (those of later files and above it stay); reading there again maps them
    again, the same bytes."""
    offsets = list(range(0, FILE_SIZE * 2, 4096))  # a record on every page of two files
    sizes = [100] * len(offsets)
    first, second = (commitlog / f"{i * FILE_SIZE:020d}" for i in range(2))
    with HotCommitlog(MappedFileList.scan(commitlog)) as cl:
        cl.gather(np.array(offsets, np.int64), np.array(sizes, np.int64))
        assert _resident(first) == _resident(second) == FILE_SIZE
        cl.release(FILE_SIZE + FILE_SIZE // 2 + 100)  # inside the second file's 9th page
        assert _resident(first) == 0
        assert _resident(second) == FILE_SIZE // 2
        cl.release(FILE_SIZE // 4)  # behind what was released: nothing more
        assert _resident(second) == FILE_SIZE // 2
        again = cl.gather(np.array(offsets, np.int64), np.array(sizes, np.int64))
        assert _resident(first) == FILE_SIZE
    assert bytes(again) == reference(commitlog, offsets, sizes)


def test_records_past_the_files_are_refused(commitlog: Path) -> None:
    with HotCommitlog(MappedFileList.scan(commitlog)) as cl:
        with pytest.raises(OffsetOutOfRangeError, match="past the newest"):
            cl.gather(np.array([0, FILE_SIZE * FILES], np.int64), np.array([10, 10], np.int64))
        with pytest.raises(TruncatedDataError, match="crosses the end"):
            cl.gather(np.array([0, FILE_SIZE - 5], np.int64), np.array([10, 10], np.int64))


def test_the_install_built_the_native_gather() -> None:
    """`make` builds it with the machine's C compiler; an install that silently fell
    back to the pure gather (a compile error, no compiler) fails here, not in a bench."""
    assert NATIVE, "tieredstore/hot/_gather.c was not built: see the install's output"


@st.composite
def parts_of(draw: st.DrawFn) -> tuple[list[bytes], list[tuple[list[int], list[int]]]]:
    """Buffers and runs inside each, in any order, overlapping or empty."""
    datas, runs = [], []
    for _ in range(draw(st.integers(0, 4))):
        data = draw(st.binary(min_size=0, max_size=400))
        bounds = [sorted(draw(st.lists(st.integers(0, len(data)), min_size=2, max_size=2)))
                  for _ in range(draw(st.integers(0, 40)))]  # fmt: skip
        datas.append(data)
        runs.append(([a for a, _ in bounds], [b for _, b in bounds]))
    return datas, runs


@settings(max_examples=300, deadline=None)
@given(parts_of())
def test_native_copy_parts_equals_the_pure_reference(
    case: tuple[list[bytes], list[tuple[list[int], list[int]]]],
) -> None:
    datas, runs = case
    expected = b"".join(
        data[a:b]
        for data, (starts, ends) in zip(datas, runs, strict=True)
        for a, b in zip(starts, ends, strict=True)
    )
    for kind in (bytes, bytearray, memoryview):
        parts: list[Part] = [
            (kind(data), np.array(starts, np.int64), np.array(ends, np.int64))
            for data, (starts, ends) in zip(datas, runs, strict=True)
        ]
        native, pure = copy_parts(parts), pure_copy_parts(parts)
        assert isinstance(native, bytearray) and isinstance(pure, bytearray)
        assert native == pure == expected
        # Into a buffer used before (its tail left as it was), a bytearray or an array.
        for into in (copy_parts_into, pure_copy_parts_into):
            out = bytearray(b"\xee" * (len(expected) + 3))
            assert into(parts, out) == len(expected)
            assert out == expected + b"\xee" * 3
            arr = np.full(len(expected), 7, np.uint8)
            assert into(parts, arr) == len(expected) and arr.tobytes() == expected


@pytest.mark.parametrize(
    ("starts", "ends", "message"),
    [
        ([0, 5], [4, 11], "run 1 is \\[5, 11\\), not inside a buffer of 10 bytes"),
        ([-1], [3], "run 0 is \\[-1, 3\\)"),
        ([4], [3], "run 0 is \\[4, 3\\)"),
        ([0, 1], [2], "2 starts but 1 ends"),
    ],
)
def test_runs_outside_the_buffer_are_refused_by_both(
    starts: list[int], ends: list[int], message: str
) -> None:
    data = bytes(range(10))
    good: Part = (data, np.array([0], np.int64), np.array([1], np.int64))
    bad: Part = (data, np.array(starts, np.int64), np.array(ends, np.int64))
    for copy in (copy_parts, pure_copy_parts):
        with pytest.raises(ValueError, match=message):
            copy([good, bad])
    for into in (copy_parts_into, pure_copy_parts_into):
        with pytest.raises(ValueError, match=message):
            into([good, bad], bytearray(100))


def test_a_buffer_too_small_is_refused_by_both_and_left_as_it_was() -> None:
    data = bytes(range(10))
    parts: list[Part] = [(data, np.array([0, 5], np.int64), np.array([4, 10], np.int64))]
    for into in (copy_parts_into, pure_copy_parts_into):
        out = bytearray(8)
        with pytest.raises(ValueError, match="add up to 9 bytes, more than the 8 of the buffer"):
            into(parts, out)
        assert out == bytearray(8)
    with pytest.raises(BufferError):  # not writable
        copy_parts_into(parts, b"x" * 20)  # type: ignore[arg-type]


def test_gather_into_reads_what_gather_reads(commitlog: Path) -> None:
    offsets = np.array(
        [o for o in range(0, FILE_SIZE * 2, 1000) if o % FILE_SIZE < FILE_SIZE - 100]
    )
    sizes = np.full(offsets.size, 100, np.int64)
    out = np.empty(int(sizes.sum()) + 50, np.uint8)
    with HotCommitlog(MappedFileList.scan(commitlog)) as cl:
        view = cl.gather_into(offsets, sizes, out)
        assert (
            bytes(view)
            == bytes(cl.gather(offsets, sizes))
            == reference(commitlog, offsets.tolist(), sizes.tolist())
        )
        assert view.nbytes == int(sizes.sum())


def test_the_native_gather_refuses_what_is_not_parts_of_int64s() -> None:
    from tieredstore.hot import _gather

    data, one = bytes(range(10)), np.array([0], np.int64).tobytes()
    with pytest.raises(ValueError, match="part 1: ends is not a buffer of int64s \\(3 bytes\\)"):
        _gather.gather([(data, one, one), (data, one, bytes(3))])
    with pytest.raises(TypeError, match="part 0 is not a"):
        _gather.gather([[data, one, one]])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        _gather.gather([(object(), one, one)])
    with pytest.raises(TypeError, match="list or tuple"):
        _gather.gather(7)  # type: ignore[arg-type]
    four = np.array([4], np.int64)
    assert _gather.gather([(data, one, four), (b"xyz", one, one)]) == bytearray(data[:4])
    assert _gather.gather(()) == bytearray()
