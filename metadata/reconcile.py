"""Reconciling the catalogue with the bucket: the manifests are the truth.

On start (and by ``rebuild-metadata``) the catalogue is compared with one listing of the
broker's cold prefix:

* **Adopted**: for each queue, manifests at and after ``cold_commit`` that continue it
  exactly (``start == cold_commit``, ``cl_base == cold_cl_end``) and whose objects are
  present with the recorded sizes are committed to the catalogue, in order — the crash
  between manifest write and catalogue commit, healed. A queue the catalogue does not know
  is created from its init record (``_queues/<topic>/<id>/INIT.json``, or one entry of
  an object of many, ``_queues/_inits/<stamp>-<digest>.json``,
  :mod:`tieredstore.cold.provenance`) at ``max(init offset, the highest retention record's
  first offset)`` — so a missing head shows as a gap — or, in a store an older sidecar
  wrote, from its first manifest or loss record (init offset = its start).
* **Accepted losses** (``LOSS/<name>.json``, :mod:`tieredstore.cold.loss`) are adopted in the
  same order: a loss record that starts at ``cold_commit`` of an ACTIVE or PAUSED queue
  moves the queue past it (:meth:`~tieredstore.metadata.queue_table.QueueTable.accept_loss`) — how a
  rebuilt catalogue keeps a loss ``resume`` accepted, and how a ``resume`` interrupted
  between writing the record and updating the catalogue is finished.
* **Reported, never dropped**: catalogue segments whose manifest or objects are missing or
  of the wrong size; manifests that do not parse; manifests that overlap the catalogue's
  committed range without being one of its segments, or leave a gap after it; manifests
  not adopted because of an earlier problem in the same queue or the queue's state; loss
  records that do not parse (their loss is then not acknowledged).

* **Stale catalogue, healed** (content, not only start offsets): the manifests the
  catalogue holds first and last in each queue are read and compared with the
  catalogue's rows; if either differs, every row is, oldest first, and at the first row
  whose key holds another *valid* manifest (another writer re-tiered those offsets,
  e.g. after a ``repair`` run from another state directory) the catalogue is truncated
  and the cold store's own history adopted from there (``catalogue_drift``). A key that
  holds nothing or something unreadable is reported, never truncated (the catalogue
  then still protects what its rows name).
* **Fence markers** (:class:`~tieredstore.cold.manifest.FenceMarker`, GC's) are no segment:
  skipped, never adopted, never reported.
* **Batch slices** (``_batches/``, :mod:`tieredstore.cold.batch`): every batch head is
  read, and its slices take their place in each queue's history after the manifests and
  loss records at the same start, by batch sequence (the reading rule,
  :func:`~tieredstore.cold.history.choose`). A slice that continues its queue is adopted
  (:meth:`~tieredstore.metadata.slice_table.SliceTable.commit_batch`): the crash between a batch's
  create and its catalogue commit, healed, and a rebuilt catalogue's slice rows. A slice
  inside the committed range (compacted, a duplicate of a lower sequence) is neither
  adopted nor reported; a batch head that does not parse is reported once, naming the
  batch (``corrupt_manifest``), and adopts nothing. A manifest inside the committed range
  whose offsets the catalogue holds as slices that tile it is compaction's segment whose
  swap a crash interrupted: it is swapped in
  (:meth:`~tieredstore.metadata.slice_table.SliceTable.compact`).
  Catalogue slices whose batch object is missing or of another size are reported.
  Batch fences are no batch: skipped.

Sizes come from the listing; digests are not read here (that is the verifier's job, and
reading every object on each start would cost the whole cold store). DELETING segments are
skipped: their objects disappear by design.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from tieredstore.clock import Clock
from tieredstore.cold.batch import BatchFence, BatchHead
from tieredstore.cold.history import Committed, Withdrawal, batch_links, choose, read_batch
from tieredstore.cold.layout import (
    LossKey,
    ObjectKey,
    SegmentKind,
    Unrecognised,
    batch_prefix,
    broker_prefix,
    classify_listed,
    parse_batch_key,
)
from tieredstore.cold.loss import LossRecord, read_loss_record
from tieredstore.cold.manifest import FenceMarker, Manifest, read_stored
from tieredstore.cold.provenance import (
    QueueInit,
    QueueProvenance,
    StopMark,
    earliest_inits,
    is_queue_record_key,
    read_queue_records,
)
from tieredstore.errors import (
    CatalogueError,
    CorruptBatchError,
    CorruptLossRecordError,
    CorruptManifestError,
    CorruptProvenanceError,
    InvalidNameError,
    ObjectNotFoundError,
    UnsupportedFormatError,
)
from tieredstore.findings import Finding, FindingKind
from tieredstore.metadata.catalogue import DB_NAME, Catalogue
from tieredstore.metadata.rows import QueueRow, QueueState, SegmentRow, SegmentStatus

if TYPE_CHECKING:
    from tieredstore.backends.base import Backend, ObjectInfo

__all__ = ["ReconcileReport", "rebuild", "reconcile"]

log = logging.getLogger(__name__)

#: Batch heads read at once.
_READ_CONCURRENCY: Final = 32


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    """What reconciliation did and found. ``clean`` when nothing needs the operator."""

    adopted: tuple[SegmentRow, ...] = ()
    created: tuple[QueueRow, ...] = ()
    findings: tuple[Finding, ...] = ()
    #: Keys under the broker prefix that are neither ours nor segment objects.
    unrecognised: tuple[str, ...] = ()
    #: Loss records adopted into the catalogue (rebuild, or an interrupted resume).
    accepted: tuple[LossRecord, ...] = ()
    #: Batch slices adopted into the catalogue (rebuild, or a crash before the commit).
    adopted_slices: tuple[Committed, ...] = ()

    @property
    def clean(self) -> bool:
        return not self.findings

    def __str__(self) -> str:
        sliced = f" and {len(self.adopted_slices)} slices" if self.adopted_slices else ""
        text = (
            f"adopted {len(self.adopted)} segments{sliced}, created {len(self.created)} "
            f"queues, {len(self.findings)} issues"
        )
        return text + (f" (first: {self.findings[0]})" if self.findings else "")


@dataclass
class _ReportDraft:
    """What reconciliation has done and found so far; becomes the :class:`ReconcileReport`."""

    adopted: list[SegmentRow] = field(default_factory=list)
    created: list[QueueRow] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    accepted: list[LossRecord] = field(default_factory=list)
    adopted_slices: list[Committed] = field(default_factory=list)

    def issue(self, kind: FindingKind, key: str, detail: str) -> None:
        self.findings.append(Finding(kind, key, detail))


async def reconcile(catalogue: Catalogue, backend: Backend) -> ReconcileReport:
    """Reconcile ``catalogue`` with the manifests in ``backend`` (see the module doc).

    Backend errors propagate (retryable ones may be retried by the caller: adoption is
    idempotent). The catalogue must be open for writing.
    """
    if catalogue.read_only:
        raise CatalogueError("reconcile needs a writable catalogue", where=str(catalogue.path))
    prefix = broker_prefix(catalogue.cluster, catalogue.broker) + "/"
    listing = {info.key: info for info in await backend.list(prefix)}
    entries, unrecognised = _index(listing.values(), prefix)
    found = _ReportDraft()
    batches = batch_prefix(catalogue.cluster, catalogue.broker) + "/"
    _merge(entries, await _batch_links(backend, listing, batches, found))
    queues = await asyncio.to_thread(catalogue.queues.all)
    for row in queues:
        segments = await asyncio.to_thread(catalogue.segments.of, row.topic, row.queue_id)
        _check_rows(segments, listing, found)
        _check_slice_rows(
            await asyncio.to_thread(catalogue.slices.of, row.topic, row.queue_id), listing, found
        )
    queues = [await _heal_stale(catalogue, backend, q, found) for q in queues]
    known = {(q.topic, q.queue_id): q for q in queues}
    await _rows_from_records(catalogue, backend, listing, prefix, known, entries, found)
    for (topic, queue_id), keys in sorted(entries.items()):
        await _adopt_queue(
            catalogue, backend, listing, known.get((topic, queue_id)), topic, queue_id, keys, found
        )
    return ReconcileReport(
        tuple(found.adopted),
        tuple(found.created),
        tuple(found.findings),
        tuple(unrecognised),
        tuple(found.accepted),
        tuple(found.adopted_slices),
    )


#: One queue's committed history as listed: manifests, loss records, batch slices.
_Entry = ObjectKey | LossKey | Committed


def _start(entry: _Entry) -> int:
    return entry.base_offset if isinstance(entry, ObjectKey) else entry.start_offset


def _order(entry: _Entry) -> tuple[int, int, int]:
    """History order: by start; at one start a loss, then a manifest (segments win),
    then slices by batch sequence (the lowest is the truth)."""
    if isinstance(entry, LossKey):
        return (entry.start_offset, 0, 0)
    if isinstance(entry, ObjectKey):
        return (entry.base_offset, 1, 0)
    return (entry.start_offset, 2, entry.sequence)


def _ident(entry: _Entry | SegmentRow | LossRecord) -> tuple[str, int]:
    """What names an entry among the catalogue's rows: its kind (a slice: its batch key)
    and its start."""
    if isinstance(entry, ObjectKey):
        return ("manifest", entry.base_offset)
    if isinstance(entry, SegmentRow):
        return ("manifest", entry.start_offset)
    if isinstance(entry, LossKey | LossRecord):
        return ("loss", entry.start_offset)
    return (entry.key, entry.start_offset)


def _merge(
    entries: dict[tuple[str, int], list[_Entry]], slices: dict[tuple[str, int], list[Committed]]
) -> None:
    """Put each queue's batch slices into its history (``entries``), in history order."""
    for q, links in slices.items():
        entries.setdefault(q, []).extend(links)
    for keys in entries.values():
        keys.sort(key=_order)


async def _batch_links(
    backend: Backend, listing: dict[str, ObjectInfo], batches: str, found: _ReportDraft
) -> dict[tuple[str, int], list[Committed]]:
    """Every slice of every listed batch object that :func:`choose` reads, by queue (a
    slice over offsets a lower sequence holds is a duplicate: dropped); a batch head that
    does not parse is reported (once, naming the batch) and yields none."""
    sem = asyncio.Semaphore(_READ_CONCURRENCY)

    async def head(key: str, size: int) -> BatchHead | BatchFence | CorruptBatchError | None:
        async with sem:
            try:
                return await read_batch(backend, key, size)
            except (CorruptBatchError, UnsupportedFormatError) as exc:
                return CorruptBatchError(exc.message, where=key)

    keys = sorted(k for k in listing if parse_batch_key(k, batches) is not None)
    out: dict[tuple[str, int], list[Committed | Withdrawal]] = defaultdict(list)
    for key, found_head in zip(
        keys, await asyncio.gather(*(head(k, listing[k].size) for k in keys)), strict=True
    ):
        if isinstance(found_head, CorruptBatchError):
            found.issue(FindingKind.CORRUPT_MANIFEST, key, f"batch head: {found_head.message}")
            continue
        for link in batch_links(found_head):  # a fence's: its withdrawals
            out[(link.topic, link.queue_id)].append(link)
    # among slices, the reading rule: a later sequence over chosen offsets is a duplicate
    return {q: list(choose([], links).links) for q, links in out.items()}


def _index(
    listing: Iterable[ObjectInfo], prefix: str
) -> tuple[dict[tuple[str, int], list[_Entry]], list[str]]:
    """Group manifest and loss-record keys by queue (sorted by start offset, a loss
    before a manifest at the same start); collect keys that are not ours."""
    entries: dict[tuple[str, int], list[_Entry]] = defaultdict(list)
    unrecognised: list[str] = []
    for info in listing:
        key = classify_listed(info.key, prefix)
        if isinstance(key, Unrecognised):
            unrecognised.append(key.key)
        elif isinstance(key, LossKey):
            entries[(key.queue.topic, key.queue.queue_id)].append(key)
        elif isinstance(key, ObjectKey) and key.kind is SegmentKind.MANIFEST:
            entries[(key.topic, key.queue_id)].append(key)
    for keys in entries.values():
        keys.sort(key=_order)
    return dict(entries), unrecognised


def _check_rows(
    segments: Sequence[SegmentRow], listing: dict[str, ObjectInfo], found: _ReportDraft
) -> None:
    """Report catalogue segments whose objects are absent or of the wrong size."""
    for seg in segments:
        if seg.status is SegmentStatus.DELETING:
            continue
        m = seg.manifest
        expected = (
            ("manifest", m.key, len(m.to_json())),
            ("commit-log object", m.commit_log_key, m.commit_log.stored_size),
            ("consume-queue object", m.consume_queue_key, m.consume_queue.size),
        )
        for what, key, size in expected:
            info = listing.get(key)
            if info is None:
                found.issue(
                    FindingKind.MISSING_OBJECT, key, f"{what} of catalogue segment {seg} is missing"
                )
            elif info.size != size:
                found.issue(
                    FindingKind.SIZE_MISMATCH,
                    key,
                    f"{what} of catalogue segment {seg} is {info.size} bytes, expected {size}",
                )


def _check_slice_rows(
    slices: Sequence[Committed], listing: dict[str, ObjectInfo], found: _ReportDraft
) -> None:
    """Report catalogue slices whose batch object is absent or of the wrong size."""
    for link in slices:
        info = listing.get(link.key)
        size = link.commit_log.stored_size
        if info is None:
            found.issue(
                FindingKind.MISSING_OBJECT,
                link.key,
                f"batch object of catalogue {link.describe()} is missing",
            )
        elif info.size != size:
            found.issue(
                FindingKind.SIZE_MISMATCH,
                link.key,
                f"batch object of catalogue {link.describe()} is {info.size} bytes, "
                f"expected {size}",
            )


async def _heal_stale(
    catalogue: Catalogue, backend: Backend, row: QueueRow, found: _ReportDraft
) -> QueueRow:
    """Truncate a catalogue whose segments another writer's manifests replaced in cold
    (see the module docstring); return the queue's row."""
    segments = [
        s
        for s in await asyncio.to_thread(catalogue.segments.of, row.topic, row.queue_id)
        if s.status is SegmentStatus.COMMITTED
    ]
    if not segments:
        return row
    ends = {segments[0].start_offset: segments[0], segments[-1].start_offset: segments[-1]}
    stored = [await _stored(backend, s.manifest.key) for s in ends.values()]
    if all(not isinstance(x, Manifest) or x == s.manifest
           for x, s in zip(stored, ends.values(), strict=True)):  # fmt: skip
        return row
    for seg in segments:
        theirs = await _stored(backend, seg.manifest.key)
        if isinstance(theirs, Manifest) and theirs != seg.manifest:
            found.issue(
                FindingKind.CATALOGUE_DRIFT,
                seg.manifest.key,
                f"cold holds another writer's segment [{theirs.start_offset}, "
                f"{theirs.end_offset}) (epoch {theirs.lease_epoch}, {theirs.writer_id}) where "
                f"the catalogue had {seg}: the catalogue of {row} is truncated to offset "
                f"{seg.start_offset} and follows the cold store from there",
            )
            try:
                await asyncio.to_thread(
                    catalogue.segments.truncate, row.topic, row.queue_id, seg.start_offset
                )
            except CatalogueError as exc:  # batch slices after it: compaction first
                found.issue(FindingKind.NOT_ADOPTED, seg.manifest.key, exc.message)
                return row
            return await asyncio.to_thread(catalogue.queues.get, row.topic, row.queue_id) or row
    return row


async def _stored(backend: Backend, key: str) -> Manifest | FenceMarker | None:
    """What the manifest key holds; None when absent or unreadable (reported elsewhere)."""
    try:
        return read_stored(await backend.read(key), key)
    except (ObjectNotFoundError, CorruptManifestError):
        return None


async def _adopt_queue(
    catalogue: Catalogue,
    backend: Backend,
    listing: dict[str, ObjectInfo],
    row: QueueRow | None,
    topic: str,
    queue_id: int,
    keys: Sequence[_Entry],
    found: _ReportDraft,
) -> None:
    """Adopt one queue's manifests, loss records and batch slices that continue the
    catalogue, in history order."""
    known: set[tuple[str, int]] = set()  # what the catalogue holds, as _ident names it
    sliced: set[int] = set()  # starts of the catalogue's slices
    if row is not None:
        segments = await asyncio.to_thread(catalogue.segments.of, topic, queue_id)
        losses = await asyncio.to_thread(catalogue.queues.losses, topic, queue_id)
        slices = await asyncio.to_thread(catalogue.slices.of, topic, queue_id)
        known = {_ident(s) for s in segments} | {_ident(x) for x in losses}
        known |= {_ident(c) for c in slices}
        sliced = {x.start_offset for x in slices}
    blocked = ""
    for key in keys:
        start = _start(key)
        if row is not None and _ident(key) in known:
            continue  # the catalogue's own segment, loss or slice; checked by _check_rows
        if row is not None and start < row.cold_commit:
            if isinstance(key, Committed):
                continue  # compacted, or a duplicate of a lower sequence: garbage
            if await _inside(catalogue, backend, listing, row, key, start in sliced, found):
                continue
            where = "below cold min (already expired)" if start < row.cold_min else "inside"
            what = "manifest" if isinstance(key, ObjectKey) else "loss record"
            found.issue(
                FindingKind.OVERLAP,
                key.key,
                f"{what} at offset {start} is {where} the catalogue's committed range "
                f"[{row.cold_min}, {row.cold_commit}) of {topic}/{queue_id} but no part of it",
            )
            continue
        if blocked:
            found.issue(FindingKind.NOT_ADOPTED, key.key, f"not adopted: {blocked}")
            continue
        if isinstance(key, LossKey):
            row, ok = await _adopt_loss(catalogue, backend, listing, row, key, keys, found)
        elif isinstance(key, Committed):
            row, ok = await _adopt_slice(catalogue, row, key, found)
        else:
            row, ok = await _adopt_manifest(catalogue, backend, listing, row, key, found)
        if not ok:
            blocked = f"follows the unadoptable object at offset {start}"


async def _inside(
    catalogue: Catalogue,
    backend: Backend,
    listing: dict[str, ObjectInfo],
    row: QueueRow,
    key: ObjectKey | LossKey,
    sliced: bool,
    found: _ReportDraft,
) -> bool:
    """Whether an entry inside the committed range is no issue: GC's fence, or (where the
    catalogue holds slices at its start) compaction's segment, then swapped in."""
    if not isinstance(key, ObjectKey):
        return False
    if not sliced:
        return isinstance(await _stored(backend, key.key), FenceMarker)
    manifest = await _load(backend, listing, key, found)
    if isinstance(manifest, FenceMarker):
        return True
    if manifest is None:
        return True  # reported by _load
    try:
        segment = await asyncio.to_thread(catalogue.slices.compact, manifest)
    except CatalogueError as exc:
        found.issue(FindingKind.OVERLAP, key.key, f"not compaction's segment: {exc.message}")
        return True
    log.warning("finished an interrupted compaction of %s: %s", row, segment)
    found.adopted.append(segment)
    return True


async def _adopt_slice(
    catalogue: Catalogue, row: QueueRow | None, link: Committed, found: _ReportDraft
) -> tuple[QueueRow | None, bool]:
    """Adopt one batch slice; return the queue's row and whether it was adopted."""
    row, continues = await _continuing(catalogue, row, link, f"{link.history_key}: ", found)
    if not continues:
        return row, False
    (result,) = await asyncio.to_thread(catalogue.slices.commit_batch, [link])
    if isinstance(result, CatalogueError):
        found.issue(FindingKind.NOT_ADOPTED, link.key, f"{link.history_key}: {result.message}")
        return row, False
    adopted, row = result
    found.adopted_slices.append(adopted)
    return row, True


async def _adopt_manifest(
    catalogue: Catalogue,
    backend: Backend,
    listing: dict[str, ObjectInfo],
    row: QueueRow | None,
    key: ObjectKey,
    found: _ReportDraft,
) -> tuple[QueueRow | None, bool]:
    """Adopt one manifest; return the queue's row and whether it was adopted."""
    manifest = await _load(backend, listing, key, found)
    if isinstance(manifest, FenceMarker):
        return row, True  # no segment here: GC's fence; nothing to adopt or block on
    if manifest is None:
        return row, False
    row, continues = await _continuing(catalogue, row, manifest, "", found)
    if not continues:
        return row, False
    adopted = await asyncio.to_thread(catalogue.segments.commit, manifest)
    found.adopted.append(adopted)
    return await asyncio.to_thread(catalogue.queues.get, key.topic, key.queue_id) or row, True


async def _adopt_loss(
    catalogue: Catalogue,
    backend: Backend,
    listing: dict[str, ObjectInfo],
    row: QueueRow | None,
    key: LossKey,
    keys: Sequence[_Entry],
    found: _ReportDraft,
) -> tuple[QueueRow | None, bool]:
    """Adopt one loss record; return the queue's row and whether it was adopted."""
    try:
        size = listing[key.key].size
        record = read_loss_record(await backend.read_exact(key.key, 0, size), key.key)
    except ObjectNotFoundError:
        found.issue(FindingKind.MISSING_OBJECT, key.key, "loss record vanished while reconciling")
        return row, False
    except CorruptLossRecordError as exc:
        found.issue(FindingKind.CORRUPT_LOSS_RECORD, key.key, exc.message)
        return row, False
    if row is None:
        cl_base = await _first_cl_base(backend, listing, keys)
        row = await asyncio.to_thread(
            catalogue.queues.ensure, record.topic, record.queue_id, record.start_offset,
            cl_base=cl_base,
        )  # fmt: skip
        found.created.append(row)
    if row.state not in (QueueState.ACTIVE, QueueState.PAUSED) or (
        record.start_offset != row.cold_commit
    ):
        kind = FindingKind.GAP if row.state is QueueState.ACTIVE else FindingKind.NOT_ADOPTED
        found.issue(
            kind,
            key.key,
            f"loss [{record.start_offset}, {record.end_offset}) does not continue {row} "
            f"({row.state.value}) at offset {row.cold_commit}",
        )
        return row, False
    was = row.state
    row = await asyncio.to_thread(catalogue.queues.accept_loss, record)
    found.accepted.append(record)
    if was is QueueState.PAUSED:
        log.warning(
            "finished an interrupted resume: %s; queue %s is ACTIVE", record.describe(), row
        )
    return row, True


async def _rows_from_records(
    catalogue: Catalogue,
    backend: Backend,
    listing: dict[str, ObjectInfo],
    prefix: str,
    known: dict[tuple[str, int], QueueRow],
    entries: dict[tuple[str, int], list[_Entry]],
    found: _ReportDraft,
) -> None:
    """Create the rows of queues the catalogue lacks from their provenance records (init
    and retention: where the queue's history starts), adding them to ``known``. A record
    that does not parse is reported and creates nothing."""
    starts: dict[tuple[str, int], int] = {}
    inits: set[tuple[str, int]] = set()
    records: list[QueueProvenance] = []
    for key in listing:
        try:
            if not is_queue_record_key(key, prefix):
                continue
            records += read_queue_records(await backend.read(key), key, prefix)
        except (InvalidNameError, CorruptProvenanceError) as exc:
            found.issue(FindingKind.UNRECOGNISED, key, str(exc))
            continue
        except ObjectNotFoundError:
            continue
    for rec in _one_init_each(records):
        if isinstance(rec, StopMark):
            continue  # where tiering stopped: not where the history starts
        q = (rec.topic, rec.queue_id)
        offset = rec.init_offset if isinstance(rec, QueueInit) else rec.first_offset
        starts[q] = max(starts.get(q, 0), offset)
        inits |= {q} if isinstance(rec, QueueInit) else set()
    for q in sorted(inits - set(known)):
        cl_base = await _first_cl_base(backend, listing, entries.get(q, ()))
        row = await asyncio.to_thread(catalogue.queues.ensure, q[0], q[1], starts[q],
                                      cl_base=cl_base)  # fmt: skip
        found.created.append(row)
        known[q] = row


def _one_init_each(records: list[QueueProvenance]) -> list[QueueProvenance]:
    """``records`` with each queue's init records cut to the one in force
    (:func:`~tieredstore.cold.provenance.earliest_inits`)."""
    inits = [r for r in records if isinstance(r, QueueInit)]
    return [*earliest_inits(inits), *(r for r in records if not isinstance(r, QueueInit))]


async def _first_cl_base(
    backend: Backend, listing: dict[str, ObjectInfo], keys: Sequence[_Entry]
) -> int:
    """The cold commitlog base of the queue's first manifest or slice (0 when none
    reads): where a queue whose history begins with a loss starts its cold commitlog."""
    for key in keys:
        if isinstance(key, Committed):
            return key.cl_base
        if isinstance(key, ObjectKey):
            try:
                data = await backend.read_exact(key.key, 0, listing[key.key].size)
                stored = read_stored(data, key.key)
            except (ObjectNotFoundError, CorruptManifestError):
                return 0
            if isinstance(stored, Manifest):
                return stored.cl_base
    return 0


async def _continuing(
    catalogue: Catalogue,
    row: QueueRow | None,
    point: Manifest | Committed,
    label: str,
    found: _ReportDraft,
) -> tuple[QueueRow, bool]:
    """The queue's row (created from ``point`` when the catalogue has none) and whether
    ``point`` continues it; if not, the issue is reported (its detail after ``label``)."""
    if row is None:
        row = await asyncio.to_thread(
            catalogue.queues.ensure, point.topic, point.queue_id, point.start_offset,
            cl_base=point.cl_base,
        )  # fmt: skip
        found.created.append(row)
    problem = _continuation_problem(row, point)
    if problem:
        kind = FindingKind.NOT_ADOPTED if row.state is not QueueState.ACTIVE else FindingKind.GAP
        found.issue(kind, point.key, f"{label}{problem}")
        return row, False
    return row, True


def _continuation_problem(row: QueueRow, link: Manifest | Committed) -> str:
    what = "slice" if isinstance(link, Committed) else "segment"
    if row.state is not QueueState.ACTIVE:
        return f"queue {row} is {row.state.value}; its {what}s are not adopted"
    if link.start_offset != row.cold_commit or link.cl_base != row.cold_cl_end:
        return (
            f"{what} [{link.start_offset}, {link.end_offset}) at cold commitlog "
            f"{link.cl_base} does not continue {row} at offset {row.cold_commit}, cold "
            f"commitlog {row.cold_cl_end}"
        )
    return ""


async def _load(
    backend: Backend, listing: dict[str, ObjectInfo], key: ObjectKey, found: _ReportDraft
) -> Manifest | FenceMarker | None:
    """Read and validate one manifest and check its objects are listed with their sizes;
    report and return None if anything is wrong (a fence marker is returned as is)."""
    try:
        size = listing[key.key].size
        manifest = read_stored(await backend.read_exact(key.key, 0, size), key.key)
        if isinstance(manifest, FenceMarker):
            return manifest
    except ObjectNotFoundError:
        found.issue(FindingKind.MISSING_OBJECT, key.key, "manifest vanished while reconciling")
        return None
    except CorruptManifestError as exc:
        found.issue(FindingKind.CORRUPT_MANIFEST, key.key, exc.message)
        return None
    for what, obj_key, size in (
        ("commit-log object", manifest.commit_log_key, manifest.commit_log.stored_size),
        ("consume-queue object", manifest.consume_queue_key, manifest.consume_queue.size),
    ):
        info = listing.get(obj_key)
        if info is None:
            found.issue(
                FindingKind.MISSING_OBJECT, obj_key, f"{what} named by {key.key} is missing"
            )
            return None
        if info.size != size:
            found.issue(
                FindingKind.SIZE_MISMATCH,
                obj_key,
                f"{what} is {info.size} bytes, manifest {key.key} says {size}",
            )
            return None
    return manifest


async def rebuild(
    backend: Backend,
    state_dir: Path | str,
    *,
    cluster: str,
    broker: str,
    clock: Clock | None = None,
) -> ReconcileReport:
    """Build a fresh catalogue in ``state_dir`` from the bucket's manifests alone.

    Every queue with an init record gets a row from it (and its retention records), and
    every other queue with manifests one whose init offset is its first manifest's
    start; then every contiguous manifest is adopted. Refuses to overwrite: move an
    existing catalogue away first.

    Raises CatalogueError when a catalogue already exists in ``state_dir``, plus
    whatever :meth:`Catalogue.open` and the backend raise.
    """
    path = Path(state_dir) / DB_NAME
    if path.exists():
        raise CatalogueError(
            "a catalogue already exists; move it away to rebuild from manifests",
            where=str(path),
        )
    with Catalogue.open(
        state_dir, cluster=cluster, broker=broker, clock=clock, cold_url=backend.url
    ) as catalogue:
        return await reconcile(catalogue, backend)
