"""The anomaly checks: small, pure ``DataFrame -> DataFrame`` functions.

Each check takes the frames it needs (schemas in :mod:`tieredstore.verifier.schemas`) and returns
ANOMALIES rows of exactly one class; nothing here reads storage or the clock (``now_ms``
is a parameter). The heavy per-link reading happened before, in
:mod:`tieredstore.verifier.readers`; these functions only relate facts to each other.

A queue's **links** are its segments and its batch slices (SEGMENTS rows, ``link``). The
one reading rule (:func:`readers.mark_covering <tieredstore.verifier.readers.mark_covering>`) set
which links **cover** their offsets (:func:`covering`): every valid segment, and each
slice no segment or earlier slice holds offsets of. Coverage checks (``gap``, ``overlap``,
the cold range and counts) read the covering links only, so a compacted slice or a
stale writer's duplicate is neither an ``overlap`` nor counted twice; every valid link,
covering or not, is still verified against hot and its digests, and a slice whose
digests differ from the covering link over exactly its offsets is a
``content_mismatch`` (:func:`copy_mismatch`). Segment objects are referenced by their
manifests, batch objects by their slices (never orphans: a batch none of whose slices
covers anything is garbage awaiting collection).

Expressions are Spark SQL strings (``selectExpr``/``where``): one gateway call per
projection instead of one per column function, which keeps planning a run cheap. The
layout of a queue (``gap``, ``overlap``) is not SQL: it is the one decision
:func:`tieredstore.verifier.decision.decide` that the fleet job drives too, run here over Arrow
batches of each queue's covering links (:class:`_Layout`). A link's objects
(``missing_object``, ``size_mismatch``, ``digest_mismatch``) and whether its records are
judged are decided in the reader tasks by :mod:`tieredstore.verifier.decision.link`, also shared;
here they are only facts turned into rows.

Offsets and scope, per queue (``hot [hot_min, hot_max)``, ``cold [cold_min, cold_max)``)::

      not in scope    cold only       compared            lag / hot_not_covered
    |--------------|--------------|------------------|---------------------------|
    0          cold_min        hot_min        cold_max        lag_cutoff    hot_max

* below ``cold_min`` (the first committed segment's start: the queue's init offset as
  cold shows it) nothing is in scope — never a gap;
* cold offsets below ``hot_min`` exist only in cold (the broker deleted them): counted,
  not compared;
* ``[cold_max, lag_cutoff)`` is untiered and older than the lag allowance:
  ``hot_not_covered``; ``[max(cold_max, lag_cutoff), hot_max)`` is lag;
* cold offsets at or beyond ``hot_max`` are ``cold_ahead_of_hot``.

Accepted losses (loss records, ``LOSS_SPANS`` merged per queue) are the one kind of hole
that is not an error: a gap wholly inside a span, and untiered offsets from ``cold_max``
up to the end of a span that starts at or before it, are ``lost_before_tiering`` (DIRTY,
one anomaly per loss record) instead of ``gap`` / ``hot_not_covered`` (CORRUPT).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import reduce
from typing import Any, Final

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.functions import expr

from tieredstore.findings import FindingKind
from tieredstore.verifier import schemas
from tieredstore.verifier.decision import Link, QueueLinks, decide
from tieredstore.verifier.segmentcheck import FactKind

__all__ = [
    "catalogue_drift",
    "cold_ahead_of_hot",
    "cold_queue_ranges",
    "content_mismatch",
    "copy_mismatch",
    "corrupt_manifest",
    "covering",
    "digest_mismatch",
    "gap",
    "hot_not_covered",
    "lost_before_tiering",
    "manifest_mismatch",
    "missing_batch",
    "missing_object",
    "orphan_object",
    "overlap",
    "queue_state",
    "queue_summary",
    "record_mismatch",
    "segment_work",
    "size_mismatch",
    "union_anomalies",
    "valid_segments",
]

_QUEUE: Final = ["topic", "queue_id"]
_NO_SPANS: Final = "CAST(NULL AS ARRAY<STRUCT<span_start: BIGINT, span_end: BIGINT>>) AS _spans"


def _q(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _anomalies(
    df: DataFrame,
    cls: FindingKind,
    *,
    detail: str,
    start: str = "NULL",
    end: str = "NULL",
    object_key: str = "NULL",
    count: str = "",
) -> DataFrame:
    """Project ``df`` onto the ANOMALIES schema for ``cls``; arguments are SQL
    expressions over ``df``'s columns (``count`` defaults to ``end - start``)."""
    return df.selectExpr(
        f"{_q(cls.value)} AS anomaly",
        f"{_q(cls.severity.value)} AS severity",
        "CAST(topic AS STRING) AS topic",
        "CAST(queue_id AS INT) AS queue_id",
        f"CAST({start} AS BIGINT) AS start_offset",
        f"CAST({end} AS BIGINT) AS end_offset",
        f"CAST({count or f'({end}) - ({start})'} AS BIGINT) AS count",
        f"CAST({object_key} AS STRING) AS object_key",
        f"CAST({detail} AS STRING) AS detail",
    )


def union_anomalies(*frames: DataFrame) -> DataFrame:
    """All ``frames`` (ANOMALIES) as one. Unordered: the driver sorts the (small) result,
    which spares Spark a range-partitioning job."""
    return reduce(DataFrame.unionByName, frames)


# -- segments and queues --------------------------------------------------------------


def valid_segments(segments: DataFrame) -> DataFrame:
    """SEGMENTS whose manifest or batch head parsed and validated (the committed links:
    segments and slices)."""
    return segments.where("error IS NULL")


def covering(valid: DataFrame) -> DataFrame:
    """The valid links that cover their offsets by the one reading rule (``covers``)."""
    return valid.where("covers")


def corrupt_manifest(segments: DataFrame) -> DataFrame:
    """``corrupt_manifest``: a MANIFEST object, or a batch object's head, that does not
    parse or validate.

    A manifest's range is the offset its name claims, as ``[start, start + 1)``: how far
    it would have reached is unknown (the gap check reports the hole it leaves). A batch
    names no queue: topic ``""``, queue id -1, no range, the batch key as the object.
    """
    is_batch = f"link = {_q(schemas.LINK_SLICE)}"
    return _anomalies(
        segments.where("error IS NOT NULL"),
        FindingKind.CORRUPT_MANIFEST,
        start=f"CASE WHEN {is_batch} THEN NULL ELSE start_offset END",
        end=f"CASE WHEN {is_batch} THEN NULL ELSE start_offset + 1 END",
        object_key="manifest_key",
        detail="error",
    )


def cold_queue_ranges(covered: DataFrame) -> DataFrame:
    """Per queue, over the covering links (:func:`covering`): cold_min, cold_max,
    segments (links), cold_messages, cold_bytes."""
    return covered.groupBy(*_QUEUE).agg(
        {"start_offset": "min", "end_offset": "max", "*": "count", "message_count": "sum",
         "cl_size": "sum"}
    ).selectExpr(
        *_QUEUE,
        "`min(start_offset)` AS cold_min",
        "`max(end_offset)` AS cold_max",
        "`count(1)` AS segments",
        "`sum(message_count)` AS cold_messages",
        "`sum(cl_size)` AS cold_bytes",
    )  # fmt: skip


def queue_state(cold_ranges: DataFrame, hot: DataFrame) -> DataFrame:
    """Queues present on both sides: hot range and lag cutoff beside the cold range."""
    return cold_ranges.join(hot.where("error IS NULL"), _QUEUE, "inner")


@dataclass(frozen=True)
class _Layout:
    """A Spark task (``mapInArrow``) deciding the layout of each queue it is given whole
    (rows: a covering link, with its queue's accepted-loss spans) by
    :func:`tieredstore.verifier.decision.decide`; yields ANOMALIES rows of class ``kind``."""

    kind: FindingKind

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        queues: dict[tuple[str, int], tuple[list[Link], set[tuple[int, int]]]] = {}
        for batch in batches:
            for r in batch.to_pylist():
                links, spans = queues.setdefault((r["topic"], r["queue_id"]), ([], set()))
                links.append(Link(r["start_offset"], r["end_offset"], r["manifest_key"]))
                spans.update((s["span_start"], s["span_end"]) for s in r["_spans"] or ())
        rows: list[dict[str, Any]] = []
        for (topic, queue_id), (links, spans) in sorted(queues.items()):
            for f in decide(QueueLinks(topic, queue_id, links, sorted(spans)), [self.kind]):
                rows.append({
                    "anomaly": f.kind.value, "severity": f.kind.severity.value,
                    "topic": topic, "queue_id": queue_id, "start_offset": f.start,
                    "end_offset": f.end, "count": f.end - f.start if f.end is not None
                    and f.start is not None else None, "object_key": f.object_key,
                    "detail": f.detail,
                })  # fmt: skip
        yield pa.RecordBatch.from_pylist(rows, schema=schemas.arrow_schema(schemas.ANOMALIES))


def _layout(covered: DataFrame, spans: DataFrame | None, kind: FindingKind) -> DataFrame:
    """Each queue's covering links (with its spans) in one task: the decision's input."""
    links = covered.select(*_QUEUE, "start_offset", "end_offset", "manifest_key")
    if spans is None:
        links = links.selectExpr("*", _NO_SPANS)
    else:
        per_queue = spans.groupBy(*_QUEUE).agg(
            expr("collect_list(struct(span_start, span_end)) AS _spans")
        )
        links = links.join(per_queue, _QUEUE, "left")
    return links.repartition(*_QUEUE).mapInArrow(_Layout(kind), schemas.ANOMALIES)


def gap(covered: DataFrame, spans: DataFrame) -> DataFrame:
    """``gap``: offsets between a queue's cold min and cold max in no covering link
    (:func:`covering`), unless an accepted loss (``spans``, LOSS_SPANS) covers the whole
    hole (:func:`tieredstore.verifier.decision.queue.gaps`)."""
    return _layout(covered, spans, FindingKind.GAP)


def overlap(covered: DataFrame) -> DataFrame:
    """``overlap``: offsets covered by two covering links (:func:`covering`: in effect two
    segments, as the reading rule never lets a slice cover what another link holds),
    reported on the later one (:func:`tieredstore.verifier.decision.queue.overlaps`)."""
    return _layout(covered, None, FindingKind.OVERLAP)


def hot_not_covered(queues: DataFrame, spans: DataFrame) -> DataFrame:
    """``hot_not_covered``: ``[tiered_to, lag_cutoff)`` — in scope, older than the lag
    allowance, not in cold. ``tiered_to`` is ``cold_max``, or the end of the accepted loss
    span holding ``cold_max`` (``spans``, LOSS_SPANS: the queue resumed after it). Includes
    offsets the broker already deleted whose loss nobody accepted (``tiered_to <
    hot_min``). ``queues`` is :func:`queue_state`.
    """
    s = spans.selectExpr("topic AS _st", "queue_id AS _sq", "span_start", "span_end")
    cond = "topic = _st AND queue_id = _sq AND span_start <= cold_max AND span_end > cold_max"
    tiered = queues.join(s, expr(cond), "left").selectExpr(
        "*", "coalesce(span_end, cold_max) AS _to"
    )
    return _anomalies(
        tiered.where("lag_cutoff > _to"),
        FindingKind.HOT_NOT_COVERED,
        start="_to",
        end="lag_cutoff",
        detail="format_string('%d hot offsets older than the lag allowance are not in cold "
        "(hot [%d, %d), cold [%d, %d); %d of them already deleted from hot)', "
        "lag_cutoff - _to, hot_min, hot_max, cold_min, cold_max, "
        "greatest(0, least(hot_min, lag_cutoff) - _to))",
    )


def lost_before_tiering(losses: DataFrame, cold_ranges: DataFrame) -> DataFrame:
    """``lost_before_tiering``: one per loss record (``losses``, LOSSES) still in scope —
    ending after the queue's cold min, or of a queue with no segment. A loss retention
    has since passed (its whole range below cold min) is history, like the expired data
    around it."""
    ranges = cold_ranges.select(*_QUEUE, "cold_min")
    scoped = losses.join(ranges, _QUEUE, "left").where("cold_min IS NULL OR end_offset > cold_min")
    return _anomalies(
        scoped,
        FindingKind.LOST_BEFORE_TIERING,
        start="start_offset",
        end="end_offset",
        object_key="record_key",
        detail="detail",
    )


def cold_ahead_of_hot(queues: DataFrame) -> DataFrame:
    """``cold_ahead_of_hot``: cold offsets at or beyond the hot max (a hot regression)."""
    return _anomalies(
        queues.where("cold_max > hot_max"),
        FindingKind.COLD_AHEAD_OF_HOT,
        start="greatest(hot_max, cold_min)",
        end="cold_max",
        detail="format_string('cold reaches offset %d but the hot max is %d: the broker "
        "lost or rewrote offsets cold already holds', cold_max, hot_max)",
    )


# -- objects --------------------------------------------------------------------------


def segment_work(valid: DataFrame, objects: DataFrame, hot: DataFrame) -> DataFrame:
    """SEGMENT_WORK: each valid link (segment or slice, covering or not) with its
    objects' listed sizes (a slice's: its batch's, twice) and hot range."""
    cl = objects.selectExpr("key AS cl_key", "size AS cl_listed_size")
    cq = objects.selectExpr("key AS cq_key", "size AS cq_listed_size")
    hot_ranges = hot.where("error IS NULL").selectExpr(
        *_QUEUE, "hot_min", "hot_max", "true AS hot_present"
    )
    joined = (
        valid.join(cl, "cl_key", "left")
        .join(cq, "cq_key", "left")
        .join(hot_ranges, _QUEUE, "left")
        .fillna({"hot_present": False, "hot_min": 0, "hot_max": 0})
    )
    return joined.select(*schemas.SEGMENT_WORK.fieldNames())


def missing_object(facts: DataFrame) -> DataFrame:
    """``missing_object``: an object a link names is not listed (a slice's batch: once),
    or vanished when a task came to read it (:func:`tieredstore.verifier.decision.object_findings`,
    ``object_unreadable`` facts)."""
    return _fact_anomalies(_facts_of(facts, FactKind.OBJECT_UNREADABLE), FindingKind.MISSING_OBJECT)


def missing_batch(slices: DataFrame, objects: DataFrame, valid: DataFrame) -> DataFrame:
    """``missing_object`` of a batch object the catalogue's slice rows (CATALOGUE_SLICES)
    name and the listing (OBJECTS) does not hold: one row per slice row, so each queue
    the batch held is named with the batch key and the offsets it lost there.

    The catalogue is read before the listing, so a batch compacted and collected in
    between is no finding: a slice row is left out when one valid segment of its queue
    holds all its offsets, or a batch fence of a higher sequence withdrew it (a fence
    withdraws the queue's slices of lower sequences from its offset on). Without a
    catalogue, a deleted batch shows only as its offsets' ``gap`` / ``hot_not_covered``.
    """
    listed = objects.select(expr("key AS batch_key"))
    gone = slices.join(listed, "batch_key", "left_anti").alias("s")
    segments = valid.where(f"link = {_q(schemas.LINK_SEGMENT)}").alias("g")
    compacted = expr(
        "g.topic = s.topic AND g.queue_id = s.queue_id AND g.start_offset <= s.start_offset "
        "AND g.end_offset >= s.end_offset"
    )
    fences = valid.where(f"link = {_q(schemas.LINK_WITHDRAWAL)}").alias("w")
    withdrawn = expr(
        "w.topic = s.topic AND w.queue_id = s.queue_id AND w.sequence > s.sequence "
        "AND w.start_offset <= s.start_offset"
    )
    lost = (
        gone.join(segments, compacted, "left_anti").alias("s").join(fences, withdrawn, "left_anti")
    )
    return _anomalies(
        lost,
        FindingKind.MISSING_OBJECT,
        start="start_offset",
        end="end_offset",
        object_key="batch_key",
        detail="format_string('batch object does not exist; the catalogue says it holds "
        "[%d, %d) of %s/%d', start_offset, end_offset, topic, queue_id)",
    )


def size_mismatch(facts: DataFrame) -> DataFrame:
    """``size_mismatch``: a listed object whose size differs from what its link says (a
    segment's manifest: the object's size; a slice's batch index: the batch's size); a
    slice's batch once (``object_size`` facts)."""
    return _fact_anomalies(_facts_of(facts, FactKind.OBJECT_SIZE), FindingKind.SIZE_MISMATCH)


def digest_mismatch(facts: DataFrame) -> DataFrame:
    """``digest_mismatch``: a span read whole whose digest differs from its link's
    (``object_digest`` facts)."""
    return _fact_anomalies(_facts_of(facts, FactKind.OBJECT_DIGEST), FindingKind.DIGEST_MISMATCH)


def _facts_of(facts: DataFrame, *kinds: FactKind) -> DataFrame:
    wanted = ", ".join(_q(k.value) for k in kinds)
    exploded = facts.selectExpr(*_QUEUE, "explode(facts) AS f").selectExpr(*_QUEUE, "f.*")
    return exploded.where(f"kind IN ({wanted})")


def _fact_anomalies(found: DataFrame, cls: FindingKind) -> DataFrame:
    return _anomalies(
        found,
        cls,
        start="start_offset",
        end="end_offset",
        count="count",
        object_key="object_key",
        detail="detail",
    )


def record_mismatch(facts: DataFrame) -> DataFrame:
    """``record_mismatch``: cold CQ units vs cold commitlog records (``cq_offsets`` and
    ``record_fields`` facts)."""
    found = _facts_of(facts, FactKind.CQ_OFFSETS, FactKind.RECORD_FIELDS)
    return _fact_anomalies(found, FindingKind.RECORD_MISMATCH)


def manifest_mismatch(facts: DataFrame) -> DataFrame:
    """``manifest_mismatch``: a manifest's store-time range or message count differs
    from its records (``manifest_fields`` facts, content level)."""
    found = _facts_of(facts, FactKind.MANIFEST_FIELDS)
    return _fact_anomalies(found, FindingKind.MANIFEST_MISMATCH)


def content_mismatch(facts: DataFrame) -> DataFrame:
    """``content_mismatch``: cold differs from hot (``cq_vs_hot`` and ``record_bytes``)."""
    found = _facts_of(facts, FactKind.CQ_VS_HOT, FactKind.RECORD_BYTES)
    return _fact_anomalies(found, FindingKind.CONTENT_MISMATCH)


def copy_mismatch(valid: DataFrame) -> DataFrame:
    """``content_mismatch``: a slice that does not cover (its offsets are read from a
    segment or an earlier slice) whose digests, by the same algorithm, differ from those
    of the covering link over exactly its offsets: two copies of the same records that
    disagree (found even where hot no longer holds them). A covering link over other
    boundaries is not compared here (each copy is still checked against hot)."""
    a = valid.where(f"NOT covers AND link = {_q(schemas.LINK_SLICE)}")
    b = valid.where("covers").selectExpr(
        "topic AS _t", "queue_id AS _qi", "start_offset AS _s", "end_offset AS _e",
        "manifest_key AS _key", "cl_digest AS _cl", "cq_digest AS _cq",
    )  # fmt: skip
    same = (
        "topic = _t AND queue_id = _qi AND start_offset = _s AND end_offset = _e "
        "AND length(cl_digest) = length(_cl) AND (cl_digest != _cl OR cq_digest != _cq)"
    )
    return _anomalies(
        a.join(b, expr(same), "inner"),
        FindingKind.CONTENT_MISMATCH,
        start="start_offset",
        end="end_offset",
        object_key="cl_key",
        detail="format_string('%s holds [%d, %d) with digests %s / %s, but %s, read for "
        "those offsets, has %s / %s: two copies of the same records disagree', "
        "manifest_key, start_offset, end_offset, cl_digest, cq_digest, _key, _cl, _cq)",
    )


def _unreferenced(objects: DataFrame, valid: DataFrame) -> DataFrame:
    """Segment data objects no valid link names. Manifests and batch objects are commit
    points, never orphans: a batch's data bytes are referenced by its slices, and a batch
    none of whose slices covers anything (or a fence, or one whose head does not parse:
    ``corrupt_manifest``) is garbage awaiting collection."""
    named = valid.selectExpr("explode(array(cl_key, cq_key)) AS key")
    return objects.where("kind NOT IN ('MANIFEST', 'BATCH')").join(named, "key", "left_anti")


def orphan_object(objects: DataFrame, valid: DataFrame, now_ms: int, grace_ms: int) -> DataFrame:
    """``orphan_object``: a COMMIT_LOG / CONSUME_QUEUE object no valid manifest names,
    last written more than ``grace_ms`` before ``now_ms``. Younger ones are commits in
    flight (counted as pending in the queue summary). A consume-queue orphan carries the
    offsets its name and size imply; a commit-log orphan's offsets are unknown (null).
    """
    old = _unreferenced(objects, valid).where(f"mtime_ms < {now_ms - grace_ms}")
    return _anomalies(
        old,
        FindingKind.ORPHAN_OBJECT,
        start="CASE WHEN kind = 'CONSUME_QUEUE' THEN div(base, 20) END",
        end="CASE WHEN kind = 'CONSUME_QUEUE' THEN div(base + size, 20) END",
        object_key="key",
        detail=f"format_string('%s object named by no manifest, last written %d s before "
        f"the check (grace %d s)', kind, div({now_ms} - mtime_ms, 1000), {grace_ms // 1000})",
    )


def catalogue_drift(
    catalogue: DataFrame, valid: DataFrame, now_ms: int, grace_ms: int
) -> DataFrame:
    """``catalogue_drift``: the SQLite catalogue (CATALOGUE) disagrees with the manifests.

    * a COMMITTED catalogue row whose manifest is absent or invalid;
    * a valid manifest older than the grace period that the catalogue does not know
      (younger: the commit protocol writes the manifest before the catalogue);
    * both present, but range, cold commitlog range or digests differ.

    DELETING rows are expiry in progress: with or without their manifest, no drift.
    Only segments are compared: the catalogue records manifests, not batch slices.
    """
    valid = valid.where(f"link = {_q(schemas.LINK_SEGMENT)}")
    cat = catalogue.selectExpr(
        "manifest_key", *[f"{c} AS cat_{c}" for c in catalogue.columns if c != "manifest_key"]
    )
    compared = ("end_offset", "cl_base", "cl_end", "cl_digest", "cq_digest")
    differs = " OR ".join(f"{c} != cat_{c}" for c in compared)
    only_cat = "(topic IS NULL AND cat_status = 'COMMITTED')"
    only_manifest = f"(cat_topic IS NULL AND manifest_mtime_ms < {now_ms - grace_ms})"
    both = f"(topic IS NOT NULL AND cat_status = 'COMMITTED' AND ({differs}))"
    drift = (
        valid.join(cat, "manifest_key", "full_outer")
        .where(f"{only_cat} OR {only_manifest} OR {both}")
        .selectExpr(
            "coalesce(topic, cat_topic) AS topic",
            "coalesce(queue_id, cat_queue_id) AS queue_id",
            "coalesce(start_offset, cat_start_offset) AS _start",
            "coalesce(end_offset, cat_end_offset) AS _end",
            "manifest_key",
            f"CASE WHEN {only_cat} THEN 'catalogue row has no valid manifest' "
            f"WHEN {only_manifest} THEN 'manifest is not in the catalogue' "
            "ELSE format_string('catalogue says [%d, %d) cold commitlog [%d, %d), the "
            "manifest says [%d, %d) cold commitlog [%d, %d) (or their digests differ)', "
            "cat_start_offset, cat_end_offset, cat_cl_base, cat_cl_end, start_offset, "
            "end_offset, cl_base, cl_end) END AS _detail",
        )
    )
    return _anomalies(
        drift,
        FindingKind.CATALOGUE_DRIFT,
        start="_start",
        end="_end",
        object_key="manifest_key",
        detail="_detail",
    )


# -- summary --------------------------------------------------------------------------


def queue_summary(
    cold_ranges: DataFrame,
    hot: DataFrame,
    facts: DataFrame,
    objects: DataFrame,
    valid: DataFrame,
    *,
    now_ms: int,
    grace_ms: int,
) -> DataFrame:
    """QUEUE_SUMMARY: one row per queue seen in hot or cold, with counts and lag
    (unordered); what was compared counts the covering links only (a slice that does
    not cover is verified but not counted twice). ``lag_messages`` is the untiered hot
    tail ``hot_max - max(cold_max, hot_min)`` (the whole hot range for a queue with no
    segment).
    """
    hot_ok = hot.where("error IS NULL").drop("error")
    compared = (
        facts.where("covers")
        .groupBy(*_QUEUE)
        .agg({"units_compared": "sum", "bytes_compared": "sum", "cold_only": "sum"})
    )
    young = _unreferenced(objects, valid).where(f"mtime_ms >= {now_ms - grace_ms}")
    pending = young.groupBy(*_QUEUE).count()
    tail_start = "greatest(coalesce(cold_max, hot_min), hot_min)"
    return (
        cold_ranges.join(hot_ok, _QUEUE, "full_outer")
        .join(compared, _QUEUE, "left")
        .join(pending, _QUEUE, "left")
        .selectExpr(
            *_QUEUE,
            "hot_max IS NOT NULL AS hot_present",
            "hot_min",
            "hot_max",
            "cold_min",
            "cold_max",
            "coalesce(segments, 0) AS segments",
            "coalesce(cold_messages, 0) AS cold_messages",
            "coalesce(cold_bytes, 0) AS cold_bytes",
            f"CAST(CASE WHEN hot_max IS NOT NULL THEN greatest(0, hot_max - {tail_start}) "
            "ELSE 0 END AS BIGINT) AS lag_messages",
            "coalesce(`sum(units_compared)`, 0) AS units_compared",
            "coalesce(`sum(bytes_compared)`, 0) AS bytes_compared",
            "coalesce(`sum(cold_only)`, 0) AS cold_only",
            "coalesce(`count`, 0) AS pending_objects",
            "lag_cutoff",
        )
    )
