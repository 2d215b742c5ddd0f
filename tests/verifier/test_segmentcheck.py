"""Per-segment numpy checks (no Spark): ranges, gathering, and each fact kind."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.stores.coldimage import build
from tieredstore.findings import FindingKind, Severity
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE, decode_units, encode_units
from tieredstore.hot.commitlog import HotCommitlog, gather, runs
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.verifier.ranges import OffsetRange, mask_to_ranges
from tieredstore.verifier.segmentcheck import FactKind, HotSide, SegmentGeometry, check_segment
from tieredstore.verifier.vocabulary import (
    VERIFIER_KINDS,
    LagAllowance,
    LagUnit,
    Verdict,
    parse_lag_allowance,
    verdict_of,
)

# -- ranges ---------------------------------------------------------------------------


def test_mask_to_ranges_finds_every_run() -> None:
    mask = np.array([0, 1, 1, 0, 0, 1, 0, 1, 1, 1], dtype=bool)
    assert mask_to_ranges(mask, 100) == [
        OffsetRange(101, 103, 2),
        OffsetRange(105, 106, 1),
        OffsetRange(107, 110, 3),
    ]
    assert mask_to_ranges(np.zeros(5, dtype=bool), 0) == []
    assert mask_to_ranges(np.ones(4, dtype=bool), 7) == [OffsetRange(7, 11, 4)]


def test_mask_to_ranges_caps_the_tail_into_one_summary() -> None:
    mask = np.zeros(20, dtype=bool)
    mask[::2] = True  # ten runs of one
    out = mask_to_ranges(mask, 0, limit=3)
    assert out == [OffsetRange(0, 1, 1), OffsetRange(2, 3, 1), OffsetRange(4, 19, 8)]
    assert sum(r.count for r in out) == 10


def test_runs_and_gather_coalesce_adjacent_spans() -> None:
    starts = np.array([0, 4, 8, 20, 22], dtype=np.int64)
    sizes = np.array([4, 4, 2, 2, 3], dtype=np.int64)
    run_starts, run_ends = runs(starts, sizes)
    assert run_starts.tolist() == [0, 20] and run_ends.tolist() == [10, 25]
    buf = bytes(range(30))
    assert bytes(gather(buf, starts, sizes)) == buf[0:10] + buf[20:25]


# -- model ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1000", LagAllowance(LagUnit.MESSAGES, 1000)),
        ("0", LagAllowance(LagUnit.MESSAGES, 0)),
        ("60s", LagAllowance(LagUnit.SECONDS, 60)),
        ("500ms", LagAllowance(LagUnit.SECONDS, 0.5)),
        ("5m", LagAllowance(LagUnit.SECONDS, 300)),
        ("1h", LagAllowance(LagUnit.SECONDS, 3600)),
    ],
)
def test_lag_allowance_parses_messages_or_seconds(text: str, expected: LagAllowance) -> None:
    assert parse_lag_allowance(text) == expected


@pytest.mark.parametrize("text", ["", "-1", "1.5", "ten", "60x"])
def test_lag_allowance_refuses_nonsense(text: str) -> None:
    from tieredstore.errors import ConfigError

    with pytest.raises(ConfigError, match="lag allowance"):
        parse_lag_allowance(text)


def test_verdict_is_the_worst_severity() -> None:
    assert verdict_of([]) is Verdict.CLEAN
    assert verdict_of([FindingKind.ORPHAN_OBJECT]) is Verdict.DIRTY
    assert verdict_of([FindingKind.ORPHAN_OBJECT, FindingKind.GAP]) is Verdict.CORRUPT
    dirty = {c for c in VERIFIER_KINDS if c.severity is Severity.DIRTY}
    assert dirty == {
        FindingKind.ORPHAN_OBJECT,
        FindingKind.CATALOGUE_DRIFT,
        FindingKind.LOST_BEFORE_TIERING,
        FindingKind.UNPROVEN_START,
        FindingKind.UNPROVEN_STOP,
    }
    assert FindingKind.IMPOSSIBLE_LOSS_RECORD.damage
    assert FindingKind.IMPOSSIBLE_RETENTION_RECORD.damage
    # gc's and reconcile's own kinds share the vocabulary and its severities
    assert FindingKind.UNRECOGNISED.severity is Severity.DIRTY
    assert not FindingKind.NOT_ADOPTED.damage
    assert FindingKind.CORRUPT_LOSS_RECORD.damage and FindingKind.SIZE_MISMATCH.damage
    assert verdict_of([FindingKind.LOST_BEFORE_TIERING]) is Verdict.DIRTY
    assert {v.exit_code for v in Verdict} == {0, 1, 2, 4}


# -- check_segment on a real segment ----------------------------------------------------

QUEUE = QueueKey("SynthTopic0", 0)


@pytest.fixture(scope="module")
def hot(tmp_path_factory: pytest.TempPathFactory) -> HotStore:
    root = tmp_path_factory.mktemp("segcheck") / "hot"
    spec = SynthSpec(
        topics=1,
        queues=1,
        messages=300,
        body_min=100,
        body_max=300,
        commitlog_file_size=16 << 10,  # several files: records cross no file end
        cq_file_size=64 * CQ_UNIT_SIZE,
        seed=5,
    )
    synthesize(root, spec)
    return HotStore(root)


def _hot_side(hot: HotStore, start: int, end: int) -> HotSide:
    units = hot.read_units(QUEUE.topic, QUEUE.queue_id, start, end)
    with HotCommitlog(hot.commitlog_files()) as cl:
        records = cl.gather(
            units["commitlog_offset"].astype(np.int64), units["size"].astype(np.int64)
        )
    return HotSide(start, units, records)


def _segment(
    hot: HotStore, start: int = 100, end: int = 200
) -> tuple[SegmentGeometry, bytes, bytes]:
    seg = build(hot, QUEUE, start, end, cl_base=5000)
    m = seg.manifest
    return (
        SegmentGeometry(m.start_offset, m.end_offset, m.cl_base, m.cl_end),
        seg.consume_queue,
        seg.commit_log,
    )


def test_hot_commitlog_gather_matches_hotstore(hot: HotStore) -> None:
    units = hot.read_units(QUEUE.topic, QUEUE.queue_id, 0, 300)
    expected = b"".join(hot.read_records_bytes(units["commitlog_offset"], units["size"]))
    assert bytes(_hot_side(hot, 0, 300).records or b"") == expected


def test_an_intact_segment_has_no_facts(hot: HotStore) -> None:
    geo, cq, cl = _segment(hot)
    found = check_segment(geo, decode_units(cq), cl=cl, hot=_hot_side(hot, 100, 200))
    assert found.facts == []
    assert found.units_compared == 100
    assert found.bytes_compared == len(cl)


def test_a_flipped_body_byte_is_one_record_bytes_fact(hot: HotStore) -> None:
    geo, cq, cl = _segment(hot)
    units = decode_units(cq)
    pos = int(units["commitlog_offset"][37]) - geo.cl_base
    damaged = bytearray(cl)
    damaged[pos + 95] ^= 0xFF  # inside the body (fixed header is 88 bytes)
    found = check_segment(geo, units, cl=bytes(damaged), hot=_hot_side(hot, 100, 200))
    assert [(f.kind, f.range) for f in found.facts] == [
        (FactKind.RECORD_BYTES, OffsetRange(137, 138, 1))
    ]
    assert "byte 95" in found.facts[0].detail


def test_physical_offset_bytes_are_not_compared_with_hot_but_checked_in_cold(hot: HotStore) -> None:
    geo, cq, cl = _segment(hot)
    units = decode_units(cq)
    pos = int(units["commitlog_offset"][3]) - geo.cl_base
    damaged = bytearray(cl)
    damaged[pos + 30] ^= 0x01  # physicalOffset field
    found = check_segment(geo, units, cl=bytes(damaged), hot=_hot_side(hot, 100, 200))
    assert [(f.kind, f.range) for f in found.facts] == [
        (FactKind.RECORD_FIELDS, OffsetRange(103, 104, 1))
    ]


def test_cq_units_that_do_not_tile_the_commitlog(hot: HotStore) -> None:
    geo, cq, _ = _segment(hot)
    units = decode_units(cq).copy()
    units["commitlog_offset"][50] += 1
    found = check_segment(geo, units)
    assert [(f.kind, f.range) for f in found.facts] == [
        (FactKind.CQ_OFFSETS, OffsetRange(150, 152, 2))
    ]


def test_cq_unit_tags_differing_from_hot(hot: HotStore) -> None:
    geo, cq, _ = _segment(hot)
    units = decode_units(cq).copy()
    units["tags_code"][10:13] = 12345
    found = check_segment(geo, decode_units(encode_units(units)), hot=_hot_side(hot, 100, 200))
    assert [(f.kind, f.range) for f in found.facts] == [
        (FactKind.CQ_VS_HOT, OffsetRange(110, 113, 3))
    ]


def test_only_the_hot_part_of_a_segment_is_compared(hot: HotStore) -> None:
    geo, cq, cl = _segment(hot)
    found = check_segment(geo, decode_units(cq), cl=cl, hot=_hot_side(hot, 150, 180))
    assert found.facts == [] and found.units_compared == 30


def test_units_must_match_the_manifest_range(hot: HotStore) -> None:
    geo, cq, _ = _segment(hot)
    with pytest.raises(ValueError, match="needs 100 units"):
        check_segment(geo, decode_units(cq)[:99])
