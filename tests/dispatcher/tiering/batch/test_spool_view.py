"""The batch writer maps each slice's spool file (no copy): a spool file that is not the
size the pass gathered, or is gone, is refused with a StoreError naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tieredstore.dispatcher.tiering.batch.writer import _spool_view
from tieredstore.dispatcher.tiering.commitlog_pass import Spooled
from tieredstore.errors import StoreError


@pytest.mark.parametrize("held", [99, 101])
def test_a_spool_file_of_another_size_than_gathered_is_refused(tmp_path: Path, held: int) -> None:
    path = tmp_path / "0.spool"
    path.write_bytes(b"x" * held)
    spooled = Spooled(path, 100, "", 0, 0)
    with pytest.raises(StoreError, match=f"spool file holds {held} bytes, 100 were gathered"):
        _spool_view(spooled)


def test_a_spool_file_that_is_gone_is_refused_naming_it(tmp_path: Path) -> None:
    spooled = Spooled(tmp_path / "gone.spool", 100, "", 0, 0)
    with pytest.raises(StoreError, match="cannot map the spool file") as caught:
        _spool_view(spooled)
    assert "gone.spool" in str(caught.value)
