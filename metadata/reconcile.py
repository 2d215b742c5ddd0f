"""Reconciling the catalogue with the bucket: the manifests are the truth.

On start (and by ``rebuild-metadata``) the catalogue is compared with one listing of the
broker's cold prefix:

* **Adopted**: for each queue, manifests at and after ``cold_commit`` that continue it
  exactly (``start == cold_commit``, ``cl_base == cold_cl_end``) and whose objects are
  present with the recorded sizes are committed to the catalogue, in order — the crash
  between manifest write and catalogue commit, healed. A queue the catalogue does not know
  is created from its first manifest (init offset = that manifest's start).
* **Reported, never dropped**: catalogue segments whose manifest or objects are missing or
  of the wrong size; manifests that do not parse; manifests that overlap the catalogue's
  committed range without being one of its segments, or leave a gap after it; manifests
  not adopted because of an earlier problem in the same queue or the queue's state.

Sizes come from the listing; digests are not read here (that is the verifier's job, and
reading every object on each start would cost the whole cold store). DELETING segments are
skipped: their objects disappear by design.
"""

from __future__ import annotations

import asyncio
import enum
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from metadata.rows import QueueRow, QueueState, SegmentRow, SegmentStatus
from tieredstore.errors import (
    CatalogueError,
    CorruptManifestError,
    InvalidNameError,
    ObjectNotFoundError,
)
from tieredstore.layout import ObjectKey, SegmentKind, broker_prefix, parse_object_key
from tieredstore.manifest import Manifest, read_manifest

if TYPE_CHECKING:
    from metadata.catalogue import Catalogue
    from tieredstore.backends.base import Backend, ObjectInfo

__all__ = ["IssueKind", "ReconcileIssue", "ReconcileReport", "reconcile"]


class IssueKind(enum.Enum):
    MISSING_OBJECT = "missing_object"  # a catalogue segment's manifest/CL/CQ is absent
    SIZE_MISMATCH = "size_mismatch"  # an object's size differs from what is recorded
    CORRUPT_MANIFEST = "corrupt_manifest"  # a manifest that does not parse or validate
    OVERLAP = "overlap"  # a manifest inside the committed range that is not a segment of it
    GAP = "gap"  # a manifest after cold_commit that does not continue the queue
    NOT_ADOPTED = "not_adopted"  # blocked by an earlier problem or by the queue's state


@dataclass(frozen=True, slots=True)
class ReconcileIssue:
    """One discrepancy for the operator: what kind, which object, and why."""

    kind: IssueKind
    key: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.detail} ({self.key})"


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    """What reconciliation did and found. ``clean`` when nothing needs the operator."""

    adopted: tuple[SegmentRow, ...] = ()
    created: tuple[QueueRow, ...] = ()
    issues: tuple[ReconcileIssue, ...] = ()
    #: Keys under the broker prefix that are neither ours nor segment objects.
    unrecognised: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        return not self.issues

    def __str__(self) -> str:
        text = (
            f"adopted {len(self.adopted)} segments, created {len(self.created)} queues, "
            f"{len(self.issues)} issues"
        )
        return text + (f" (first: {self.issues[0]})" if self.issues else "")


@dataclass
class _Findings:
    adopted: list[SegmentRow] = field(default_factory=list)
    created: list[QueueRow] = field(default_factory=list)
    issues: list[ReconcileIssue] = field(default_factory=list)

    def issue(self, kind: IssueKind, key: str, detail: str) -> None:
        self.issues.append(ReconcileIssue(kind, key, detail))


async def reconcile(catalogue: Catalogue, backend: Backend) -> ReconcileReport:
    """Reconcile ``catalogue`` with the manifests in ``backend`` (see the module doc).

    Backend errors propagate (retryable ones may be retried by the caller: adoption is
    idempotent). The catalogue must be open for writing.
    """
    if catalogue.read_only:
        raise CatalogueError("reconcile needs a writable catalogue", where=str(catalogue.path))
    prefix = broker_prefix(catalogue.cluster, catalogue.broker) + "/"
    listing = {info.key: info for info in await backend.list(prefix)}
    manifests, unrecognised = _index(listing.values(), prefix)
    found = _Findings()
    queues = await asyncio.to_thread(catalogue.queues)
    for row in queues:
        segments = await asyncio.to_thread(catalogue.segments, row.topic, row.queue_id)
        _check_rows(segments, listing, found)
    known = {(q.topic, q.queue_id): q for q in queues}
    for (topic, queue_id), keys in sorted(manifests.items()):
        await _adopt_queue(
            catalogue, backend, listing, known.get((topic, queue_id)), topic, queue_id, keys, found
        )
    return ReconcileReport(
        tuple(found.adopted), tuple(found.created), tuple(found.issues), tuple(unrecognised)
    )


def _index(
    listing: Iterable[ObjectInfo], prefix: str
) -> tuple[dict[tuple[str, int], list[ObjectKey]], list[str]]:
    """Group manifest keys by queue (sorted by start); collect keys that are not ours."""
    manifests: dict[tuple[str, int], list[ObjectKey]] = defaultdict(list)
    unrecognised: list[str] = []
    for info in listing:
        rest = info.key[len(prefix) :]
        if rest.startswith("_"):  # the lease, quarantine: tieredstore's own
            continue
        try:
            key = parse_object_key(info.key)
        except InvalidNameError:
            unrecognised.append(info.key)
            continue
        if key.kind is SegmentKind.MANIFEST:
            manifests[(key.topic, key.queue_id)].append(key)
    for keys in manifests.values():
        keys.sort(key=lambda k: k.base_offset)
    return dict(manifests), unrecognised


def _check_rows(
    segments: Sequence[SegmentRow], listing: dict[str, ObjectInfo], found: _Findings
) -> None:
    """Report catalogue segments whose objects are absent or of the wrong size."""
    for seg in segments:
        if seg.status is SegmentStatus.DELETING:
            continue
        m = seg.manifest
        expected = (
            ("manifest", m.key, len(m.to_json())),
            ("commit-log object", m.commit_log_key, m.commit_log.size),
            ("consume-queue object", m.consume_queue_key, m.consume_queue.size),
        )
        for what, key, size in expected:
            info = listing.get(key)
            if info is None:
                found.issue(
                    IssueKind.MISSING_OBJECT, key, f"{what} of catalogue segment {seg} is missing"
                )
            elif info.size != size:
                found.issue(
                    IssueKind.SIZE_MISMATCH,
                    key,
                    f"{what} of catalogue segment {seg} is {info.size} bytes, expected {size}",
                )


async def _adopt_queue(
    catalogue: Catalogue,
    backend: Backend,
    listing: dict[str, ObjectInfo],
    row: QueueRow | None,
    topic: str,
    queue_id: int,
    keys: Sequence[ObjectKey],
    found: _Findings,
) -> None:
    """Adopt one queue's manifests that continue the catalogue, in order."""
    known_starts: set[int] = set()
    if row is not None:
        segments = await asyncio.to_thread(catalogue.segments, topic, queue_id)
        known_starts = {s.start_offset for s in segments}
    blocked = ""
    for key in keys:
        start = key.base_offset
        if row is not None and start in known_starts:
            continue  # the catalogue's own segment; checked by _check_rows
        if row is not None and start < row.cold_commit:
            where = "below cold min (already expired)" if start < row.cold_min else "inside"
            found.issue(
                IssueKind.OVERLAP,
                key.key,
                f"manifest at offset {start} is {where} the catalogue's committed range "
                f"[{row.cold_min}, {row.cold_commit}) of {topic}/{queue_id} but no segment of it",
            )
            continue
        if blocked:
            found.issue(IssueKind.NOT_ADOPTED, key.key, f"not adopted: {blocked}")
            continue
        manifest = await _load(backend, listing, key, found)
        if manifest is None:
            blocked = f"follows the unadoptable manifest at offset {start}"
            continue
        if row is None:
            row = await asyncio.to_thread(
                catalogue.ensure_queue, topic, queue_id, manifest.start_offset,
                cl_base=manifest.cl_base,
            )  # fmt: skip
            found.created.append(row)
        problem = _continuation_problem(row, manifest)
        if problem:
            kind = IssueKind.NOT_ADOPTED if row.state is not QueueState.ACTIVE else IssueKind.GAP
            found.issue(kind, key.key, problem)
            blocked = f"follows the unadoptable manifest at offset {start}"
            continue
        adopted = await asyncio.to_thread(catalogue.commit_segment, manifest)
        found.adopted.append(adopted)
        row = await asyncio.to_thread(catalogue.queue, topic, queue_id) or row


def _continuation_problem(row: QueueRow, manifest: Manifest) -> str:
    if row.state is not QueueState.ACTIVE:
        return f"queue {row} is {row.state.value}; its manifests are not adopted"
    if manifest.start_offset != row.cold_commit or manifest.cl_base != row.cold_cl_end:
        return (
            f"segment [{manifest.start_offset}, {manifest.end_offset}) at cold commitlog "
            f"{manifest.cl_base} does not continue {row} at offset {row.cold_commit}, cold "
            f"commitlog {row.cold_cl_end}"
        )
    return ""


async def _load(
    backend: Backend, listing: dict[str, ObjectInfo], key: ObjectKey, found: _Findings
) -> Manifest | None:
    """Read and validate one manifest and check its objects are listed with their sizes;
    report and return None if anything is wrong."""
    try:
        size = listing[key.key].size
        manifest = read_manifest(await backend.read_exact(key.key, 0, size), key.key)
    except ObjectNotFoundError:
        found.issue(IssueKind.MISSING_OBJECT, key.key, "manifest vanished while reconciling")
        return None
    except CorruptManifestError as exc:
        found.issue(IssueKind.CORRUPT_MANIFEST, key.key, exc.message)
        return None
    for what, obj_key, size in (
        ("commit-log object", manifest.commit_log_key, manifest.commit_log.size),
        ("consume-queue object", manifest.consume_queue_key, manifest.consume_queue.size),
    ):
        info = listing.get(obj_key)
        if info is None:
            found.issue(IssueKind.MISSING_OBJECT, obj_key, f"{what} named by {key.key} is missing")
            return None
        if info.size != size:
            found.issue(
                IssueKind.SIZE_MISMATCH,
                obj_key,
                f"{what} is {info.size} bytes, manifest {key.key} says {size}",
            )
            return None
    return manifest
