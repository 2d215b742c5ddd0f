"""One queue of one broker checked against that broker's hot fingerprint: pure, no Spark.

The fleet job (:mod:`tieredstore.verifier.fleet.job`) runs :func:`check_queue` in a Spark task per
queue. It reads the queue's manifests and objects through a sync fsspec filesystem and
decides what the single-broker job decides for a queue, with the hot side given as
facts (:class:`~tieredstore.cold.fingerprint.QueuePrint`: hot min/max, block digests and store
times) instead of hot files.

A queue's **links** are its segments (its manifests, read here) and its batch slices
(read from the batch heads by the broker's scan: :attr:`QueueWork.slices`). The one
reading rule (:func:`tieredstore.cold.history.choose`) decides which links **cover**
their offsets: every segment, and each slice over offsets no segment or earlier slice
holds. Coverage (``gap``, ``overlap``, the cold range and counts, the block hashes) is
over the covering links; every link, covering or not, is read (a slice: range reads of
its batch) and checked:

* ``corrupt_manifest``, ``gap``, ``overlap`` (unless an accepted loss span covers the
  hole; decided by :func:`tieredstore.verifier.decision.decide`, as the single-broker job does),
  ``missing_object``, ``size_mismatch`` and ``digest_mismatch`` (decided by
  :func:`tieredstore.verifier.decision.object_findings` from what was read), ``record_mismatch``
  and ``manifest_mismatch`` from cold alone
  (:func:`~tieredstore.verifier.segmentcheck.check_segment`)
  on a link read whole (:func:`tieredstore.verifier.decision.judged`, the single-broker job's rule);
* ``content_mismatch`` per **leaf**: each fingerprint leaf (format 3: 64 offsets by
  default, whatever the block and segment boundaries; format 2: a block) that cold
  covers whole is hashed from cold records
  (:class:`~tieredstore.cold.fingerprint.BlockHasher`) and compared; the anomaly names the
  leaf (``verify --hot`` on the broker host names the byte). Only the offsets of leaves
  compared count as compared (``units_compared``, ``bytes_compared``): a leaf across a
  retention cut or past cold's max is not. A slice that does not cover is hashed on its
  own, for the leaves it holds whole, and
  is a ``content_mismatch`` as well when its digests differ from the covering link's
  over exactly its offsets (two copies that disagree);
* ``hot_not_covered`` for the tail: ``[cold_max, lag_cutoff)``, the cutoff from the
  fingerprint's store times and its ``taken_ms`` as the reference time;
* ``lost_before_tiering`` for loss records in scope.

The required range (``missing_head``, ``unproven_start``, ``hot_not_covered`` of a queue
with no segment) is decided afterwards on the driver by :mod:`tieredstore.verifier.scope`, over the
:class:`~tieredstore.verifier.outcome.QueueReport` this returns. ``cold_ahead_of_hot`` is not
decided: cold may hold offsets written after the fingerprint was taken.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fsspec.spec import AbstractFileSystem

from tieredstore.cold.fingerprint import Leaf, QueuePrint
from tieredstore.cold.history import (
    Committed,
    EntryKind,
    QueueHistory,
    Span,
    Withdrawal,
    choose,
)
from tieredstore.cold.loss import LossRecord
from tieredstore.cold.manifest import Manifest, read_stored
from tieredstore.errors import CorruptManifestError, TieredStoreError
from tieredstore.findings import FindingKind
from tieredstore.formats.consumequeue import decode_units
from tieredstore.hot.commitlog import gather
from tieredstore.verifier.decision import (
    Link,
    ObjectRead,
    QueueLinks,
    content_judged,
    decide,
    judged,
    object_findings,
    reads_whole,
    span_read,
)
from tieredstore.verifier.outcome import Anomaly, QueueReport
from tieredstore.verifier.readers import loss_detail
from tieredstore.verifier.scope import Span as LossSpan
from tieredstore.verifier.segmentcheck import (
    FactKind,
    ManifestClaims,
    SegmentGeometry,
    check_segment,
)
from tieredstore.verifier.vocabulary import LagAllowance, LagUnit

__all__ = ["QueueCheck", "QueueWork", "check_queue"]


def _name(link: Committed) -> str:
    """A link's history key: a segment's manifest key, a slice's ``<batch>#<queue>``."""
    return link.history_key


_FACT_CLASS = {
    FactKind.CQ_OFFSETS: FindingKind.RECORD_MISMATCH,
    FactKind.RECORD_FIELDS: FindingKind.RECORD_MISMATCH,
    FactKind.MANIFEST_FIELDS: FindingKind.MANIFEST_MISMATCH,
}


@dataclass(frozen=True)
class QueueWork:
    """What a task needs for one queue: its listed objects (key → size; its slices'
    batch objects among them), its manifests, its batch slices, the hot facts (None: the
    fingerprint has no such queue, or there is no fingerprint), the accepted loss records
    and spans, and the lag rule's parameters."""

    cluster: str
    broker: str
    topic: str
    queue_id: int
    objects: Mapping[str, int]
    manifests: Sequence[str]
    hot: QueuePrint | None
    losses: Sequence[LossRecord] = ()
    spans: Sequence[LossSpan] = ()
    allowance: LagAllowance | None = None
    reference_ms: int = 0
    slices: Sequence[Committed | Withdrawal] = ()


class _Fed:
    """One leaf's hasher as the links feed it: offsets and record bytes fed so far, and
    the object the first run came from (named in a mismatch)."""

    def __init__(self, leaf: Leaf, key: str) -> None:
        self.hasher = leaf.hasher()
        self.units = 0
        self.bytes = 0
        self.key = key


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
        self.targets = hot.leaves() if hot is not None else []
        self.ends = [b.end for b in self.targets]
        self.hashers: dict[int, _Fed] = {}

    def anomaly(
        self, kind: FindingKind, start: int | None, end: int | None, key: str | None, detail: str
    ) -> None:
        count = None if start is None or end is None else end - start
        w = self.w
        self.found.append(Anomaly(w.topic, w.queue_id, start, kind, end, count, key, detail))

    def path(self, key: str) -> str:
        return f"{self.root}/{key}" if self.root else key

    def manifests(self) -> list[Committed]:
        out: list[Committed] = []
        for key in self.w.manifests:
            try:
                stored = read_stored(self.fs.cat_file(self.path(key)), key)
            except FileNotFoundError:
                continue  # removed since the listing (retention): not part of history
            except CorruptManifestError as exc:
                self.anomaly(FindingKind.CORRUPT_MANIFEST, None, None, key, exc.message)
                continue
            if isinstance(stored, Manifest):
                out.append(Committed.of_manifest(stored))
        return sorted(out, key=lambda m: (m.start_offset, m.end_offset))

    def layout(self, links: list[Committed]) -> None:
        """``gap`` and ``overlap``: the shared decision (:mod:`tieredstore.verifier.decision`)."""
        w = self.w
        queue = QueueLinks(
            w.topic,
            w.queue_id,
            [Link(m.start_offset, m.end_offset, _name(m)) for m in links],
            [(s.start, s.end) for s in w.spans],
        )
        for f in decide(queue):
            self.anomaly(f.kind, f.start, f.end, f.object_key, f.detail)

    def read(self, m: Committed, which: str) -> tuple[ObjectRead, bytes | None]:
        """Gather the facts of one object of ``m`` (listed size, bytes read, digest);
        the decision (:func:`tieredstore.verifier.decision.object_findings`) judges them."""
        ref: Span = m.commit_log if which == "cl" else m.consume_queue
        says = "its manifest" if m.kind is EntryKind.SEGMENT else "its batch index"
        listed = self.w.objects.get(ref.key)
        stored = ref.object_size if ref.framed is None else ref.framed.stored_size
        fact = ObjectRead(ref.key, listed, stored, ref.size, says=says)
        if listed is None or listed != stored:
            return fact, None
        framed = ref.framed is not None
        path = self.path(ref.key)
        try:
            whole = reads_whole(ref.at, ref.size, stored, framed=framed)
            data: bytes = (
                self.fs.cat_file(path)
                if whole
                else self.fs.cat_file(path, start=ref.at, end=ref.end)
            )
        except FileNotFoundError:
            data = b""
        batch = m.kind is EntryKind.SLICE
        # a batch's stored digest is checked by decoding it (decoded_batch), a segment's here
        stored_digest = None if ref.framed is None or batch else ref.framed.stored_digest
        return span_read(
            fact, data, expected=ref.digest, framed=framed, stored_digest=stored_digest,
            at=ref.at, batch=batch,
        )  # fmt: skip

    def segment(self, m: Committed, covers: bool = True) -> None:
        (cq_read, cq), (cl_read, cl) = self.read(m, "cq"), self.read(m, "cl")
        reads = (cq_read, cl_read)
        for o in object_findings(_name(m), m.start_offset, m.end_offset, reads):
            self.anomaly(o.kind, o.start, o.end, o.object_key, o.detail)
        if not judged(reads) or cq is None or cl is None:
            return  # the one rule: records are judged only on a link read whole
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
        if covers:
            self.cold_messages += m.end_offset - m.start_offset
            self.cold_bytes += len(cl)
        keys = {
            FactKind.CQ_OFFSETS: m.consume_queue_key,
            FactKind.RECORD_FIELDS: m.commit_log_key,
            FactKind.MANIFEST_FIELDS: _name(m),
        }
        for f in facts.facts:
            self.anomaly(
                _FACT_CLASS.get(f.kind, FindingKind.RECORD_MISMATCH),
                f.range.start,
                f.range.end,
                keys.get(f.kind),
                f.detail,
            )
        if not content_judged(not any(f.kind is FactKind.CQ_OFFSETS for f in facts.facts)):
            return  # units that do not tile the commit log: no records to hash
        if covers:
            self.feed(m, units, cl, self.hashers)
            return
        own: dict[int, _Fed] = {}
        self.feed(m, units, cl, own)
        self.compare_blocks(own, count=False)

    def feed(
        self,
        m: Committed,
        units: Any,
        cl: bytes,
        hashers: dict[int, _Fed],
    ) -> None:
        """Hash the link's records into every fingerprint leaf they fall in."""
        first = bisect.bisect_right(self.ends, m.start_offset)  # blocks end in order
        for b in self.targets[first:]:
            if b.start >= m.end_offset:
                break
            lo, hi = max(b.start, m.start_offset), min(b.end, m.end_offset)
            part = units[lo - m.start_offset : hi - m.start_offset]
            offs = part["commitlog_offset"].astype(np.int64) - m.cl_base
            sizes = part["size"].astype(np.int64)
            fed = hashers.setdefault(b.start, _Fed(b, m.commit_log_key))
            fed.hasher.update(part, gather(cl, offs, sizes))
            fed.units += hi - lo
            fed.bytes += int(sizes.sum())

    def copies(self, chosen: Sequence[Committed], others: Sequence[Committed]) -> None:
        """A slice that does not cover against the covering link over exactly its offsets:
        digests (by the same algorithm) that differ are two copies that disagree."""
        by_range = {(c.start_offset, c.end_offset): c for c in chosen}
        for s in others:
            c = by_range.get((s.start_offset, s.end_offset))
            if s.kind is not EntryKind.SLICE or c is None:
                continue
            mine = (s.commit_log.digest, s.consume_queue.digest)
            theirs = (c.commit_log.digest, c.consume_queue.digest)
            if len(mine[0]) == len(theirs[0]) and mine != theirs:
                self.anomaly(
                    FindingKind.CONTENT_MISMATCH,
                    s.start_offset,
                    s.end_offset,
                    s.commit_log_key,
                    f"{_name(s)} holds [{s.start_offset}, {s.end_offset}) with digests "
                    f"{mine[0]} / {mine[1]}, but {_name(c)}, read for those offsets, has "
                    f"{theirs[0]} / {theirs[1]}: two copies of the same records disagree",
                )

    def check_links(self, history: QueueHistory) -> list[Committed]:
        """Check every link of the queue; return the covering ones (:func:`_covering`)."""
        links, others = _covering(history)
        self.layout(links)
        for m in links:
            self.segment(m)
        for m in others:
            self.segment(m, covers=False)
        self.copies(history.links, others)
        self.compare_blocks()
        return links

    def compare_blocks(self, hashers: dict[int, _Fed] | None = None, *, count: bool = True) -> None:
        """Compare each leaf fed whole with the fingerprint's; ``count``: what was
        compared counts (the covering links', not a stray slice's)."""
        w = self.w
        hashers = self.hashers if hashers is None else hashers
        for b in self.targets:
            fed = hashers.get(b.start)
            if fed is None or fed.units != b.end - b.start:
                continue  # not all of it in cold (yet): the range checks speak for it
            if count:
                self.blocks += 1
                self.units += fed.units
                self.bytes += fed.bytes
            got = fed.hasher.hexdigest()
            if got != b.digest:
                self.anomaly(
                    FindingKind.CONTENT_MISMATCH,
                    b.start,
                    b.end,
                    fed.key,
                    f"broker {w.cluster}/{w.broker}, queue {w.topic}/{w.queue_id}, block "
                    f"leaf [{b.start}, {b.end}): cold records hash to {got}, the hot "
                    f"fingerprint says {b.digest} (run verify --hot on the broker host for "
                    "the byte)",
                )


def _covering(history: QueueHistory) -> tuple[list[Committed], list[Committed]]:
    """The links that cover, in offset order, and the slices the rule skips. Every
    segment covers (one over another's offsets is an ``overlap``), and each slice the
    rule chooses; the slices it does not choose are verified, never counted."""
    strays = [x for x in history.overlaps if x.kind is EntryKind.SEGMENT]
    links = sorted([*history.links, *strays], key=lambda m: (m.start_offset, m.end_offset))
    return links, [x for x in history.overlaps if x.kind is EntryKind.SLICE]


def _lag_cutoff(hot: QueuePrint, allowance: LagAllowance, reference_ms: int) -> int:
    """The first offset of ``hot`` allowed to be untiered (the verifier's lag rule, at
    block granularity for an allowance in seconds: a block holding any record younger
    than ``reference_ms - allowance`` may be untiered whole)."""
    if allowance.unit is LagUnit.MESSAGES:
        return max(hot.hot_min, hot.hot_max - int(allowance.value))
    oldest_allowed = reference_ms - int(allowance.value * 1000)
    young = (b.start for b in hot.blocks if b.last_store_ms >= oldest_allowed)
    return next(young, hot.hot_max)


def check_queue(fs: AbstractFileSystem, root: str, work: QueueWork) -> QueueCheck:
    """Check one queue (module doc); never raises for bad data, only for a broken
    environment (the filesystem failing)."""
    run = _Run(fs, root, work)
    links = run.check_links(choose(run.manifests(), list(work.slices)))
    cold_min = min((m.start_offset for m in links), default=None)
    cold_max = max((m.end_offset for m in links), default=None)
    hot = work.hot
    cutoff = None
    lag = 0
    cold_only = 0
    if hot is not None:
        allowance = work.allowance
        cutoff = _lag_cutoff(hot, allowance, work.reference_ms) if allowance else hot.hot_max
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
        segments=len(links),
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
