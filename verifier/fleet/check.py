"""One queue of one broker checked against that broker's hot fingerprint: pure, no Spark.

The fleet job (:mod:`verifier.fleet.job`) runs :func:`check_queue` in a Spark task per
queue. It reads the queue's manifests and objects through a sync fsspec filesystem and
decides what the single-broker job decides for a queue, with the hot side given as
facts (:class:`~verifier.fleet.fingerprint.QueuePrint`: hot min/max, block digests and store
times) instead of hot files:

* ``corrupt_manifest``, ``gap``, ``overlap`` (unless an accepted loss span covers the
  hole), ``missing_object``, ``size_mismatch``, ``digest_mismatch``, ``record_mismatch``
  and ``manifest_mismatch`` from cold alone (:func:`~verifier.segmentcheck.check_segment`);
* ``content_mismatch`` per **block**: each fingerprint block that cold covers whole is
  hashed from cold records (:class:`~verifier.fleet.fingerprint.BlockHasher`) and compared;
  the anomaly names the block (``verify --hot`` on the broker host names the byte);
* ``hot_not_covered`` for the tail: ``[cold_max, lag_cutoff)``, the cutoff from the
  fingerprint's store times and its ``taken_ms`` as the reference time;
* ``lost_before_tiering`` for loss records in scope.

The required range (``missing_head``, ``unproven_start``, ``hot_not_covered`` of a queue
with no segment) is decided afterwards on the driver by :mod:`verifier.scope`, over the
:class:`~verifier.outcome.QueueReport` this returns. ``cold_ahead_of_hot`` is not
decided: cold may hold offsets written after the fingerprint was taken.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fsspec.spec import AbstractFileSystem

from tieredstore.cold.digests import DigestAlgorithm, digest
from tieredstore.cold.loss import LossRecord
from tieredstore.cold.manifest import Manifest, read_stored
from tieredstore.errors import CorruptManifestError, TieredStoreError
from tieredstore.findings import FindingKind
from tieredstore.formats.consumequeue import decode_units
from tieredstore.hot.commitlog import gather
from verifier.fleet.fingerprint import BlockHasher, QueuePrint
from verifier.outcome import Anomaly, QueueReport
from verifier.readers import loss_detail
from verifier.scope import Span
from verifier.segmentcheck import FactKind, ManifestClaims, SegmentGeometry, check_segment
from verifier.vocabulary import LagAllowance

__all__ = ["QueueCheck", "QueueWork", "check_queue"]

_FACT_CLASS = {
    FactKind.CQ_OFFSETS: FindingKind.RECORD_MISMATCH,
    FactKind.RECORD_FIELDS: FindingKind.RECORD_MISMATCH,
    FactKind.MANIFEST_FIELDS: FindingKind.MANIFEST_MISMATCH,
}


@dataclass(frozen=True)
class QueueWork:
    """What a task needs for one queue: its listed objects (key → size), the hot facts
    (None: the fingerprint has no such queue, or there is no fingerprint), the accepted
    loss records and spans, and the lag rule's parameters."""

    cluster: str
    broker: str
    topic: str
    queue_id: int
    objects: Mapping[str, int]
    manifests: Sequence[str]
    hot: QueuePrint | None
    losses: Sequence[LossRecord] = ()
    spans: Sequence[Span] = ()
    allowance: LagAllowance | None = None
    reference_ms: int = 0


@dataclass(frozen=True)
class QueueCheck:
    """The queue's report row and anomalies; ``where`` is the task that ran it."""

    broker: tuple[str, str]
    queue: QueueReport
    anomalies: tuple[Anomaly, ...]
    where: str = ""
    blocks_compared: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class _Run:
    def __init__(self, fs: AbstractFileSystem, root: str, work: QueueWork) -> None:
        self.fs, self.root, self.w = fs, root, work
        self.found: list[Anomaly] = []
        self.units = 0
        self.bytes = 0
        self.blocks = 0
        self.cold_messages = 0
        self.cold_bytes = 0
        hot = work.hot
        self.targets = list(hot.blocks) if hot is not None else []
        self.ends = [b.end for b in self.targets]
        self.hashers: dict[int, tuple[BlockHasher, int, str]] = {}

    def anomaly(
        self, kind: FindingKind, start: int | None, end: int | None, key: str | None, detail: str
    ) -> None:
        count = None if start is None or end is None else end - start
        w = self.w
        self.found.append(Anomaly(w.topic, w.queue_id, start, kind, end, count, key, detail))

    def path(self, key: str) -> str:
        return f"{self.root}/{key}" if self.root else key

    def manifests(self) -> list[Manifest]:
        out: list[Manifest] = []
        for key in self.w.manifests:
            try:
                stored = read_stored(self.fs.cat_file(self.path(key)), key)
            except FileNotFoundError:
                continue  # removed since the listing (retention): not part of history
            except CorruptManifestError as exc:
                self.anomaly(FindingKind.CORRUPT_MANIFEST, None, None, key, exc.message)
                continue
            if isinstance(stored, Manifest):
                out.append(stored)
        return sorted(out, key=lambda m: (m.start_offset, m.end_offset))

    def covered(self, start: int, end: int) -> bool:
        return any(s.start <= start and s.end >= end for s in self.w.spans)

    def layout(self, segments: list[Manifest]) -> None:
        reach: int | None = None
        for m in segments:
            if (
                reach is not None
                and m.start_offset > reach
                and not self.covered(reach, m.start_offset)
            ):
                self.anomaly(
                    FindingKind.GAP,
                    reach,
                    m.start_offset,
                    None,
                    f"queue offsets [{reach}, {m.start_offset}) are in no committed segment "
                    f"(the next segment is {m.key})",
                )
            if reach is not None and m.start_offset < reach:
                self.anomaly(
                    FindingKind.OVERLAP,
                    m.start_offset,
                    min(m.end_offset, reach),
                    m.key,
                    f"segment [{m.start_offset}, {m.end_offset}) starts below the end "
                    f"{reach} of an earlier segment",
                )
            reach = m.end_offset if reach is None else max(reach, m.end_offset)

    def read(self, m: Manifest, which: str) -> bytes | None:
        ref = m.commit_log if which == "cl" else m.consume_queue
        key = m.commit_log_key if which == "cl" else m.consume_queue_key
        listed = self.w.objects.get(key)
        if listed is None:
            self.anomaly(
                FindingKind.MISSING_OBJECT,
                m.start_offset,
                m.end_offset,
                key,
                f"the manifest {m.key} names an object that is not in the store",
            )
            return None
        if listed != ref.size:
            self.anomaly(
                FindingKind.SIZE_MISMATCH,
                m.start_offset,
                m.end_offset,
                key,
                f"object is {listed} bytes, the manifest says {ref.size}",
            )
            return None
        try:
            data: bytes = self.fs.cat_file(self.path(key))
        except FileNotFoundError:
            self.anomaly(
                FindingKind.MISSING_OBJECT,
                m.start_offset,
                m.end_offset,
                key,
                "object vanished after the listing",
            )
            return None
        actual = digest(data, DigestAlgorithm.for_hex(ref.digest))
        if actual != ref.digest:
            self.anomaly(
                FindingKind.DIGEST_MISMATCH,
                m.start_offset,
                m.end_offset,
                key,
                f"object digest {actual} differs from the manifest's {ref.digest}",
            )
            return None
        return data

    def segment(self, m: Manifest) -> None:
        cq = self.read(m, "cq")
        cl = self.read(m, "cl")
        if cq is None or cl is None:
            return
        try:
            units = decode_units(cq, where=m.consume_queue_key)
        except TieredStoreError as exc:
            self.anomaly(
                FindingKind.RECORD_MISMATCH,
                m.start_offset,
                m.end_offset,
                m.consume_queue_key,
                exc.message,
            )
            return
        geo = SegmentGeometry(m.start_offset, m.end_offset, m.cl_base, m.cl_end)
        claims = ManifestClaims(m.min_store_timestamp, m.max_store_timestamp, m.message_count)
        facts = check_segment(geo, units, cl=cl, claims=claims)
        self.cold_messages += m.end_offset - m.start_offset
        self.cold_bytes += len(cl)
        keys = {
            FactKind.CQ_OFFSETS: m.consume_queue_key,
            FactKind.RECORD_FIELDS: m.commit_log_key,
            FactKind.MANIFEST_FIELDS: m.key,
        }
        for f in facts.facts:
            self.anomaly(
                _FACT_CLASS.get(f.kind, FindingKind.RECORD_MISMATCH),
                f.range.start,
                f.range.end,
                keys.get(f.kind),
                f.detail,
            )
        if not facts.facts:
            self.feed(m, units, cl)

    def feed(self, m: Manifest, units: Any, cl: bytes) -> None:
        """Hash the segment's records into every fingerprint block they fall in."""
        first = bisect.bisect_right(self.ends, m.start_offset)  # blocks end in order
        for b in self.targets[first:]:
            if b.start >= m.end_offset:
                break
            lo, hi = max(b.start, m.start_offset), min(b.end, m.end_offset)
            part = units[lo - m.start_offset : hi - m.start_offset]
            offs = part["commitlog_offset"].astype(np.int64) - m.cl_base
            sizes = part["size"].astype(np.int64)
            hasher, fed, key = self.hashers.get(b.start, (BlockHasher(), 0, m.commit_log_key))
            hasher.update(part, gather(cl, offs, sizes))
            self.hashers[b.start] = (hasher, fed + hi - lo, key)
            self.bytes += int(sizes.sum())
            self.units += hi - lo

    def compare_blocks(self) -> None:
        w = self.w
        for b in self.targets:
            entry = self.hashers.get(b.start)
            if entry is None or entry[1] != b.end - b.start:
                continue  # not all of it in cold (yet): the range checks speak for it
            self.blocks += 1
            got = entry[0].hexdigest()
            if got != b.digest:
                self.anomaly(
                    FindingKind.CONTENT_MISMATCH,
                    b.start,
                    b.end,
                    entry[2],
                    f"broker {w.cluster}/{w.broker}, queue {w.topic}/{w.queue_id}, block "
                    f"[{b.start}, {b.end}): cold records hash to {got}, the hot fingerprint "
                    f"says {b.digest} (run verify --hot on the broker host for the byte)",
                )


def check_queue(fs: AbstractFileSystem, root: str, work: QueueWork) -> QueueCheck:
    """Check one queue (module doc); never raises for bad data, only for a broken
    environment (the filesystem failing)."""
    run = _Run(fs, root, work)
    segments = run.manifests()
    run.layout(segments)
    for m in segments:
        run.segment(m)
    run.compare_blocks()
    cold_min = min((m.start_offset for m in segments), default=None)
    cold_max = max((m.end_offset for m in segments), default=None)
    hot = work.hot
    cutoff = None
    lag = 0
    cold_only = 0
    if hot is not None:
        allowance = work.allowance
        cutoff = hot.lag_cutoff(allowance, work.reference_ms) if allowance else hot.hot_max
        tiered_to = cold_max if cold_max is not None else hot.hot_min
        tiered_to = next((s.end for s in work.spans if s.start <= tiered_to < s.end), tiered_to)
        lag = max(0, hot.hot_max - max(tiered_to, hot.hot_min))
        if cold_min is not None:
            cold_only = max(0, min(hot.hot_min, cold_max or 0) - cold_min)
        if cold_max is not None and cutoff > tiered_to:
            run.anomaly(
                FindingKind.HOT_NOT_COVERED,
                tiered_to,
                cutoff,
                None,
                f"{cutoff - tiered_to} hot offsets older than the lag allowance are not in "
                f"cold (hot [{hot.hot_min}, {hot.hot_max}) at the fingerprint, cold "
                f"[{cold_min}, {cold_max}))",
            )
    for x in work.losses:
        if cold_min is None or x.end_offset > cold_min:
            run.anomaly(
                FindingKind.LOST_BEFORE_TIERING, x.start_offset, x.end_offset, x.key, loss_detail(x)
            )
    queue = QueueReport(
        topic=work.topic,
        queue_id=work.queue_id,
        hot_present=hot is not None,
        hot_min=hot.hot_min if hot else None,
        hot_max=hot.hot_max if hot else None,
        cold_min=cold_min,
        cold_max=cold_max,
        segments=len(segments),
        cold_messages=run.cold_messages,
        cold_bytes=run.cold_bytes,
        lag_messages=lag,
        lag_seconds=None,
        units_compared=run.units,
        bytes_compared=run.bytes,
        cold_only=cold_only,
        pending_objects=0,
        lag_cutoff=cutoff,
    )
    return QueueCheck((work.cluster, work.broker), queue, tuple(run.found), "", run.blocks)
