"""Spark schemas of every frame the verifier builds, and their Arrow twins.

Frames, in the order a run builds them::

    OBJECTS        driver listing of the broker prefix (one row per recognised object:
                   segment objects, and batch objects of ``_batches/``)
    SEGMENTS       one row per link of a queue's history, parsed in Spark tasks: per
                   MANIFEST object (a segment) and per slice of a batch object; ``error``
                   is set (and the link's fields are null) when a manifest or a batch
                   head does not validate
    HOT_INPUT      the hot queues to inspect (listed by the driver)
    HOT_QUEUES     per hot queue: hot [min, max), the lag cutoff, and where the
                   messages stored since each tiering record entry begin
    SEGMENT_WORK   a valid link (segment or slice), what the listing found for its
                   objects, its queue's hot range: the input of the verification tasks
    SEGMENT_FACTS  what each link's task found (digests, counts, fact ranges)
    ANOMALIES      the report: one row per anomaly, offsets as half-open ranges
    QUEUE_SUMMARY  one row per queue seen on either side
    CATALOGUE      the catalogue's committed segments (optional catalogue_drift check)
    CATALOGUE_SLICES  the catalogue's batch slice rows (optional: a batch object they
                   name that cold does not hold is ``missing_object``)
    LOSSES         the loss records (``LOSS/``) the driver read: accepted losses
    LOSS_SPANS     per queue, the accepted losses merged into maximal contiguous spans

Offsets are ``long``; a queue id is ``int`` (a Java int). A null offset range means the
anomaly is about an object whose offsets are unknown (e.g. an orphan commitlog object).
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

__all__ = [
    "ANOMALIES",
    "CATALOGUE",
    "CATALOGUE_SLICES",
    "FACT",
    "HOT_INPUT",
    "HOT_QUEUES",
    "LINK_SEGMENT",
    "LINK_SLICE",
    "LINK_WITHDRAWAL",
    "LOSSES",
    "LOSS_SPANS",
    "OBJECTS",
    "QUEUE_SUMMARY",
    "SEGMENTS",
    "SEGMENT_FACTS",
    "SEGMENT_WORK",
    "arrow_schema",
]


def _s(name: str, typ: DataType, nullable: bool = False) -> StructField:
    return StructField(name, typ, nullable)


_QUEUE: Final = [_s("topic", StringType()), _s("queue_id", IntegerType())]

OBJECTS: Final = StructType(
    [
        _s("key", StringType()),
        _s("kind", StringType()),  # COMMIT_LOG | CONSUME_QUEUE | MANIFEST | BATCH
        *_QUEUE,  # a BATCH: topic "" and queue_id -1 (it holds many queues' slices)
        _s("base", LongType()),  # a BATCH: its sequence
        _s("size", LongType()),
        _s("mtime_ms", LongType()),
    ]
)

#: A link's commit point (``tieredstore.cold.history.EntryKind`` values).
LINK_SEGMENT: Final = "segment"
LINK_SLICE: Final = "slice"
#: A batch fence's withdrawal of a queue's slices from ``start_offset`` on (read by the
#: driver's :func:`tieredstore.verifier.readers.mark_covering`, which drops these rows).
LINK_WITHDRAWAL: Final = "withdrawal"

SEGMENTS: Final = StructType(
    [
        # The link's history key: a segment's manifest key; a slice's
        # ``<batch key>#<topic>/<queue_id>``; a batch whose head does not validate: the
        # batch key (topic "", queue_id -1, start_offset its sequence).
        _s("manifest_key", StringType()),
        *_QUEUE,
        _s("start_offset", LongType()),  # from the key when the manifest is corrupt
        _s("manifest_mtime_ms", LongType()),
        _s("error", StringType(), True),
        _s("end_offset", LongType(), True),
        _s("cl_base", LongType(), True),
        _s("cl_end", LongType(), True),
        _s("cl_key", StringType(), True),
        _s("cl_size", LongType(), True),
        _s("cl_digest", StringType(), True),
        _s("cq_key", StringType(), True),
        _s("cq_size", LongType(), True),
        _s("cq_digest", StringType(), True),
        _s("min_store_timestamp", LongType(), True),
        _s("max_store_timestamp", LongType(), True),
        _s("message_count", LongType(), True),
        _s("writer_id", StringType(), True),
        _s("lease_epoch", LongType(), True),
        _s("created_at_ms", LongType(), True),
        _s("link", StringType()),  # LINK_SEGMENT | LINK_SLICE
        _s("sequence", LongType()),  # the batch's sequence (a slice); -1 for a segment
        # Where the spans lie: cl/cq bytes [at, at + size) of an object of object_size
        # bytes (a segment: 0 and the whole object; a slice: inside the batch object).
        _s("cl_at", LongType(), True),
        _s("cq_at", LongType(), True),
        _s("cl_object_size", LongType(), True),
        _s("cq_object_size", LongType(), True),
        # A compressed COMMIT_LOG object's stored size (manifest format 3), or a compressed
        # batch's (format 2: both spans of a slice lie in it); null: plain.
        _s("cl_stored_size", LongType(), True),
        # Its stored bytes' CRC-32C (manifest format 3's stored_digest); null: plain.
        _s("cl_stored_digest", StringType(), True),
        # Set on the driver once every link is read (null in the tasks' output): the link
        # covers its offsets for the queue's coverage. Every valid segment does (one that
        # overlaps another is an ``overlap``); a slice does when the one reading rule
        # (``tieredstore.cold.history.choose``) chooses it. A slice it does not choose (a
        # compacted slice, a stale writer's duplicate) is still verified, covers nothing.
        _s("covers", BooleanType(), True),
    ]
)

HOT_INPUT: Final = StructType(_QUEUE)

HOT_QUEUES: Final = StructType(
    [
        *_QUEUE,
        _s("hot_min", LongType()),
        _s("hot_max", LongType()),
        # Offsets >= lag_cutoff may be untiered (within the lag allowance).
        _s("lag_cutoff", LongType()),
        # Per time of the run's ``epoch_times`` (the tiering record's since_ms values, in
        # order): the first hot offset stored at or after it (hot_max: none).
        _s("stored_from", ArrayType(LongType(), False)),
        # Set when the queue's hot files could not be read; the run then fails.
        _s("error", StringType(), True),
    ]
)

SEGMENT_WORK: Final = StructType(
    [
        _s("manifest_key", StringType()),
        *_QUEUE,
        _s("start_offset", LongType()),
        _s("end_offset", LongType()),
        _s("cl_base", LongType()),
        _s("cl_end", LongType()),
        _s("cl_key", StringType()),
        _s("cl_size", LongType()),
        _s("cl_digest", StringType()),
        _s("cq_key", StringType()),
        _s("cq_size", LongType()),
        _s("cq_digest", StringType()),
        _s("cl_listed_size", LongType(), True),  # null: not listed
        _s("cq_listed_size", LongType(), True),
        _s("cl_at", LongType()),  # the spans: as in SEGMENTS
        _s("cq_at", LongType()),
        _s("cl_object_size", LongType()),
        _s("cq_object_size", LongType()),
        _s("cl_stored_size", LongType(), True),  # as in SEGMENTS
        _s("cl_stored_digest", StringType(), True),  # as in SEGMENTS
        _s("link", StringType()),
        _s("covers", BooleanType()),
        _s("hot_present", BooleanType()),
        _s("hot_min", LongType()),
        _s("hot_max", LongType()),
        _s("min_store_timestamp", LongType()),  # what the manifest claims
        _s("max_store_timestamp", LongType()),
        _s("message_count", LongType()),
    ]
)

FACT: Final = StructType(
    [
        _s("kind", StringType()),  # a segmentcheck.FactKind value
        _s("start_offset", LongType()),
        _s("end_offset", LongType()),
        _s("count", LongType()),
        _s("object_key", StringType(), True),
        _s("detail", StringType()),
    ]
)

SEGMENT_FACTS: Final = StructType(
    [
        _s("manifest_key", StringType()),
        *_QUEUE,
        _s("start_offset", LongType()),
        _s("end_offset", LongType()),
        _s("cl_key", StringType()),
        _s("cq_key", StringType()),
        _s("cl_digest", StringType()),  # what the manifest says
        _s("cq_digest", StringType()),
        _s("cl_digest_actual", StringType(), True),  # null: not read
        _s("cq_digest_actual", StringType(), True),
        _s("units_compared", LongType()),
        _s("bytes_compared", LongType()),
        _s("cold_only", LongType()),
        _s("covers", BooleanType()),  # as in SEGMENTS: counted in the queue summary
        _s("facts", ArrayType(FACT, False)),
    ]
)

ANOMALIES: Final = StructType(
    [
        _s("anomaly", StringType()),  # a model.FindingKind value
        _s("severity", StringType()),
        _s("topic", StringType(), True),
        _s("queue_id", IntegerType(), True),
        _s("start_offset", LongType(), True),
        _s("end_offset", LongType(), True),
        _s("count", LongType(), True),
        _s("object_key", StringType(), True),
        _s("detail", StringType()),
    ]
)

QUEUE_SUMMARY: Final = StructType(
    [
        *_QUEUE,
        _s("hot_present", BooleanType()),
        _s("hot_min", LongType(), True),
        _s("hot_max", LongType(), True),
        _s("cold_min", LongType(), True),  # the queue's init offset as cold shows it
        _s("cold_max", LongType(), True),
        _s("segments", LongType()),
        _s("cold_messages", LongType()),
        _s("cold_bytes", LongType()),
        _s("lag_messages", LongType()),
        _s("units_compared", LongType()),
        _s("bytes_compared", LongType()),
        _s("cold_only", LongType()),
        _s("pending_objects", LongType()),  # unreferenced, younger than the grace
        _s("lag_cutoff", LongType(), True),  # null: no hot queue
    ]
)

CATALOGUE: Final = StructType(
    [
        _s("manifest_key", StringType()),
        *_QUEUE,
        _s("start_offset", LongType()),
        _s("end_offset", LongType()),
        _s("cl_base", LongType()),
        _s("cl_end", LongType()),
        _s("cl_digest", StringType()),
        _s("cq_digest", StringType()),
        _s("status", StringType()),  # COMMITTED | DELETING
    ]
)

CATALOGUE_SLICES: Final = StructType(
    [
        _s("batch_key", StringType()),
        _s("sequence", LongType()),
        *_QUEUE,
        _s("start_offset", LongType()),
        _s("end_offset", LongType()),
    ]
)

LOSSES: Final = StructType(
    [
        _s("record_key", StringType()),
        *_QUEUE,
        _s("start_offset", LongType()),
        _s("end_offset", LongType()),
        _s("accepted_at_ms", LongType()),
        _s("writer_id", StringType()),
        _s("lease_epoch", LongType()),
        _s("detail", StringType()),  # how the report describes it (built on the driver)
    ]
)

LOSS_SPANS: Final = StructType([*_QUEUE, _s("span_start", LongType()), _s("span_end", LongType())])

_ARROW: Final[dict[type[DataType], pa.DataType]] = {
    StringType: pa.string(),
    IntegerType: pa.int32(),
    LongType: pa.int64(),
    BooleanType: pa.bool_(),
}


def _arrow_type(typ: DataType) -> pa.DataType:
    if isinstance(typ, StructType):
        return pa.struct([_arrow_field(f) for f in typ.fields])
    if isinstance(typ, ArrayType):
        return pa.list_(pa.field("element", _arrow_type(typ.elementType), typ.containsNull))
    return _ARROW[type(typ)]


def _arrow_field(f: StructField) -> pa.Field:
    return pa.field(f.name, _arrow_type(f.dataType), f.nullable)


def arrow_schema(schema: StructType) -> pa.Schema:
    """Return the Arrow schema Spark expects for ``schema`` (e.g. from ``mapInArrow``)."""
    return pa.schema([_arrow_field(f) for f in schema.fields])
