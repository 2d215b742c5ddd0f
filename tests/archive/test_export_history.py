"""``export`` follows the committed history: after ``repair`` quarantined a queue's tail
and the queue was tiered again with another segment size, the export holds one row per
committed offset (old code kept the quarantined segments' rows beside the new ones)."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import replace
from pathlib import Path

import pyarrow.dataset as pads
import pytest

from tests.fixtures_sidecar import Diverge, RepairQueue
from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.divergence import T0, TOPIC, divergence_settings
from tieredstore.backends import open_backend
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.export.parquet import ExportReport, ExportRequest, export_parquet
from tieredstore.hot.store import HotStore

pytestmark = pytest.mark.slow  # every test here takes over a second: not in make quick


def _export(cold: Path, out: Path) -> ExportReport:
    async def go() -> ExportReport:
        async with open_backend(str(cold)) as c, open_backend(str(out)) as o:
            return await export_parquet(c, o, ExportRequest(CLUSTER, BROKER), clock=VirtualClock())

    return asyncio.run(go())


def _rows(out: Path) -> collections.Counter[tuple[int, int, int]]:
    """(queue id, queue offset, store time) of every exported row, counted."""
    table = pads.dataset(str(out), format="parquet", partitioning="hive").to_table(
        columns=["queue_id", "queue_offset", "store_timestamp"]
    )
    return collections.Counter(
        (r["queue_id"], r["queue_offset"], int(r["store_timestamp"].timestamp() * 1000))
        for r in table.to_pylist()
    )


def test_export_after_repair_and_a_new_segment_size_has_one_row_per_offset(
    tmp_path: Path,
    diverge: Diverge,
    repair_queue: RepairQueue,
) -> None:
    asyncio.run(diverge(tmp_path))  # tiered in 24 KB segments, then the broker diverged
    cold, out = tmp_path / "cold", tmp_path / "export"
    first = _export(cold, out)
    assert first.exported > 0

    async def repair_and_retier() -> None:
        for qid in (0, 1):
            async with open_runtime(divergence_settings(tmp_path)) as rt:
                await repair_queue(rt, qid)
        other_size = replace(divergence_settings(tmp_path))
        values = dict(other_size.values, **{"tiering.segment_max_bytes": 9 << 10})
        async with open_runtime(replace(other_size, values=values)) as rt:
            await rt.dispatcher.start(wait_for_lease=False)
            tick = await rt.dispatcher.catch_up()
            assert not tick.diverged and tick.messages > 0

    asyncio.run(repair_and_retier())
    again = _export(cold, out)
    assert again.removed > 0 and again.removed_rows > 0
    rows = _rows(out)
    assert max(rows.values()) == 1  # one row per (queue, offset, version)
    per_offset = collections.Counter((q, o) for q, o, _ in rows)
    assert max(per_offset.values()) == 1, "an offset exported twice"
    hot = HotStore(tmp_path / "store")
    for qid in (0, 1):
        rng = hot.queue_range(TOPIC, qid)
        offsets = sorted(o for q, o in per_offset if q == qid)
        assert offsets == list(range(rng.min, rng.max)), qid
    assert any(ts >= T0 + 10_000_000 for _, _, ts in rows)  # the re-written versions
    # A third run changes nothing: the removals were recorded.
    third = _export(cold, out)
    assert (third.exported, third.removed) == (0, 0)
    assert _rows(out) == rows


def test_segments_retention_expired_stay_exported(tmp_path: Path, diverge: Diverge) -> None:
    """Expiry removes a segment from the cold store, and nothing supersedes it: the
    export keeps its rows (it is the archive that outlives cold retention)."""
    asyncio.run(diverge(tmp_path))
    cold, out = tmp_path / "cold", tmp_path / "export"
    _export(cold, out)
    before = _rows(out)
    oldest = min(p for p in cold.rglob("MANIFEST/*.json") if "_quarantine" not in p.parts)
    oldest.unlink()  # what expiry leaves: the manifest gone, nothing in its place
    report = _export(cold, out)
    assert report.removed == 0
    assert _rows(out) == before
