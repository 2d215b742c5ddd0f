"""Restore from a cold store whose segments are compressed (``cold.compression = "zstd"``)
writes the same broker store, byte for byte, as from a plain copy of the same tiering."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.support.sidecar.settings import settings_for
from tests.tieredstore.restore.test_restore import SPEC, _check, _params, _restore
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.hot.synth import synthesize

pytestmark = pytest.mark.slow


def _tier(store: Path, cold: Path, state: Path, **kw: object) -> None:
    async def go() -> None:
        settings = settings_for(store, str(cold), state, tiering__batching=False, **kw)
        async with open_runtime(settings) as rt:
            await rt.dispatcher.start(wait_for_lease=False)
            assert not (await rt.dispatcher.catch_up()).errors

    asyncio.run(go())


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for sub in ("commitlog", "consumequeue")
        for p in sorted((root / sub).rglob("*"))
        if p.is_file()
    }


def test_a_compressed_cold_store_restores_to_the_same_bytes(tmp_path: Path) -> None:
    store = synthesize(tmp_path / "store", SPEC).root
    plain, zstd = tmp_path / "plain", tmp_path / "zstd"
    _tier(store, plain, tmp_path / "state-plain")
    _tier(store, zstd, tmp_path / "state-zstd", cold__compression="zstd", cold__frame_size="8K")
    assert any(b'"compression":"zstd"' in p.read_bytes() for p in zstd.rglob("MANIFEST/*.json"))
    _restore(plain, tmp_path / "out-plain", _params(plain, restore_config=False))
    _restore(zstd, tmp_path / "out-zstd", _params(zstd, restore_config=False))
    expected = _files(tmp_path / "out-plain")
    assert expected and _files(tmp_path / "out-zstd") == expected
    assert _check(zstd, tmp_path / "out-zstd").startswith("CLEAN: 2,400 messages of 4 queues")
