"""``Pieces``: a byte range as views over the parts it was read into."""

from __future__ import annotations

import numpy as np
import pytest

from tieredstore.cold.pieces import Pieces

DATA = bytes(range(256)) * 4


def _parts(part: int) -> list[bytes]:
    return [DATA[i : i + part] for i in range(0, len(DATA), part)]


@pytest.mark.parametrize("part", [1, 7, 100, 1024, 4096])
@pytest.mark.parametrize(("start", "end"), [(0, 1024), (5, 6), (99, 301), (1000, 1024)])
def test_a_range_of_parts_is_those_bytes(part: int, start: int, end: int) -> None:
    pieces = Pieces.of_parts(_parts(part), 0, start, end)
    assert (len(pieces), pieces.tobytes()) == (end - start, DATA[start:end])
    assert all(v.nbytes for v in pieces.views)
    width = min(36, end - start)
    starts = np.array([0, end - start - width, (end - start - width) // 2], dtype=np.int64)
    expected = np.frombuffer(DATA[start:end], dtype=np.uint8)[starts[:, None] + np.arange(width)]
    assert (pieces.rows(starts, width) == expected).all()


def test_parts_from_a_later_base_and_ranges_they_do_not_cover() -> None:
    parts = _parts(100)[3:6]  # object bytes [300, 600)
    assert Pieces.of_parts(parts, 300, 350, 600).tobytes() == DATA[350:600]
    with pytest.raises(ValueError, match="do not cover"):
        Pieces.of_parts(parts, 300, 250, 400)
    with pytest.raises(ValueError, match="do not cover"):
        Pieces.of_parts(parts, 300, 500, 601)


def test_one_whole_buffer_is_returned_as_is_and_positions_are_checked() -> None:
    pieces = Pieces.of(DATA)
    assert pieces.tobytes() is DATA
    assert Pieces.of(b"").views == () and Pieces.of(b"").tobytes() == b""
    with pytest.raises(IndexError):
        pieces.rows(np.array([len(DATA) - 3], dtype=np.int64), 4)
    with pytest.raises(IndexError):
        Pieces.of_parts(_parts(7), 0, 0, 20).rows(np.array([-1], dtype=np.int64), 1)
