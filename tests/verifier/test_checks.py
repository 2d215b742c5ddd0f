"""The pure DataFrame checks on small hand-made frames (``assertDataFrameEqual``)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from tieredstore.findings import FindingKind
from tieredstore.verifier import checks, schemas
from tieredstore.verifier.decision import ObjectRead, object_findings

pytestmark = pytest.mark.spark

T = "TopicA"


def _segment(
    start: int, end: int, *, qid: int = 0, cl_base: int = 0, **extra: Any
) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(schemas.SEGMENTS.fieldNames())
    size = (end - start) * 100
    row.update(
        manifest_key=f"m/{qid}/{start}",
        topic=T,
        queue_id=qid,
        start_offset=start,
        manifest_mtime_ms=1_000,
        end_offset=end,
        cl_base=cl_base,
        cl_end=cl_base + size,
        cl_key=f"cl/{qid}/{cl_base}",
        cl_size=size,
        cl_digest="a" * 64,
        cq_key=f"cq/{qid}/{start * 20}",
        cq_size=(end - start) * 20,
        cq_digest="b" * 64,
        message_count=end - start,
        link=schemas.LINK_SEGMENT,
        sequence=-1,
        cl_at=0,
        cq_at=0,
        cl_object_size=size,
        cq_object_size=(end - start) * 20,
        covers=True,
    )
    row.update(extra)
    return row


def _segments(spark: SparkSession, *rows: dict[str, Any]) -> DataFrame:
    return spark.createDataFrame(list(rows), schema=schemas.SEGMENTS)


def _anomalies(spark: SparkSession, *rows: tuple[Any, ...]) -> DataFrame:
    """Rows of (class, queue id, start, end, count, object key, detail)."""
    out = [
        {
            "anomaly": cls.value,
            "severity": cls.severity.value,
            "topic": T,
            "queue_id": qid,
            "start_offset": start,
            "end_offset": end,
            "count": count,
            "object_key": key,
            "detail": detail,
        }
        for cls, qid, start, end, count, key, detail in rows
    ]
    return spark.createDataFrame(out, schema=schemas.ANOMALIES)


def _spans(spark: SparkSession, *spans: tuple[int, int, int]) -> DataFrame:
    """LOSS_SPANS rows of (queue id, start, end)."""
    rows = [{"topic": T, "queue_id": q, "span_start": a, "span_end": b} for q, a, b in spans]
    return spark.createDataFrame(rows, schema=schemas.LOSS_SPANS)


def _losses(spark: SparkSession, *losses: tuple[int, int, int]) -> DataFrame:
    """LOSSES rows of (queue id, start, end)."""
    rows = [
        {"record_key": f"loss/{q}/{a}", "topic": T, "queue_id": q, "start_offset": a,
         "end_offset": b, "accepted_at_ms": 5, "writer_id": "w", "lease_epoch": 1,
         "detail": f"lost {b - a}"}
        for q, a, b in losses
    ]  # fmt: skip
    return spark.createDataFrame(rows, schema=schemas.LOSSES)


def _ranges(df: DataFrame) -> list[tuple[Any, ...]]:
    rows = [
        (r.anomaly, r.queue_id, r.start_offset, r.end_offset, r.object_key) for r in df.collect()
    ]
    return sorted(rows, key=lambda r: (r[1], -1 if r[2] is None else r[2], r[4] or ""))


def test_gap_is_the_hole_between_segments(spark: SparkSession) -> None:
    segs = _segments(
        spark, _segment(0, 100), _segment(100, 200), _segment(300, 400), _segment(50, 60, qid=1)
    )
    expected = _anomalies(
        spark,
        (
            FindingKind.GAP,
            0,
            200,
            300,
            100,
            None,
            "queue offsets [200, 300) are in no committed segment (the next segment is m/0/300)",
        ),
    )
    assertDataFrameEqual(checks.gap(segs, _spans(spark)), expected)


def test_a_gap_an_accepted_loss_covers_is_no_gap(spark: SparkSession) -> None:
    segs = _segments(
        spark,
        _segment(0, 100),
        _segment(300, 400),
        _segment(500, 600),
        _segment(0, 10, qid=1),
        _segment(50, 60, qid=1),
    )
    # [100, 300) is covered by one merged span; [400, 500) only in part (still a gap);
    # queue 1's span is on another queue's offsets.
    spans = _spans(spark, (0, 100, 300), (0, 400, 450), (1, 100, 300))
    assert _ranges(checks.gap(segs, spans)) == [
        ("gap", 0, 400, 500, None),
        ("gap", 1, 10, 50, None),
    ]


def test_lost_before_tiering_reports_each_loss_record_in_scope(spark: SparkSession) -> None:
    cold = checks.cold_queue_ranges(_segments(spark, _segment(500, 600), _segment(0, 10, qid=1)))
    losses = _losses(spark, (0, 100, 200), (0, 600, 700), (1, 10, 20), (2, 0, 5))
    found = checks.lost_before_tiering(losses, cold)
    # [100, 200) of queue 0 ends before its cold min 500: retention passed it (history).
    assert _ranges(found) == [
        ("lost_before_tiering", 0, 600, 700, "loss/0/600"),
        ("lost_before_tiering", 1, 10, 20, "loss/1/10"),
        ("lost_before_tiering", 2, 0, 5, "loss/2/0"),
    ]
    rows = {(r.severity, r["count"], r.detail) for r in found.collect()}
    assert rows == {("DIRTY", 100, "lost 100"), ("DIRTY", 10, "lost 10"), ("DIRTY", 5, "lost 5")}


def test_overlap_is_reported_on_the_later_segment(spark: SparkSession) -> None:
    segs = _segments(spark, _segment(0, 100), _segment(100, 200), _segment(150, 180))
    expected = _anomalies(
        spark,
        (
            FindingKind.OVERLAP,
            0,
            150,
            180,
            30,
            "m/0/150",
            "segment [150, 180) starts below the end 200 of an earlier segment",
        ),
    )
    assertDataFrameEqual(checks.overlap(segs), expected)
    assert checks.gap(segs, _spans(spark)).count() == 0


def test_a_segment_starting_inside_and_reaching_past_overlaps_only_the_shared_part(
    spark: SparkSession,
) -> None:
    segs = _segments(spark, _segment(0, 100), _segment(90, 120), _segment(120, 130))
    assert _ranges(checks.overlap(segs)) == [("overlap", 0, 90, 100, "m/0/90")]
    assert _ranges(checks.gap(segs, _spans(spark))) == []


def test_corrupt_manifests_are_separated_from_valid_ones(spark: SparkSession) -> None:
    bad = dict.fromkeys(schemas.SEGMENTS.fieldNames())
    bad.update(
        manifest_key="m/0/100",
        topic=T,
        queue_id=0,
        start_offset=100,
        manifest_mtime_ms=1,
        error="manifest is not valid JSON",
        link=schemas.LINK_SEGMENT,
        sequence=-1,
    )
    batch = bad | {"manifest_key": "b/3", "topic": "", "queue_id": -1, "start_offset": 3,
                   "link": schemas.LINK_SLICE, "sequence": 3}  # fmt: skip
    segs = _segments(spark, _segment(0, 100), bad, batch)
    assert checks.valid_segments(segs).count() == 1
    assert _ranges(checks.corrupt_manifest(segs)) == [
        ("corrupt_manifest", -1, None, None, "b/3"),  # a batch names no queue, no range
        ("corrupt_manifest", 0, 100, 101, "m/0/100"),
    ]


def _state(spark: SparkSession, **values: int) -> DataFrame:
    row = {"topic": T, "queue_id": 0, **values}
    schema = (
        "topic string, queue_id int, cold_min long, cold_max long, hot_min long, "
        "hot_max long, lag_cutoff long"
    )
    return spark.createDataFrame([row], schema=schema)


def test_hot_not_covered_is_the_tail_beyond_the_allowance(spark: SparkSession) -> None:
    state = _state(spark, cold_min=10, cold_max=500, hot_min=0, hot_max=1000, lag_cutoff=900)
    assert _ranges(checks.hot_not_covered(state, _spans(spark))) == [
        ("hot_not_covered", 0, 500, 900, None)
    ]
    within = _state(spark, cold_min=10, cold_max=950, hot_min=0, hot_max=1000, lag_cutoff=900)
    assert checks.hot_not_covered(within, _spans(spark)).count() == 0


def test_hot_not_covered_counts_what_the_broker_deleted_before_tiering(
    spark: SparkSession,
) -> None:
    state = _state(spark, cold_min=0, cold_max=100, hot_min=300, hot_max=1000, lag_cutoff=300)
    (row,) = checks.hot_not_covered(state, _spans(spark)).collect()
    assert (row.start_offset, row.end_offset) == (100, 300)
    assert "200 of them already deleted from hot" in row.detail


def test_untiered_offsets_an_accepted_loss_covers_are_not_hot_not_covered(
    spark: SparkSession,
) -> None:
    # Resumed after [100, 300): cold ends at 100, tiering goes on from hot min 300.
    state = _state(spark, cold_min=0, cold_max=100, hot_min=300, hot_max=1000, lag_cutoff=300)
    assert checks.hot_not_covered(state, _spans(spark, (0, 100, 300))).count() == 0
    # ... but what is untiered after the loss and older than the allowance still counts.
    late = _state(spark, cold_min=0, cold_max=100, hot_min=300, hot_max=1000, lag_cutoff=800)
    spans = _spans(spark, (0, 100, 300))
    assert _ranges(checks.hot_not_covered(late, spans)) == [("hot_not_covered", 0, 300, 800, None)]
    # A loss that does not reach cold max (an older one) changes nothing.
    older = _spans(spark, (0, 20, 50))
    assert _ranges(checks.hot_not_covered(state, older)) == [("hot_not_covered", 0, 100, 300, None)]


def test_cold_ahead_of_hot(spark: SparkSession) -> None:
    state = _state(spark, cold_min=0, cold_max=800, hot_min=0, hot_max=700, lag_cutoff=700)
    assert _ranges(checks.cold_ahead_of_hot(state)) == [("cold_ahead_of_hot", 0, 700, 800, None)]
    beyond = _state(spark, cold_min=900, cold_max=950, hot_min=0, hot_max=700, lag_cutoff=700)
    assert _ranges(checks.cold_ahead_of_hot(beyond)) == [("cold_ahead_of_hot", 0, 900, 950, None)]


def _objects(spark: SparkSession, *rows: tuple[str, str, int, int, int]) -> DataFrame:
    """Rows of (key, kind, base, size, mtime_ms)."""
    out = [
        {"key": k, "kind": kind, "topic": T, "queue_id": 0, "base": b, "size": s, "mtime_ms": m}
        for k, kind, b, s, m in rows
    ]
    return spark.createDataFrame(out, schema=schemas.OBJECTS)


def _hot(spark: SparkSession, hot_min: int, hot_max: int) -> DataFrame:
    row = {
        "topic": T,
        "queue_id": 0,
        "hot_min": hot_min,
        "hot_max": hot_max,
        "lag_cutoff": hot_max,
        "stored_from": [],
        "error": None,
    }
    return spark.createDataFrame([row], schema=schemas.HOT_QUEUES)


def test_segment_work_carries_each_objects_listed_size(spark: SparkSession) -> None:
    valid = _segments(spark, _segment(0, 10), _segment(10, 20, cl_base=1000))
    objects = _objects(
        spark,
        ("cl/0/0", "COMMIT_LOG", 0, 1000, 1),
        ("cq/0/0", "CONSUME_QUEUE", 0, 200, 1),
        ("cq/0/200", "CONSUME_QUEUE", 200, 180, 1),  # 20 bytes short; its CL is missing
        ("m/0/0", "MANIFEST", 0, 10, 1),
        ("m/0/10", "MANIFEST", 10, 10, 1),
    )
    work = checks.segment_work(valid, objects, _hot(spark, 0, 20))
    (row,) = work.where(work.start_offset == 10).collect()
    assert (row.hot_present, row.hot_min, row.hot_max, row.cl_listed_size) == (True, 0, 20, None)
    assert (row.cq_listed_size, row.cq_object_size) == (180, 200)


def _facts(spark: SparkSession, *found: tuple[str, str, str]) -> DataFrame:
    """SEGMENT_FACTS: one link [10, 20) with facts (kind, object key, detail)."""
    row = {
        "manifest_key": "m/0/10", "topic": T, "queue_id": 0, "start_offset": 10,
        "end_offset": 20, "cl_key": "cl/0/1000", "cq_key": "cq/0/200", "cl_digest": "a",
        "cq_digest": "b", "cl_digest_actual": None, "cq_digest_actual": None,
        "units_compared": 0, "bytes_compared": 0, "cold_only": 0, "covers": True,
        "facts": [{"kind": k, "start_offset": 10, "end_offset": 20, "count": 10,
                   "object_key": key, "detail": d} for k, key, d in found],
    }  # fmt: skip
    return spark.createDataFrame([row], schema=schemas.SEGMENT_FACTS)


def test_object_facts_become_missing_and_size_mismatch(spark: SparkSession) -> None:
    facts = _facts(
        spark,
        ("object_unreadable", "cl/0/1000", "object named by m/0/10 does not exist"),
        ("object_size", "cq/0/200", "object is 180 bytes, its manifest says 200"),
    )
    assert _ranges(checks.missing_object(facts)) == [("missing_object", 0, 10, 20, "cl/0/1000")]
    expected = _anomalies(
        spark,
        (
            FindingKind.SIZE_MISMATCH,
            0,
            10,
            20,
            10,
            "cq/0/200",
            "object is 180 bytes, its manifest says 200",
        ),
    )
    assertDataFrameEqual(checks.size_mismatch(facts), expected)
    assert checks.digest_mismatch(facts).count() == 0


def test_orphans_are_unreferenced_objects_older_than_the_grace(spark: SparkSession) -> None:
    valid = _segments(spark, _segment(0, 10))
    objects = _objects(
        spark,
        ("cl/0/0", "COMMIT_LOG", 0, 1000, 1_000),
        ("cq/0/0", "CONSUME_QUEUE", 0, 200, 1_000),
        ("cl/0/1000", "COMMIT_LOG", 1000, 500, 1_000),  # old orphan
        ("cq/0/200", "CONSUME_QUEUE", 200, 100, 1_000),  # old orphan: offsets [10, 15)
        ("cq/0/300", "CONSUME_QUEUE", 300, 20, 95_000),  # young: a commit in flight
    )
    found = checks.orphan_object(objects, valid, now_ms=100_000, grace_ms=10_000)
    assert _ranges(found) == [
        ("orphan_object", 0, None, None, "cl/0/1000"),
        ("orphan_object", 0, 10, 15, "cq/0/200"),
    ]


def test_digest_record_and_content_facts_become_their_classes(spark: SparkSession) -> None:
    fact = {
        "kind": "record_bytes",
        "start_offset": 5,
        "end_offset": 6,
        "count": 1,
        "object_key": "cl/0/0",
        "detail": "offset 5: byte 90 differs",
    }
    row = {
        "manifest_key": "m/0/0",
        "topic": T,
        "queue_id": 0,
        "start_offset": 0,
        "end_offset": 10,
        "cl_key": "cl/0/0",
        "cq_key": "cq/0/0",
        "cl_digest": "a" * 64,
        "cq_digest": "b" * 64,
        "cl_digest_actual": "c" * 64,
        "cq_digest_actual": "b" * 64,
        "units_compared": 10,
        "bytes_compared": 1000,
        "cold_only": 0,
        "covers": True,
        "facts": [
            fact,
            fact | {"kind": "cq_offsets", "object_key": "cq/0/0"},
            fact | {"kind": "object_digest", "start_offset": 0, "end_offset": 10, "count": 10},
        ],
    }
    facts = spark.createDataFrame([row], schema=schemas.SEGMENT_FACTS)
    assert _ranges(checks.digest_mismatch(facts)) == [("digest_mismatch", 0, 0, 10, "cl/0/0")]
    assert _ranges(checks.content_mismatch(facts)) == [("content_mismatch", 0, 5, 6, "cl/0/0")]
    assert _ranges(checks.record_mismatch(facts)) == [("record_mismatch", 0, 5, 6, "cq/0/0")]


def test_catalogue_drift_three_ways(spark: SparkSession) -> None:
    valid = _segments(
        spark,
        _segment(0, 10),
        _segment(10, 20, cl_base=1000),
        _segment(20, 30, cl_base=2000, manifest_mtime_ms=1_000),  # not in the catalogue
        _segment(30, 40, cl_base=3000, manifest_mtime_ms=99_000),  # same, but young
    )

    def cat(start: int, end: int, cl_base: int, status: str = "COMMITTED") -> dict[str, Any]:
        return {
            "manifest_key": f"m/0/{start}",
            "topic": T,
            "queue_id": 0,
            "start_offset": start,
            "end_offset": end,
            "cl_base": cl_base,
            "cl_end": cl_base + (end - start) * 100,
            "cl_digest": "a" * 64,
            "cq_digest": "b" * 64,
            "status": status,
        }

    catalogue = spark.createDataFrame(
        [cat(0, 10, 0), cat(10, 19, 1000), cat(40, 50, 4000), cat(50, 60, 5000, "DELETING")],
        schema=schemas.CATALOGUE,
    )
    found = checks.catalogue_drift(catalogue, valid, now_ms=100_000, grace_ms=10_000)
    assert _ranges(found) == [
        ("catalogue_drift", 0, 10, 20, "m/0/10"),
        ("catalogue_drift", 0, 20, 30, "m/0/20"),
        ("catalogue_drift", 0, 40, 50, "m/0/40"),
    ]
    assert {r.start_offset: r.detail for r in found.collect()}[40] == (
        "catalogue row has no valid manifest"
    )


def test_a_batch_the_catalogue_names_and_cold_lacks_is_missing_per_queue(
    spark: SparkSession,
) -> None:
    rows = [  # (batch key, sequence, queue, start, end)
        ("b/1", 1, 0, 0, 10),  # listed: no finding
        ("b/2", 2, 0, 10, 20),  # gone, a segment holds [10, 20): compacted, collected
        ("b/3", 3, 0, 20, 30),  # gone, withdrawn by the fence of sequence 4: healed
        ("b/5", 5, 0, 30, 40),  # gone: missing, in both queues it held
        ("b/5", 5, 1, 7, 9),
    ]
    slices = spark.createDataFrame(
        [
            {"batch_key": k, "sequence": seq, "topic": T, "queue_id": q, "start_offset": s,
             "end_offset": e}
            for k, seq, q, s, e in rows
        ],
        schema=schemas.CATALOGUE_SLICES,
    )  # fmt: skip
    objects = _objects(spark, ("b/1", "BATCH", 1, 5_000, 1_000))
    fence = _segment(20, 20, manifest_key=f"b/4#{T}/0", link=schemas.LINK_WITHDRAWAL, sequence=4)
    valid = _segments(spark, _segment(5, 25), fence)
    found = checks.missing_batch(slices, objects, valid)
    assert sorted(_ranges(found)) == [
        ("missing_object", 0, 30, 40, "b/5"),
        ("missing_object", 1, 7, 9, "b/5"),
    ]
    assert {r.queue_id: r.detail for r in found.collect()}[1] == (
        f"batch object does not exist; the catalogue says it holds [7, 9) of {T}/1"
    )


def test_queue_summary_joins_both_sides(spark: SparkSession) -> None:
    valid = _segments(spark, _segment(100, 200), _segment(200, 300, cl_base=10_000))
    cold = checks.cold_queue_ranges(valid)
    hot = spark.createDataFrame(
        [
            {"topic": T, "queue_id": 0, "hot_min": 150, "hot_max": 320, "lag_cutoff": 300,
             "stored_from": [], "error": None},
            {"topic": T, "queue_id": 1, "hot_min": 0, "hot_max": 50, "lag_cutoff": 50,
             "stored_from": [], "error": None},
        ],
        schema=schemas.HOT_QUEUES,
    )  # fmt: skip
    facts = spark.createDataFrame([], schema=schemas.SEGMENT_FACTS)
    objects = _objects(spark)
    summary = checks.queue_summary(cold, hot, facts, objects, valid, now_ms=0, grace_ms=0)
    rows = {r.queue_id: r for r in summary.collect()}
    q0, q1 = rows[0], rows[1]
    assert (q0.cold_min, q0.cold_max, q0.segments, q0.lag_messages) == (100, 300, 2, 20)
    assert (q1.cold_min, q1.segments, q1.lag_messages, q1.hot_present) == (None, 0, 50, True)


def _slice(start: int, end: int, *, covers: bool, seq: int = 0, **extra: Any) -> dict[str, Any]:
    """A slice of batch ``b/<seq>`` (both spans inside that one object)."""
    key = f"b/{seq}"
    return _segment(
        start, end, manifest_key=f"{key}#{T}/0", cl_key=key, cq_key=key, link=schemas.LINK_SLICE,
        sequence=seq, cl_at=16, cq_at=16 + (end - start) * 100, cl_object_size=5_000,
        cq_object_size=5_000, covers=covers, **extra,
    )  # fmt: skip


def test_slices_the_reading_rule_skips_are_no_overlap(spark: SparkSession) -> None:
    valid = _segments(
        spark,
        _segment(0, 100),
        _slice(50, 150, covers=False),  # a stale duplicate: overlaps both segments
        _segment(100, 200, cl_base=10_000),
        _slice(200, 300, covers=True, seq=1),  # the tail, in a batch
        _segment(250, 260, cl_base=30_000),  # ... and a stray segment over it: loud
    )
    covered = checks.covering(valid)
    assert _ranges(checks.gap(covered, _spans(spark))) == []
    assert _ranges(checks.overlap(covered)) == [("overlap", 0, 250, 260, "m/0/250")]
    (row,) = checks.cold_queue_ranges(covered).collect()
    assert (row.cold_min, row.cold_max, row.segments, row.cold_messages) == (0, 300, 4, 310)


def test_a_skipped_slice_that_differs_from_its_segment_is_content_mismatch(
    spark: SparkSession,
) -> None:
    valid = _segments(
        spark,
        _segment(0, 100),
        _slice(0, 100, covers=False),  # the same records: the same digests
        _segment(100, 200, cl_base=10_000),
        _slice(100, 200, covers=False, seq=1, cq_digest="c" * 64),  # differs
        _slice(150, 200, covers=False, seq=2, cq_digest="c" * 64),  # other boundaries
    )
    assert _ranges(checks.copy_mismatch(valid)) == [("content_mismatch", 0, 100, 200, "b/1")]


def test_batch_objects_are_never_orphans(spark: SparkSession) -> None:
    valid = _segments(spark, _slice(0, 10, covers=False))
    objects = _objects(
        spark,
        ("b/0", "BATCH", 0, 5_000, 1_000),  # named by a slice that covers nothing
        ("b/1", "BATCH", 1, 300, 1_000),  # a fence, or a head that does not parse
    )
    assert _ranges(checks.orphan_object(objects, valid, now_ms=100_000, grace_ms=10)) == []


def test_a_slice_object_of_the_wrong_size_is_one_size_mismatch(spark: SparkSession) -> None:
    valid = _segments(spark, _slice(0, 10, covers=True))
    objects = _objects(spark, ("b/0", "BATCH", 0, 4_000, 1))
    (row,) = checks.segment_work(valid, objects, _hot(spark, 0, 10)).collect()
    reads = [  # a slice's two spans, of the one batch object: what a task gathers
        ObjectRead(row[f"{w}_key"], row[f"{w}_listed_size"], row[f"{w}_object_size"],
                   row[f"{w}_size"], says="its batch index")
        for w in ("cq", "cl")
    ]  # fmt: skip
    found = list(object_findings(row.manifest_key, 0, 10, reads))
    assert [(f.kind, f.object_key, f.detail) for f in found] == [
        (FindingKind.SIZE_MISMATCH, "b/0", "object is 4000 bytes, its batch index says 5000")
    ]
    (absent,) = checks.segment_work(valid, _objects(spark), _hot(spark, 0, 10)).collect()
    reads = [ObjectRead("b/0", absent.cl_listed_size, 5_000, 10)] * 2
    assert [f.kind for f in object_findings("s", 0, 10, reads)] == [FindingKind.MISSING_OBJECT]
