"""A spool that fits: rounds planned within the spool's room, a segment that cannot fit
stops its queue with an error and a metric (:mod:`tieredstore.dispatcher.tiering.spool_room`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tests.support.stores.coldcheck import assert_cold_matches_hot
from tieredstore.backends import open_backend
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.cold.compressed.frames import FrameSettings, stored_bound
from tieredstore.dispatcher.tiering.planner import SegmentPlan
from tieredstore.dispatcher.tiering.spool_room import SPOOL_RESERVE, RoundBudget, spool_room
from tieredstore.errors import SpoolTooSmallError
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.hot.synth import SynthSpec, synthesize

KEY = QueueKey("T", 0)


def _plan(nbytes: int, count: int = 10) -> SegmentPlan:
    from dataclasses import fields

    values: dict[str, object] = {f.name: None for f in fields(SegmentPlan)}
    values.update(start=0, end=count, nbytes=nbytes, units=np.zeros(count))
    return SegmentPlan(**values)  # type: ignore[arg-type]


def test_a_round_takes_what_fits_and_refuses_one_segment_too_big() -> None:
    budget = RoundBudget(max_records=1000, max_bytes=100)
    assert budget.admit(KEY, first := _plan(60)) is first
    assert budget.admit(KEY, _plan(60)) is None  # next round
    assert not budget.full()
    alone = RoundBudget(max_records=1000, max_bytes=100).admit(KEY, _plan(101))
    assert isinstance(alone, SpoolTooSmallError)
    assert str(alone).startswith("segment of 101 B does not fit the spool: 100 B free")
    assert RoundBudget(max_records=10, max_bytes=100).admit(KEY, _plan(10, 10)) is not None


def test_the_room_is_free_space_less_the_reserve_and_at_most_the_cap(tmp_path: Path) -> None:
    import shutil

    free = shutil.disk_usage(tmp_path).free
    room = spool_room(tmp_path / "state" / "spool", 0)  # not created yet: its parent is asked
    assert abs(room - (free - SPOOL_RESERVE)) < 256 << 20  # the disk is shared: roughly
    assert spool_room(tmp_path / "spool", 4096) == 4096


SPEC = SynthSpec(topics=2, queues=2, messages=600, body_min=200, body_max=900, seed=3)


async def test_a_backlog_larger_than_the_spool_is_tiered_in_smaller_rounds(tmp_path: Path) -> None:
    synthesize(tmp_path / "store", SPEC)
    cold = str(tmp_path / "cold")
    # 32 KiB segments; a round may spool 80 KiB: two segments at a time.
    settings = settings_for(tmp_path / "store", cold, tmp_path / "state",
                            tiering__spool_max_bytes=80 << 10)  # fmt: skip
    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        report = await rt.dispatcher.catch_up()
        assert not report.errors and report.segments + report.slices > 6
        assert rt.metrics.spool_too_small._value.get() == 0
    async with open_backend(cold) as backend:
        await assert_cold_matches_hot(backend, HotStore(tmp_path / "store"), CLUSTER, BROKER)


async def test_a_segment_larger_than_the_spool_stops_with_an_error_and_a_metric(
    tmp_path: Path,
) -> None:
    synthesize(tmp_path / "store", SPEC)
    settings = settings_for(tmp_path / "store", str(tmp_path / "cold"), tmp_path / "state",
                            tiering__spool_max_bytes=4 << 10)  # fmt: skip
    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        report = await rt.dispatcher.catch_up()
        assert report.segments + report.slices == 0 and len(report.errors) == 4  # one per queue
        assert all("does not fit the spool: 4.0 KiB free" in e for e in report.errors)
        assert rt.metrics.spool_too_small._value.get() == 1
        assert rt.metrics.errors.labels("SpoolTooSmallError")._value.get() == 4


def test_a_compressed_round_counts_each_segments_encoded_copy_too() -> None:
    frames = FrameSettings(1 << 20, 1)
    cost = 1000 + stored_bound(1000, frames)
    budget = RoundBudget(max_records=1000, max_bytes=cost, encoded=frames)
    assert budget.admit(KEY, first := _plan(1000)) is first
    assert budget.bytes == cost and budget.full()
    alone = RoundBudget(max_records=1000, max_bytes=cost - 1, encoded=frames).admit(
        KEY, _plan(1000)
    )
    assert isinstance(alone, SpoolTooSmallError)
    assert str(alone).startswith("segment of 1000 B (with its compressed copy) does not fit")
    assert RoundBudget(max_records=1000, max_bytes=1000).admit(KEY, _plan(1000)) is not None
