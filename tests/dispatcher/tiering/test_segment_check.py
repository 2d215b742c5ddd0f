"""A built segment is checked end to end before anything of it is uploaded.

The spooled COMMIT_LOG of a planned segment must hold exactly its units' records, back to
back, each with its queue offset and its rewritten cold offset, and the store-time range
the manifest will record. Each test damages one of those and expects the check to name
the segment and the offset.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tieredstore.dispatcher.tiering.commitlog_pass import GatherJob, Spooled, gather_segments
from tieredstore.dispatcher.tiering.committer import check_built
from tieredstore.dispatcher.tiering.planner import Limits, SegmentPlan, plan_segment
from tieredstore.errors import CorruptRecordError, CorruptUnitError
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.hot.synth import SynthSpec

SPEC = SynthSpec(topics=1, queues=1, messages=200, body_min=100, body_max=300, seed=5)
CL_BASE = 4096


def _built(store: Path, spool: Path) -> tuple[SegmentPlan, Spooled]:
    hot = HotStore(store)
    plan = plan_segment(hot, QueueKey("SynthTopic0", 0), 0, Limits(), now_ms=0, guard_ts=None,
                        flush=True)  # fmt: skip
    assert isinstance(plan, SegmentPlan)
    (spooled,) = gather_segments(hot, [GatherJob(plan, CL_BASE)], spool)
    assert isinstance(spooled, Spooled)
    return plan, spooled


def test_a_whole_segment_passes(store: Path, tmp_path: Path) -> None:
    plan, spooled = _built(store, tmp_path)
    check_built(plan, spooled, CL_BASE)


def test_a_record_whose_cold_offset_was_not_rewritten_is_named(store: Path, tmp_path: Path) -> None:
    plan, spooled = _built(store, tmp_path)
    with pytest.raises(CorruptRecordError, match=r"record of queue offset 0: physicalOffset"):
        check_built(plan, spooled, CL_BASE + 1)  # every cold offset is one off


def test_a_damaged_spooled_record_is_named(store: Path, tmp_path: Path) -> None:
    plan, spooled = _built(store, tmp_path)
    third = int(plan.units["size"][:2].sum())
    with spooled.path.open("r+b") as f:  # queueOffset field of queue offset 2
        f.seek(third + 20)
        f.write((99).to_bytes(8, "big"))
    with pytest.raises(CorruptRecordError, match=r"queue offset 2: queueOffset field 99"):
        check_built(plan, spooled, CL_BASE)


def test_a_wrong_store_time_range_is_refused(store: Path, tmp_path: Path) -> None:
    plan, spooled = _built(store, tmp_path)
    forged = dataclasses.replace(spooled, max_store_timestamp=spooled.max_store_timestamp + 1)
    with pytest.raises(CorruptRecordError, match="store times"):
        check_built(plan, forged, CL_BASE)


def test_units_that_do_not_cover_the_spool_are_refused(store: Path, tmp_path: Path) -> None:
    plan, spooled = _built(store, tmp_path)
    short = dataclasses.replace(spooled, size=spooled.size - 1)
    with pytest.raises(CorruptUnitError, match=r"units cover \d+ bytes"):
        check_built(plan, short, CL_BASE)
