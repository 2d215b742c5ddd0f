"""``HotCommitlog.gather`` against a reference that reads each record with its own
``pread``: records interleaved with others', adjacent, out of order or overlapping,
in several files, and a copy that outlives the mappings."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tieredstore.errors import OffsetOutOfRangeError, TruncatedDataError
from tieredstore.hot.commitlog import HotCommitlog
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


def test_records_past_the_files_are_refused(commitlog: Path) -> None:
    with HotCommitlog(MappedFileList.scan(commitlog)) as cl:
        with pytest.raises(OffsetOutOfRangeError, match="past the newest"):
            cl.gather(np.array([0, FILE_SIZE * FILES], np.int64), np.array([10, 10], np.int64))
        with pytest.raises(TruncatedDataError, match="crosses the end"):
            cl.gather(np.array([0, FILE_SIZE - 5], np.int64), np.array([10, 10], np.int64))
