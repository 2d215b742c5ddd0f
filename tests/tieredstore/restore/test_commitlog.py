"""The commitlog writer: the broker's append rule, the BLANK filler, physicalOffset."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from tieredstore.errors import StoreError
from tieredstore.formats.record import BLANK_MAGIC_CODE, MessageRecord, decode_record
from tieredstore.restore.commitlog import CommitLogWriter
from tieredstore.restore.files import FileCache

FILE = 1024


def _records(sizes_body: list[int]) -> tuple[bytearray, np.ndarray]:
    recs = [
        MessageRecord.build(
            topic="T",
            body=b"b" * n,
            queue_id=0,
            queue_offset=i,
            physical_offset=777,
            store_timestamp=1,
        ).encode()
        for i, n in enumerate(sizes_body)
    ]
    return bytearray(b"".join(recs)), np.array([len(r) for r in recs], dtype=np.int64)


def test_records_roll_with_the_filler_and_carry_their_new_offsets(tmp_path: Path) -> None:
    files = FileCache()
    writer = CommitLogWriter(tmp_path, FILE, position=FILE, files=files)
    data, sizes = _records([300, 300, 300, 10, 500])  # ~391 bytes each, the 4th ~101
    placed = writer.append(data, sizes)
    files.close()
    # The broker's rule: a record goes where it is only if size + 8 bytes remain.
    pos, expect = FILE, []
    for size in sizes.tolist():
        if (pos % FILE) + size + 8 > FILE:
            pos += FILE - pos % FILE
        expect.append(pos)
        pos += size
    assert placed.tolist() == expect
    assert writer.position == pos
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"{b:020d}" for b in range(FILE, expect[-1] + 1, FILE)]
    assert all((tmp_path / n).stat().st_size == FILE for n in names)
    for at, size in zip(expect, sizes.tolist(), strict=True):
        raw = (tmp_path / f"{at - at % FILE:020d}").read_bytes()[at % FILE : at % FILE + size]
        assert decode_record(raw).physical_offset == at
    first = (tmp_path / f"{FILE:020d}").read_bytes()
    end_of_data = expect[1] + int(sizes[1]) - FILE  # the third record went to the next file
    assert struct.unpack_from(">ii", first, end_of_data) == (FILE - end_of_data, BLANK_MAGIC_CODE)
    assert first[end_of_data + 8 :] == bytes(FILE - end_of_data - 8)


def test_a_record_larger_than_a_file_is_refused(tmp_path: Path) -> None:
    writer = CommitLogWriter(tmp_path, FILE, position=FILE, files=FileCache())
    data, sizes = _records([2000])
    with pytest.raises(StoreError, match="does not fit a commitlog file of 1024 bytes"):
        writer.append(data, sizes)


def test_resume_discards_what_follows_the_committed_end(tmp_path: Path) -> None:
    files = FileCache()
    writer = CommitLogWriter(tmp_path, FILE, position=FILE, files=files)
    data, sizes = _records([300, 300, 300, 300])
    placed = writer.append(data, sizes)
    files.close()
    keep = int(placed[1] + sizes[1])  # as if only two records had been committed
    CommitLogWriter(tmp_path, FILE, position=keep, files=FileCache())
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{FILE:020d}"]
    tail = (tmp_path / f"{FILE:020d}").read_bytes()[keep - FILE :]
    assert tail == bytes(len(tail))
