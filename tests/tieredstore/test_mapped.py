"""mapped_view: a finished local file read without a copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from tieredstore.mapped import mapped_view


def test_the_view_is_the_files_bytes_and_outlives_its_deletion(tmp_path: Path) -> None:
    path = tmp_path / "spool"
    path.write_bytes(bytes(range(256)) * 1000)
    view = mapped_view(path)
    path.unlink()  # the round's spool removal while a part still holds its view
    assert view.readonly
    assert view.tobytes() == bytes(range(256)) * 1000


def test_an_empty_file_is_an_empty_view(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.touch()
    assert mapped_view(path).nbytes == 0


def test_a_missing_file_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        mapped_view(tmp_path / "absent")
