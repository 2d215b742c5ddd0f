"""The verification job: read, compose the checks, collect and decide.

:func:`verify` is the whole run against a given SparkSession (tests pass the shared
one); the session is started by :mod:`tieredstore.verifier.spark.session`, and the command line
(``python -m tieredstore.verifier``, ``tieredstore verify``) is :mod:`tieredstore.verifier.cli`.

The job graph. A run is **five Spark jobs** whatever the store's size (the fixed cost
per run is planning and scheduling, not data): three reading stages whose results are
collected to the driver once, then every check over those results. It works in a
session of its own (:func:`_session`, over the caller's SparkContext, whose SQL settings
it leaves alone): no broadcasts, one shuffle partition, no adaptive re-planning, no code
generation. Frames (schemas in :mod:`tieredstore.verifier.schemas`):

1. **Driver inputs** (:func:`_read_inputs`, cheap metadata only): open the hot store,
   take the run's clock (``now_ms``: the lag reference), list the broker's cold prefix
   once with fsspec (``readers.list_cold_objects`` → ``ColdListing``: objects, loss
   records, the provenance records and unrecognised keys), list the hot queues, and
   optionally read the catalogue (first: ``checks.missing_batch``). A prefix without a
   tiering record was refused before Spark started (``readers.require_tiered``).
2. **OBJECTS** (``readers.objects_frame``): the listing as a DataFrame.
3. **HOT_QUEUES** (``readers.hot_queue_frame``): each hot queue's ``[min, max)`` and lag
   cutoff, read by the tasks and collected (job 1). The driver raises any error here
   first (:func:`_raise_hot_errors`), before the expensive stage.
4. **SEGMENTS** (``readers.manifest_frame``): the links of every queue's history, parsed
   in Spark tasks (``mapInArrow``), once, and collected (job 2): a MANIFEST object is a
   segment, a batch object's head (``_batches/``, range reads) one slice per queue it
   holds; a manifest or batch head that does not validate becomes a row with ``error``
   set. The driver applies the one reading rule (``readers.mark_covering``: segments
   win, then the lowest batch sequence) to mark the links that cover their offsets.
   ``checks.valid_segments`` keeps the valid links, ``checks.covering`` the covering
   ones; ``checks.cold_queue_ranges`` gives each queue's cold min/max from those.
5. **SEGMENT_WORK** (``checks.segment_work``): valid links (covering or not) joined with
   their objects' listed sizes and the hot range.
6. **SEGMENT_FACTS** (``readers.segment_facts_frame``, repartitioned into small
   partitions): each link read (a segment's objects whole, a slice's byte ranges of its
   batch) and checked with numpy (:mod:`tieredstore.verifier.segmentcheck`):
   digests, CQ offsets tiling, record fields (content level), cold vs hot units and
   record bytes. Collected (job 3: the data stage, the only one that scales with the
   bytes).
7. **QUEUE state** (``checks.queue_state``) and **LOSSES / LOSS_SPANS**
   (``readers.losses_frames``, built on the driver from the loss records).
8. **ANOMALIES**: one pure check per class over those frames (:mod:`tieredstore.verifier.checks`),
   unioned and **collected once** (job 4). Every frame here is a driver-side table in
   one partition (:func:`_local`), which satisfies any distribution a window, aggregate
   or join asks for: the whole union is planned without an exchange.
9. **QUEUE_SUMMARY** (``checks.queue_summary``), collected (job 5); the driver then adds
   the lag in seconds for lagging queues, and relates each queue to what the cold
   store's own records require (:mod:`tieredstore.verifier.scope`, pure Python).

The driver thus holds a few hundred bytes per segment and per queue (it already holds
the listing: three objects per segment). Python workers are reused across tasks; a JVM
that :func:`tieredstore.verifier.spark.session.spark_session` starts with a local master starts them
from :mod:`tieredstore.verifier.spark.pydaemon`. Each anomaly is a ``FindingKind`` of
:mod:`tieredstore.findings`; the verdict is CORRUPT, DIRTY or CLEAN (exit 2, 1, 0; 3 when
it could not run), and :mod:`tieredstore.verifier.reporting.report` writes the reports.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from tieredstore.cold.layout import SegmentKind
from tieredstore.cold.loss import LossRecord
from tieredstore.errors import OffsetOutOfRangeError, StoreError
from tieredstore.findings import FindingKind
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.verifier import checks, readers, schemas
from tieredstore.verifier.catalogue_reader import CatalogueRows, read_catalogue
from tieredstore.verifier.outcome import Anomaly, QueueReport, Totals, VerificationResult
from tieredstore.verifier.scope import HotFacts, ProvenanceRecords, impossible_losses, judge
from tieredstore.verifier.vocabulary import VerifyOptions

__all__ = ["Reporter", "silent", "verify"]

#: What :func:`verify` tells each stage to: a function of one line of text.
Reporter = Callable[[str], None]


def silent(_text: str) -> None:
    """A stage reporter that says nothing (the default)."""


# -- the run --------------------------------------------------------------------------


def _reference_ts(opts: VerifyOptions) -> int:
    """The time the lag allowance in seconds counts back from: the verifier's clock at
    the start of the run (``opts.now_ms``, injected). Not the broker's checkpoint: on an
    idle broker (or one whose checkpoint is stale) that stops moving, and an untiered
    tail within the allowance of it would pass forever."""
    return opts.now_ms


@dataclass(frozen=True)
class _Inputs:
    """What the driver reads itself before any Spark work: cheap metadata only."""

    hot: HotStore
    reference_ts: int
    cold: readers.ColdLocation
    listing: readers.ColdListing
    hot_queues: list[QueueKey]
    catalogue: CatalogueRows | None

    @property
    def manifests(self) -> int:
        kinds = self.listing.objects["kind"]
        return int(pc.sum(pc.equal(kinds, SegmentKind.MANIFEST.value)).as_py() or 0)

    @property
    def batches(self) -> int:
        kinds = self.listing.objects["kind"]
        return int(pc.sum(pc.equal(kinds, readers.BATCH_KIND)).as_py() or 0)


@dataclass(frozen=True)
class _Run:
    """The frames the checks relate (SEGMENTS, OBJECTS, HOT_QUEUES, ...).

    Every one is a driver-side table in one partition (:func:`_local`): the checks
    over them run without a shuffle, all anomaly classes in one Spark job.
    """

    objects: DataFrame
    segments: DataFrame
    valid: DataFrame
    covered: DataFrame
    cold_ranges: DataFrame
    hot: DataFrame
    work: DataFrame
    facts: DataFrame
    state: DataFrame
    losses: DataFrame
    spans: DataFrame
    #: What hot proves per queue, collected from HOT_QUEUES (:mod:`tieredstore.verifier.scope`).
    hot_facts: dict[tuple[str, int], HotFacts]
    #: Loss records that contradict hot: left out of LOSSES and LOSS_SPANS.
    impossible_losses: tuple[LossRecord, ...]


def _read_inputs(opts: VerifyOptions) -> _Inputs:
    hot = HotStore(opts.hot)
    cold = readers.ColdLocation(opts.cold_url, dict(opts.storage_options))
    catalogue = None
    if opts.metadata_dir is not None:
        catalogue = read_catalogue(opts.metadata_dir, cluster=opts.cluster, broker=opts.broker)
    listing = readers.list_cold_objects(cold, opts.cluster, opts.broker)
    if listing.tiering is None:
        readers.require_tiered(cold, opts.cluster, opts.broker)  # raises NotTieredError
    return _Inputs(
        hot=hot,
        reference_ts=_reference_ts(opts),
        cold=cold,
        listing=listing,
        hot_queues=hot.queues(),
        catalogue=catalogue,
    )


#: The verifier's own SQL settings (a session of its own over the caller's SparkContext).
#: Its relational work is small (a few rows per segment and per queue), so what costs
#: is planning and scheduling, not data: every join is a sort-merge join inside one
#: partition (a broadcast costs a Spark job per join), one shuffle partition (a frame
#: in one partition then needs no exchange), no adaptive re-planning (a job per shuffle
#: stage) and no code generation (compiling it takes longer than running the query).
_SESSION_CONF: Final = {
    "spark.sql.autoBroadcastJoinThreshold": "-1",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


def _session(spark: SparkSession) -> SparkSession:
    """A session of the verifier's own over ``spark``'s context (:data:`_SESSION_CONF`),
    so that the caller's SQL settings are neither used nor changed."""
    session = spark.newSession()
    for key, value in _SESSION_CONF.items():
        session.conf.set(key, value)
    return session


def _local(spark: SparkSession, table: pa.Table, schema: StructType) -> DataFrame:
    """``table`` (collected, or built on the driver) as a frame of one partition.

    One partition satisfies every distribution a window, an aggregate or a join asks
    for, so a query over such frames has no exchange: one stage, one job.
    """
    return spark.createDataFrame(table, schema=schema).coalesce(1)


def _read(
    spark: SparkSession, opts: VerifyOptions, inputs: _Inputs, progress: Reporter = silent
) -> _Run:
    """The three reading stages, each collected to the driver once (one Spark job
    each): hot queues, manifests, segments. Everything after relates their results."""
    listed = readers.objects_frame(spark, inputs.listing)
    times = _epoch_times(inputs.listing)
    progress(f"reading {len(inputs.hot_queues)} hot queues")
    hot_q = readers.hot_queue_frame(
        spark, inputs.hot_queues, opts.hot, opts.lag_allowance, inputs.reference_ts, times
    ).toArrow()
    _raise_hot_errors(hot_q)  # before the expensive stage: its results would be meaningless
    hot_facts = _hot_facts(hot_q, times)
    bad_losses = impossible_losses(inputs.listing.losses, hot_facts)
    objects = listed.coalesce(1)  # the listing, already a driver-side table
    hot = _local(spark, hot_q, schemas.HOT_QUEUES)
    progress(f"reading {inputs.manifests} manifests and {inputs.batches} batch objects")
    links = readers.mark_covering(readers.manifest_frame(listed, inputs.cold).toArrow())
    segments = _local(spark, links, schemas.SEGMENTS)
    valid = checks.valid_segments(segments)
    covered = checks.covering(valid)
    work = checks.segment_work(valid, objects, hot)
    progress(
        f"checking {links.num_rows} segments{' and slices' if inputs.batches else ''} of "
        f"{hot_q.num_rows} queues "
        f"({opts.level.value} level)"
    )
    facts = readers.segment_facts_frame(work, inputs.cold, opts.hot, opts.level, links.num_rows)
    cold_ranges = checks.cold_queue_ranges(covered)
    kept = tuple(x for x in inputs.listing.losses if x not in bad_losses)
    losses, spans = readers.losses_frames(spark, kept)
    return _Run(
        objects=objects,
        segments=segments,
        valid=valid,
        covered=covered,
        cold_ranges=cold_ranges,
        hot=hot,
        work=work,
        facts=_local(spark, facts.toArrow(), schemas.SEGMENT_FACTS),
        state=checks.queue_state(cold_ranges, hot),
        losses=losses.coalesce(1),
        spans=spans.coalesce(1),
        hot_facts=hot_facts,
        impossible_losses=tuple(bad_losses),
    )


def _epoch_times(listing: readers.ColdListing) -> tuple[int, ...]:
    """The tiering record's distinct since_ms values (HOT_QUEUES ``stored_from``)."""
    if listing.tiering is None:
        return ()
    return tuple(sorted({e.since_ms for e in listing.tiering.history}))


def _hot_facts(hot_q: pa.Table, times: tuple[int, ...]) -> dict[tuple[str, int], HotFacts]:
    cols = ("topic", "queue_id", "hot_min", "hot_max", "stored_from")
    return {
        (r["topic"], r["queue_id"]): HotFacts(
            r["hot_min"], r["hot_max"], dict(zip(times, r["stored_from"], strict=True))
        )
        for r in hot_q.select(list(cols)).to_pylist()
    }


def _anomalies(
    spark: SparkSession, opts: VerifyOptions, inputs: _Inputs, run: _Run
) -> tuple[Anomaly, ...]:
    """Every check, unioned and collected in one Spark job (one stage)."""
    grace_ms = int(opts.orphan_grace_s * 1000)
    found = [
        checks.corrupt_manifest(run.segments),
        checks.gap(run.covered, run.spans),
        checks.overlap(run.covered),
        checks.hot_not_covered(run.state, run.spans),
        checks.lost_before_tiering(run.losses, run.cold_ranges),
        checks.cold_ahead_of_hot(run.state),
        checks.missing_object(run.facts),
        checks.size_mismatch(run.facts),
        checks.digest_mismatch(run.facts),
        checks.record_mismatch(run.facts),
        checks.content_mismatch(run.facts),
        checks.copy_mismatch(run.valid),
        checks.manifest_mismatch(run.facts),
        checks.orphan_object(run.objects, run.valid, opts.now_ms, grace_ms),
    ]
    if inputs.catalogue is not None:
        cat = _local(spark, inputs.catalogue.segments, schemas.CATALOGUE)
        found.append(checks.catalogue_drift(cat, run.valid, opts.now_ms, grace_ms))
        sliced = _local(spark, inputs.catalogue.slices, schemas.CATALOGUE_SLICES)
        found.append(checks.missing_batch(sliced, run.objects, run.valid))
    rows = checks.union_anomalies(*found).collect()
    return tuple(Anomaly.from_row(r.asDict()) for r in rows)


def _queues(opts: VerifyOptions, inputs: _Inputs, run: _Run) -> tuple[QueueReport, ...]:
    """QUEUE_SUMMARY, collected in one Spark job; then the lag in seconds (driver).
    Unordered, and without the requirement fields (:func:`_required`)."""
    summary = checks.queue_summary(
        run.cold_ranges,
        run.hot,
        run.facts,
        run.objects,
        run.valid,
        now_ms=opts.now_ms,
        grace_ms=int(opts.orphan_grace_s * 1000),
    )
    queues = (
        _with_lag_seconds(inputs.hot, QueueReport.from_row(r.asDict()), inputs.reference_ts)
        for r in summary.collect()
    )
    return tuple(queues)


def _required(
    inputs: _Inputs, run: _Run, queues: tuple[QueueReport, ...], anomalies: tuple[Anomaly, ...]
) -> tuple[tuple[QueueReport, ...], tuple[Anomaly, ...]]:
    """Each queue's required range from the cold store's own records checked against
    hot, its findings merged with the segment checks' (driver side,
    :func:`tieredstore.verifier.scope.judge`); both sorted."""
    listing = inputs.listing
    assert listing.tiering is not None  # checked by _read_inputs
    records = ProvenanceRecords(listing.tiering, listing.inits, listing.retention,
                                listing.stops)  # fmt: skip
    queues, found = judge(
        queues, anomalies, records, listing.losses, run.impossible_losses, run.hot_facts
    )
    return (
        tuple(sorted(queues, key=lambda q: (q.topic, q.queue_id))),
        tuple(sorted(found, key=_anomaly_order)),
    )


def verify(
    spark: SparkSession, opts: VerifyOptions, progress: Reporter = silent
) -> VerificationResult:
    """Verify that the cold store covers the hot store exactly; see the module docstring.

    Five Spark jobs whatever the store's size: hot queues, manifests and segments (each
    read once, in tasks, and collected), then all anomalies, then the queue summary.
    Runs in a session of its own over ``spark``'s context (:func:`_session`).
    ``progress`` is told each stage as it starts, with the queues, manifests and
    segments it covers (``tieredstore verify --progress``).

    Raises:
        ConfigError: bad URL, missing cold root, seconds allowance without checkpoint.
        StoreError: the hot store is missing, unsupported or a queue's files unreadable.
        CatalogueError: ``metadata_dir`` given but not a catalogue of this broker.
        PySparkException / Py4JError: a Spark job failed.
    """
    started = time.time_ns() // 1_000_000
    progress("listing the cold store and the hot store")
    inputs = _read_inputs(opts)
    progress(
        f"listed {inputs.listing.objects.num_rows} cold objects ({inputs.manifests} "
        f"manifests) and {len(inputs.hot_queues)} hot queues"
    )
    session = _session(spark)
    run = _read(session, opts, inputs, progress)
    progress("looking for anomalies")
    anomalies = _anomalies(session, opts, inputs, run)
    progress(f"summing up {len(inputs.hot_queues)} queues")
    queues, anomalies = _required(inputs, run, _queues(opts, inputs, run), anomalies)
    return VerificationResult(
        options=opts,
        queues=queues,
        anomalies=anomalies,
        totals=_totals(queues, anomalies, inputs.listing),
        unrecognised=inputs.listing.unrecognised,
        reference_ts=inputs.reference_ts,
        started_ms=started,
        finished_ms=time.time_ns() // 1_000_000,
    )


def _with_lag_seconds(hot: HotStore, q: QueueReport, reference_ts: int) -> QueueReport:
    """Fill in how much older than the reference time the first untiered record is.

    Done on the driver, two small reads per lagging queue, once the tail start is known.
    A record the broker deleted meanwhile, or one that does not read, leaves the lag in
    seconds unknown (None): it is shown, never judged.
    """
    if not q.lag_messages or q.hot_max is None or q.hot_min is None:
        return q
    tail = q.hot_max - q.lag_messages
    try:
        ts = readers.tail_timestamp(hot, QueueKey(q.topic, q.queue_id), tail)
    except (OffsetOutOfRangeError, StoreError):
        return q
    return replace(q, lag_seconds=(reference_ts - ts) / 1000.0)


def _anomaly_order(a: Anomaly) -> tuple[str, int, int, str, str]:
    start = -1 if a.start is None else a.start
    return (a.topic, a.queue_id, start, a.anomaly.value, a.object_key or "")


def _raise_hot_errors(hot_q: pa.Table) -> None:
    """StoreError for the first hot queue whose files did not read (HOT_QUEUES rows)."""
    bad = hot_q.filter(pc.is_valid(hot_q["error"])).slice(0, 1).to_pylist()
    for row in bad:
        raise StoreError(f"cannot read hot queue {row['topic']}/{row['queue_id']}: {row['error']}")


def _totals(
    queues: Sequence[QueueReport], anomalies: Sequence[Anomaly], listing: readers.ColdListing
) -> Totals:
    corrupt = sum(1 for a in anomalies if a.anomaly is FindingKind.CORRUPT_MANIFEST)
    return Totals(
        queues=len(queues),
        segments=sum(q.segments for q in queues),
        corrupt_manifests=corrupt,
        objects=listing.objects.num_rows,
        unrecognised_objects=len(listing.unrecognised),
        pending_objects=sum(q.pending_objects for q in queues),
        units_compared=sum(q.units_compared for q in queues),
        bytes_compared=sum(q.bytes_compared for q in queues),
        cold_only=sum(q.cold_only for q in queues),
        lag_messages=sum(q.lag_messages for q in queues),
    )
