"""The fleet job: every tiered broker of a cluster (or of every cluster) in one Spark job.

Each broker host writes hot fingerprints into the cold store (``tieredstore
fingerprint``, :mod:`tieredstore.verifier.fleet.take`); this job checks each broker's cold history
against that broker's **newest** fingerprint, never reading a hot store:

1. the driver lists two levels of the cold root: the cluster directories
   (``<md5(cluster)[:8]>_<cluster>``) and the broker directories in them;
2. one task per broker lists the broker prefix
   (:func:`tieredstore.verifier.readers.list_cold_objects`:
   objects, tiering/init/retention/loss records), reads its batch objects' heads (one
   slice per queue each: :func:`tieredstore.verifier.readers.read_batch`; one that does not parse
   is a ``corrupt_manifest`` naming the batch) and its newest fingerprint;
3. one task per queue (all brokers' queues spread over the executors) reads the queue's
   manifests, takes its slices, and checks its links (segments and slices, by the one
   reading rule) against the fingerprint's facts
   (:func:`tieredstore.verifier.fleet.check.check_queue`);
4. the driver decides each broker's required ranges and records against hot
   (:func:`tieredstore.verifier.scope.judge`, the single-broker decision) with the fingerprint as
   the source of hot facts (:class:`tieredstore.verifier.scope.HotFacts`), and each verdict.

Loss records the fingerprint's hot range contradicts
(:func:`tieredstore.verifier.scope.impossible_losses`) are left out of the accepted losses before
the queue tasks run, as the single-broker job does before its segment checks.

The **newest** fingerprint is the one of the highest sequence in its key
(:class:`~tieredstore.cold.layout.FingerprintName`: ``tieredstore fingerprint`` creates
each at one past the highest listed), never the one of the latest host time: a
fingerprint taken while its host's clock ran ahead cannot stay "newest". Every listed
fingerprint dated after the job's clock is named in the broker's ``notes``.

A broker with a tiering record whose newest fingerprint is missing, unreadable, not what
its key says (another broker's, another sequence's: a copy), dated after the job's clock
(never trusted as fresh), older than ``max_fingerprint_age_s`` (by the job's clock) or
without ``stored_from`` for one of the tiering record's times (taken before that entry
was written) is **INCOMPLETE**
— or worse, if its cold data alone shows damage — never CLEAN. The fleet's verdict is
its worst broker's. A prefix without a tiering record is not a tiered broker and is left out.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from pyspark.sql import SparkSession

from tieredstore.cold.fingerprint import Fingerprint, read_fingerprint
from tieredstore.cold.history import Committed, Withdrawal, batch_links
from tieredstore.cold.layout import (
    SegmentKind,
    broker_prefix,
    cluster_dir,
    fingerprint_prefix,
    parse_fingerprint_name,
)
from tieredstore.cold.loss import LossRecord
from tieredstore.cold.provenance import QueueInit, RetentionMark, StopMark, TieringRecord
from tieredstore.errors import (
    CorruptBatchError,
    CorruptManifestError,
    CorruptProvenanceError,
    InvalidNameError,
)
from tieredstore.findings import FindingKind
from tieredstore.verifier.fleet.check import QueueCheck, QueueWork, check_queue
from tieredstore.verifier.outcome import Anomaly, QueueReport, Totals, VerificationResult
from tieredstore.verifier.readers import (
    BATCH_KIND,
    ColdLocation,
    list_cold_objects,
    open_cold_filesystem,
    read_batch,
)
from tieredstore.verifier.scope import (
    HotFacts,
    ProvenanceRecords,
    impossible_losses,
    judge,
    merge_spans,
)
from tieredstore.verifier.verdict import Verdict, worst
from tieredstore.verifier.vocabulary import (
    DEFAULT_LAG_ALLOWANCE,
    LagAllowance,
    Level,
    VerifyOptions,
)

__all__ = [
    "DEFAULT_MAX_FINGERPRINT_AGE_S",
    "BrokerRef",
    "FleetOptions",
    "FleetResult",
    "list_brokers",
    "verify_fleet",
]

#: A fingerprint older than this (36 h: a nightly cron may slip a day) proves nothing.
DEFAULT_MAX_FINGERPRINT_AGE_S: Final = 36 * 3600.0


@dataclass(frozen=True, slots=True, order=True)
class BrokerRef:
    cluster: str
    broker: str

    def __str__(self) -> str:
        return f"{self.cluster}/{self.broker}"


@dataclass(frozen=True)
class FleetOptions:
    """One fleet run: the cold store, which clusters (empty: all), the run's clock."""

    cold_url: str
    now_ms: int
    clusters: tuple[str, ...] = ()
    lag_allowance: LagAllowance = DEFAULT_LAG_ALLOWANCE
    max_fingerprint_age_s: float = DEFAULT_MAX_FINGERPRINT_AGE_S
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def cold(self) -> ColdLocation:
        return ColdLocation(self.cold_url, dict(self.storage_options))


@dataclass(frozen=True)
class FleetResult:
    """Every broker's result, worst first; ``workers`` are the task locations that ran
    the queue checks (``host:cwd``: an executor's work directory names it)."""

    options: FleetOptions
    brokers: tuple[VerificationResult, ...]
    started_ms: int
    finished_ms: int
    workers: tuple[str, ...] = ()

    @property
    def verdict(self) -> Verdict:
        return worst(r.verdict for r in self.brokers)


# -- 1. the driver lists clusters and brokers ----------------------------------------


def list_brokers(cold: ColdLocation, clusters: tuple[str, ...] = ()) -> list[BrokerRef]:
    """The broker directories of ``clusters`` (empty: of every cluster directory at the
    cold root), sorted. Raises ConfigError for an unreachable cold root."""
    fs, root = open_cold_filesystem(cold)
    names = clusters or tuple(_cluster_names(fs, root))
    out: list[BrokerRef] = []
    for cluster in names:
        base = ColdLocation.path(root, cluster_dir(cluster))
        try:
            entries = fs.ls(base, detail=True)
        except FileNotFoundError:
            continue
        for e in entries:
            name = str(e["name"]).rstrip("/").rsplit("/", 1)[-1]
            if e.get("type") == "directory" and _valid(name, "broker"):
                out.append(BrokerRef(cluster, name))
    return sorted(out)


def _valid(name: str, what: str) -> bool:
    try:
        broker_prefix("c", name) if what == "broker" else cluster_dir(name)
    except InvalidNameError:
        return False
    return True


def _cluster_names(fs: Any, root: str) -> Iterator[str]:
    for e in fs.ls(root or "", detail=True):
        name = str(e["name"]).rstrip("/").rsplit("/", 1)[-1]
        _, sep, cluster = name.partition("_")
        directory = sep and e.get("type") == "directory"
        if directory and _valid(cluster, "cluster") and cluster_dir(cluster) == name:
            yield cluster


# -- 2. a task per broker: its listing and newest fingerprint -----------------------


@dataclass(frozen=True)
class BrokerScan:
    """One broker prefix as a task listed it."""

    ref: BrokerRef
    tiering: TieringRecord | None
    inits: tuple[QueueInit, ...]
    retention: tuple[RetentionMark, ...]
    losses: tuple[LossRecord, ...]
    unrecognised: tuple[str, ...]
    objects: dict[tuple[str, int], dict[str, int]]
    manifests: dict[tuple[str, int], list[str]]
    fingerprint: Fingerprint | None
    fingerprint_key: str | None
    fingerprint_problem: str | None
    stops: tuple[StopMark, ...] = ()
    #: Per queue, the slices its batch objects hold (links; read in the queue tasks).
    slices: dict[tuple[str, int], list[Committed | Withdrawal]] = field(default_factory=dict)
    #: The listed batch objects (key → size): where those slices' bytes are.
    batches: dict[str, int] = field(default_factory=dict)
    #: A ``corrupt_manifest`` per batch object whose head does not parse.
    batch_problems: tuple[Anomaly, ...] = ()
    #: The listed fingerprints dated after the job's clock, named (``notes``).
    fingerprint_notes: tuple[str, ...] = ()

    def hot_facts(self) -> dict[tuple[str, int], HotFacts]:
        """What the fingerprint proves of each hot queue (empty: no fingerprint)."""
        fp = self.fingerprint
        if fp is None:
            return {}
        return {
            (q.topic, q.queue_id): HotFacts(q.hot_min, q.hot_max, dict(q.stored_from))
            for q in fp.queues
        }

    def impossible_losses(self) -> list[LossRecord]:
        """The loss records over offsets the fingerprint says hot holds."""
        return impossible_losses(self.losses, self.hot_facts())

    def accepted_losses(self) -> list[LossRecord]:
        """The loss records the queue checks accept: the others explain nothing."""
        bad = self.impossible_losses()
        return [x for x in self.losses if x not in bad]


@dataclass(frozen=True)
class _ScanBroker:
    cold: ColdLocation
    now_ms: int

    def __call__(self, ref: BrokerRef) -> BrokerScan:
        listing = list_cold_objects(self.cold, ref.cluster, ref.broker)
        objects: dict[tuple[str, int], dict[str, int]] = {}
        manifests: dict[tuple[str, int], list[str]] = {}
        batches: dict[str, int] = {}
        for row in listing.objects.to_pylist():
            if row["kind"] == BATCH_KIND:
                batches[row["key"]] = row["size"]
                continue
            q = (row["topic"], row["queue_id"])
            objects.setdefault(q, {})[row["key"]] = row["size"]
            if row["kind"] == SegmentKind.MANIFEST.value:
                manifests.setdefault(q, []).append(row["key"])
        fp, key, problem, notes = self._newest_fingerprint(ref)
        slices, problems = self._slices(batches)
        return BrokerScan(
            ref,
            listing.tiering,
            listing.inits,
            listing.retention,
            listing.losses,
            listing.unrecognised,
            objects,
            manifests,
            fp,
            key,
            problem,
            listing.stops,
            slices,
            batches,
            problems,
            notes,
        )

    def _slices(
        self, batches: dict[str, int]
    ) -> tuple[dict[tuple[str, int], list[Committed | Withdrawal]], tuple[Anomaly, ...]]:
        """Every batch object's slices by queue (a fence: its withdrawals; a batch
        collected since the listing: none), and a ``corrupt_manifest`` for each head that
        does not parse."""
        fs, root = self.cold.filesystem()
        slices: dict[tuple[str, int], list[Committed | Withdrawal]] = {}
        problems: list[Anomaly] = []
        for key, size in sorted(batches.items()):
            try:
                head = read_batch(fs, ColdLocation.path(root, key), key, size)
            except FileNotFoundError:
                continue
            except (CorruptBatchError, CorruptManifestError) as exc:
                problems.append(
                    Anomaly("", -1, None, FindingKind.CORRUPT_MANIFEST, None, None, key, str(exc))
                )
                continue
            for link in batch_links(head):  # a fence's: its withdrawals
                slices.setdefault((link.topic, link.queue_id), []).append(link)
        return slices, tuple(problems)

    def _newest_fingerprint(
        self, ref: BrokerRef
    ) -> tuple[Fingerprint | None, str | None, str | None, tuple[str, ...]]:
        """The newest fingerprint by sequence (module doc), its key, why it cannot be
        used (None: it can), and a note per listed fingerprint dated after the clock."""
        fs, root = self.cold.filesystem()
        prefix = fingerprint_prefix(ref.cluster, ref.broker)
        try:
            names = [
                str(p).rsplit("/", 1)[-1]
                for p in fs.ls(ColdLocation.path(root, prefix), detail=False)
            ]
        except FileNotFoundError:
            names = []
        named = sorted((n, name) for name in names if (n := parse_fingerprint_name(name)))
        if not named:
            return None, None, "no hot fingerprint", ()
        notes = tuple(
            f"hot fingerprint {prefix}/{name} is dated {(n.stamp_ms - self.now_ms) / 1000:.0f} s "
            "after the verifier's clock (its host's clock ran ahead): never used as fresh"
            for n, name in named
            if n.stamp_ms > self.now_ms
        )
        newest, name = named[-1]
        key = f"{prefix}/{name}"
        try:
            fp = read_fingerprint(fs.cat_file(ColdLocation.path(root, key)), key)
        except CorruptProvenanceError as exc:
            return None, key, f"the newest hot fingerprint does not read: {exc}", notes
        if (fp.cluster, fp.broker) != (ref.cluster, ref.broker):
            why = f"the newest hot fingerprint ({key}) is of {fp.cluster}/{fp.broker}"
            return None, key, why, notes
        if (fp.sequence, fp.taken_ms) != (newest.sequence, newest.stamp_ms):
            why = (
                f"the newest hot fingerprint ({key}) says sequence {fp.sequence}, taken at "
                f"{fp.taken_ms}: not what its key says (a copy)"
            )
            return None, key, why, notes
        if fp.taken_ms > self.now_ms:
            why = (
                f"the newest hot fingerprint ({key}) is dated "
                f"{(fp.taken_ms - self.now_ms) / 1000:.0f} s after the verifier's clock: its "
                "host's clock ran ahead; take a new one"
            )
            return None, key, why, notes
        return fp, key, None, notes


# -- 3. a task per queue -------------------------------------------------------------


@dataclass(frozen=True)
class _CheckQueues:
    cold: ColdLocation

    def __call__(self, works: Iterable[QueueWork]) -> Iterator[QueueCheck]:
        fs, root = self.cold.filesystem()
        where = f"{socket.gethostname()}:{os.getcwd()}"
        for w in works:
            yield replace(check_queue(fs, root, w), where=where)


def _works(scan: BrokerScan, opts: FleetOptions) -> list[QueueWork]:
    fp = scan.fingerprint
    queues = set(scan.objects) | set(scan.slices)
    queues |= {(q.topic, q.queue_id) for q in fp.queues} if fp else set()
    losses = scan.accepted_losses()
    spans = merge_spans(losses)
    out = []
    for topic, qid in sorted(queues):
        out.append(
            QueueWork(
                cluster=scan.ref.cluster,
                broker=scan.ref.broker,
                topic=topic,
                queue_id=qid,
                objects=scan.objects.get((topic, qid), {})
                | {
                    link.commit_log_key: scan.batches[link.commit_log_key]
                    for link in scan.slices.get((topic, qid), [])
                    if isinstance(link, Committed)
                },
                manifests=scan.manifests.get((topic, qid), []),
                slices=scan.slices.get((topic, qid), []),
                hot=fp.queue(topic, qid) if fp else None,
                losses=[x for x in losses if (x.topic, x.queue_id) == (topic, qid)],
                spans=[s for s in spans if (s.topic, s.queue_id) == (topic, qid)],
                allowance=opts.lag_allowance,
                reference_ms=fp.taken_ms if fp else opts.now_ms,
            )
        )
    return out


# -- 4. the driver decides ------------------------------------------------------------


def _incomplete(scan: BrokerScan, opts: FleetOptions) -> str | None:
    fp = scan.fingerprint
    if fp is None:
        return scan.fingerprint_problem or "no hot fingerprint"
    age_s = (opts.now_ms - fp.taken_ms) / 1000
    if age_s > opts.max_fingerprint_age_s:
        return (
            f"the newest hot fingerprint ({scan.fingerprint_key}) is {age_s / 3600:.1f} h old, "
            f"older than the allowed {opts.max_fingerprint_age_s / 3600:g} h"
        )
    assert scan.tiering is not None
    times = sorted({e.since_ms for e in scan.tiering.history})
    for q in fp.queues:
        missing = [t for t in times if t not in dict(q.stored_from)]
        if missing:
            return (
                f"the newest hot fingerprint ({scan.fingerprint_key}) has no stored_from for "
                f"tiering-record time {missing[0]} of {q.topic}/{q.queue_id} (taken before "
                "that entry was written): take a new one"
            )
    return None


def _broker_result(
    scan: BrokerScan, checks: list[QueueCheck], opts: FleetOptions, started: int
) -> VerificationResult:
    assert scan.tiering is not None
    queues: list[QueueReport] = [c.queue for c in checks]
    found: list[Anomaly] = [a for c in checks for a in c.anomalies]
    found.extend(scan.batch_problems)
    records = ProvenanceRecords(scan.tiering, scan.inits, scan.retention, scan.stops)
    decided, judged = judge(
        queues, found, records, scan.losses, scan.impossible_losses(), scan.hot_facts()
    )
    anomalies = sorted(
        judged,
        key=lambda a: (a.topic, a.queue_id, -1 if a.start is None else a.start, a.anomaly.value),
    )
    queues_sorted = tuple(sorted(decided, key=lambda q: (q.topic, q.queue_id)))
    fp = scan.fingerprint
    options = VerifyOptions(
        hot=Path(scan.fingerprint_key or "(no hot fingerprint)"),
        cold_url=opts.cold_url,
        cluster=scan.ref.cluster,
        broker=scan.ref.broker,
        now_ms=opts.now_ms,
        level=Level.CONTENT,
        lag_allowance=opts.lag_allowance,
        storage_options=opts.storage_options,
    )
    objects = sum(len(v) for v in scan.objects.values()) + len(scan.batches)
    return VerificationResult(
        options=options,
        queues=queues_sorted,
        anomalies=tuple(anomalies),
        totals=Totals(
            queues=len(queues_sorted),
            segments=sum(q.segments for q in queues_sorted),
            corrupt_manifests=sum(1 for a in anomalies if a.anomaly.value == "corrupt_manifest"),
            objects=objects,
            unrecognised_objects=len(scan.unrecognised),
            pending_objects=0,
            units_compared=sum(q.units_compared for q in queues_sorted),
            bytes_compared=sum(q.bytes_compared for q in queues_sorted),
            cold_only=sum(q.cold_only for q in queues_sorted),
            lag_messages=sum(q.lag_messages for q in queues_sorted),
        ),
        unrecognised=scan.unrecognised,
        reference_ts=fp.taken_ms if fp else None,
        started_ms=started,
        finished_ms=time.time_ns() // 1_000_000,
        incomplete=_incomplete(scan, opts),
        notes=scan.fingerprint_notes,
    )


def verify_fleet(spark: SparkSession, opts: FleetOptions) -> FleetResult:
    """Verify every tiered broker of ``opts.clusters`` (module doc): two Spark jobs,
    the broker listings and the queue checks.

    Raises:
        ConfigError: the cold root is unreachable, or no tiered broker was found.
        PySparkException / Py4JError: a Spark job failed (an environment error in a task).
    """
    from tieredstore.errors import ConfigError

    started = time.time_ns() // 1_000_000
    cold = opts.cold
    brokers = list_brokers(cold, opts.clusters)
    sc = spark.sparkContext
    scans = [
        s
        for s in sc.parallelize(brokers, max(1, len(brokers)))
        .map(_ScanBroker(cold, opts.now_ms))
        .collect()
        if s.tiering is not None
    ]
    if not scans:
        where = ", ".join(opts.clusters) if opts.clusters else "any cluster"
        raise ConfigError(f"no tiered broker in {where}", where=opts.cold_url)
    works = [w for s in scans for w in _works(s, opts)]
    slices = max(1, min(len(works), 4 * sc.defaultParallelism))
    checks: list[QueueCheck] = (
        sc.parallelize(works, slices).mapPartitions(_CheckQueues(cold)).collect() if works else []
    )
    by_broker: dict[tuple[str, str], list[QueueCheck]] = {}
    for c in checks:
        by_broker.setdefault(c.broker, []).append(c)
    results = [
        _broker_result(s, by_broker.get((s.ref.cluster, s.ref.broker), []), opts, started)
        for s in scans
    ]
    results.sort(key=lambda r: (-r.verdict.rank, r.options.cluster, r.options.broker))
    return FleetResult(
        options=opts,
        brokers=tuple(results),
        started_ms=started,
        finished_ms=time.time_ns() // 1_000_000,
        workers=tuple(sorted({c.where for c in checks})),
    )
