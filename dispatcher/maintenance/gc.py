"""Garbage collection of the cold store: objects no manifest commits, and crash leftovers.

A segment exists exactly when its manifest does; a COMMIT_LOG or CONSUME_QUEUE object no
manifest references is *uncommitted*: an upload that never reached its commit point, a
deletion a crash cut short, a repair's remnant. Once older than the grace period it is
garbage. So are the files an interrupted write of the backend itself left behind (a
POSIX temp file killed before its rename): the backend reports them through its
contract (``list_leftovers``) and removes them (``delete_leftover``); GC never looks
behind the backend seam.

What is never touched: anything a manifest references (read from the manifests
themselves, never inferred), anything the catalogue references (``protected``, when a
catalogue is at hand), every object of a queue that has a manifest GC cannot parse (what
it references is unknown), tieredstore's own ``_lease.json`` and ``_quarantine/``, loss
records (``<queue>/LOSS/*.json``: history, never garbage, whatever their age), and keys
that are not tieredstore object keys (reported, never deleted).

Manifests whose objects are missing or of the wrong size are reported; GC never "fixes"
them by deleting anything. So are the batch objects the catalogue's slice rows name
(``batches``) that are missing, of another size than committed, or whose head does not
parse: each finding names the batch key (the sidecar makes the same damage loud for
every queue the batch held, and heals them).

Grace compares each object's ``mtime`` with the injected clock. :func:`scan_garbage`
only reads; :func:`delete_garbage` deletes what a scan found, checking the writer lease
before every deletion (a local check against the holder's monotonic deadline, renewed
by compare-and-swap when due): a sidecar that lost its lease deletes nothing more.
Garbage can never become committed later: every upload attempt writes under names of
its own, and a manifest only ever names the objects its own attempt wrote.

**Fencing the batch sequence.** GC takes the lease like any takeover, so before anything
else :func:`delete_garbage` fences the batch sequence as a sidecar's batch writer does
on start: a writer of an older epoch frozen inside its batch create then finds its key
taken by GC's fence and stops, instead of committing after GC took a new epoch.

**Fencing before deleting.** A writer paused after its last lease check, right before
its manifest create (or inside a create its backend retries), would otherwise commit a
manifest naming objects GC just deleted. So before deleting the objects of a segment
start S whose manifest key holds no manifest, :func:`delete_garbage` puts a *fence
marker* of its own lease epoch there (:class:`~tieredstore.cold.manifest.FenceMarker`:
create-if-absent, or compare-and-swap over an older marker): the paused writer's create
then finds the key taken, reads a newer epoch and stops as fenced. If the create finds a
manifest instead, it landed since the scan and its objects are spared. S is the
CONSUME_QUEUE object's base / 20; a COMMIT_LOG object takes S from its attempt's
CONSUME_QUEUE object. A COMMIT_LOG object without one is from an upload that has not
finished (or an attempt already discarded): its writer has a lease check ahead of its
create, which fails once GC holds the lease.
"""

from __future__ import annotations

import asyncio
import enum
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from tieredstore.backends.base import Backend, ObjectInfo
from tieredstore.backends.retry import RetryPolicy
from tieredstore.cold.history import read_batch
from tieredstore.cold.layout import (
    ObjectKey,
    QueuePath,
    SegmentKind,
    Unrecognised,
    broker_prefix,
    classify_listed,
    object_key,
    parse_object_key,
    queue_root,
)
from tieredstore.cold.manifest import FenceMarker, Manifest, read_stored
from tieredstore.dispatcher.lease.guard import hold_lease
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.dispatcher.maintenance.retention import format_age
from tieredstore.dispatcher.tiering.batch.sequence import BatchKeys
from tieredstore.errors import (
    ConditionFailedError,
    CorruptBatchError,
    CorruptManifestError,
    DamagedObjectError,
    ObjectNotFoundError,
)
from tieredstore.findings import Finding, FindingKind
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE

__all__ = [
    "Fence",
    "Garbage",
    "GarbageKind",
    "GcReport",
    "delete_garbage",
    "scan_garbage",
]

_READ_CONCURRENCY: Final = 16


class GarbageKind(enum.Enum):
    UNCOMMITTED = "uncommitted object: no manifest references it"
    LEFTOVER = "left by an interrupted write (POSIX temp file, S3 multipart upload)"


@dataclass(frozen=True, slots=True)
class Garbage:
    """One object (or temp file, by its path relative to the backend root) to remove."""

    key: str
    kind: GarbageKind
    size: int
    age_ms: int

    def describe(self) -> str:
        return f"{self.key}: {self.size} bytes, age {format_age(self.age_ms)}, {self.kind.value}"


@dataclass(frozen=True, slots=True)
class Fence:
    """A segment start whose manifest key must hold GC's fence marker before the
    uncommitted objects of that start are deleted (see the module docstring)."""

    queue: QueuePath
    start_offset: int

    @property
    def key(self) -> str:
        return object_key(self.queue, SegmentKind.MANIFEST, self.start_offset)


@dataclass(frozen=True, slots=True)
class GcReport:
    """What a scan of broker ``broker`` of ``cluster`` found. ``young`` counts
    uncommitted objects still within the grace; ``fences`` are the segment starts to
    fence before deleting (``now_ms``: the scan's time, which the markers record)."""

    cluster: str
    broker: str
    garbage: tuple[Garbage, ...]
    findings: tuple[Finding, ...]
    young: int
    manifests: int
    fences: tuple[Fence, ...] = ()
    now_ms: int = 0

    @property
    def damaged(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.kind.damage)


async def scan_garbage(
    backend: Backend,
    *,
    cluster: str,
    broker: str,
    now_ms: int,
    grace_s: float,
    protected: Collection[str] = frozenset(),
    committed: Collection[str] = frozenset(),
    batches: Mapping[str, int] = MappingProxyType({}),
) -> GcReport:
    """List one broker's garbage and damaged manifests; change nothing.

    ``protected`` keys (e.g. every object the catalogue references) are never garbage;
    ``committed`` ones (its committed segments' objects) the listing lacks are damage, as
    are damaged ``batches`` (:func:`_check_batches`). Errors propagate.
    """
    prefix = broker_prefix(cluster, broker) + "/"
    listing = {info.key: info for info in await backend.list(prefix)}
    findings: list[Finding] = []
    segment_objects: dict[tuple[str, int], list[ObjectInfo]] = defaultdict(list)
    parsed: dict[str, ObjectKey] = {}
    manifest_keys: list[str] = []
    for info in listing.values():
        key = classify_listed(info.key, prefix)
        if isinstance(key, Unrecognised):
            findings.append(Finding(FindingKind.UNRECOGNISED, key.key, key.problem))
            continue
        if not isinstance(key, ObjectKey):
            continue  # _lease.json, _quarantine/, _config/, loss records: never garbage
        if key.kind is SegmentKind.MANIFEST:
            manifest_keys.append(info.key)
        else:
            segment_objects[(key.topic, key.queue_id)].append(info)
            parsed[info.key] = key
    manifests, corrupt, vanished = await _read_manifests(backend, manifest_keys, listing)
    findings.extend([*corrupt, *_check_manifests(manifests, listing)])
    findings.extend(await _check_batches(backend, batches, listing, committed))
    # What a corrupt or vanished manifest referenced is unknown: spare its whole queue.
    blocked = {_queue_of(key) for key in [*(f.key for f in corrupt), *vanished]}
    referenced = set(protected)
    for m in manifests:
        referenced.update((m.commit_log_key, m.consume_queue_key))
    garbage: list[Garbage] = []
    young = 0
    for queue, infos in sorted(segment_objects.items()):
        if queue in blocked:
            continue
        for info in infos:
            if info.key in referenced:
                continue
            age = now_ms - round(info.mtime * 1000)
            if age > grace_s * 1000:
                garbage.append(Garbage(info.key, GarbageKind.UNCOMMITTED, info.size, age))
            else:
                young += 1
    fences = _fences(garbage, parsed, {m.key for m in manifests})
    garbage.extend(await _leftovers(backend, prefix, now_ms, grace_s * 1000))
    return GcReport(cluster, broker, tuple(garbage), tuple(findings), young, len(manifests),
                    fences, now_ms)  # fmt: skip


def _missing_committed(committed: Collection[str], listing: dict[str, ObjectInfo]) -> list[Finding]:
    """A finding per key the catalogue commits that the cold store does not hold."""
    lacks = "the catalogue commits it; the cold store lacks it"
    return [
        Finding(FindingKind.MISSING_OBJECT, key, lacks)
        for key in sorted(set(committed) - set(listing))
    ]


async def _check_batches(
    backend: Backend,
    batches: Mapping[str, int],
    listing: dict[str, ObjectInfo],
    committed: Collection[str],
) -> list[Finding]:
    """The findings of :func:`_missing_committed` (``committed``), then one per batch
    object of ``batches`` (key: committed size) that is missing, of another size, or
    whose head does not parse (read only when the size is right)."""
    named = "the catalogue's batch slices are in it"
    findings = _missing_committed(committed, listing)
    for key, size in sorted(batches.items()):
        info = listing.get(key)
        if info is None:
            findings.append(
                Finding(FindingKind.MISSING_OBJECT, key, f"{named}; the cold store lacks it")
            )
            continue
        if info.size != size:
            what = f"{named}; it is {info.size} bytes, committed as {size}"
            findings.append(Finding(FindingKind.SIZE_MISMATCH, key, what))
            continue
        try:
            await read_batch(backend, key, size)
        except (CorruptBatchError, CorruptManifestError, DamagedObjectError) as exc:
            what = f"{named}; its head does not parse: {exc.message}"
            findings.append(Finding(FindingKind.CORRUPT_MANIFEST, key, what))
    return findings


def _fences(
    garbage: Iterable[Garbage], parsed: dict[str, ObjectKey], manifest_keys: Collection[str]
) -> tuple[Fence, ...]:
    """The segment starts of ``garbage`` whose manifest key holds no manifest."""
    cq_starts: dict[tuple[str, int, str], set[int]] = defaultdict(set)
    for k in parsed.values():
        if k.kind is SegmentKind.CONSUME_QUEUE and k.attempt:
            cq_starts[(k.topic, k.queue_id, k.attempt)].add(k.base_offset // CQ_UNIT_SIZE)
    fences: set[Fence] = set()
    for item in garbage:
        key = parsed[item.key]
        if not key.attempt:
            continue  # format 1 names: no writer of this version names them
        if key.kind is SegmentKind.CONSUME_QUEUE:
            starts = {key.base_offset // CQ_UNIT_SIZE}
        else:  # an upload that has not finished has no CQ object yet (module doc)
            starts = cq_starts.get((key.topic, key.queue_id, key.attempt), set())
        for start in starts:
            fence = Fence(key.queue, start)
            if fence.key not in manifest_keys:
                fences.add(fence)
    return tuple(sorted(fences, key=lambda f: (f.queue.topic, f.queue.queue_id, f.start_offset)))


def _queue_of(manifest_key: str) -> tuple[str, int]:
    key = parse_object_key(manifest_key)
    return key.topic, key.queue_id


async def _read_manifests(
    backend: Backend, keys: Iterable[str], listing: dict[str, ObjectInfo]
) -> tuple[list[Manifest], list[Finding], list[str]]:
    """Read and validate every manifest (bounded concurrency).

    Returns the manifests, findings for corrupt ones, and the keys of manifests that
    vanished since the listing (expiry running beside a dry run). Fence markers are
    none of these: no segment, nothing referenced.
    """
    sem = asyncio.Semaphore(_READ_CONCURRENCY)

    async def one(key: str) -> Manifest | FenceMarker | Finding | str:
        try:
            async with sem:
                data = await backend.read_exact(key, 0, listing[key].size)
        except ObjectNotFoundError:
            return key
        try:
            return read_stored(data, key)
        except CorruptManifestError as exc:
            return Finding(FindingKind.CORRUPT_MANIFEST, key, exc.message)

    results = await asyncio.gather(*(one(k) for k in sorted(keys)))
    return (
        [r for r in results if isinstance(r, Manifest)],
        [r for r in results if isinstance(r, Finding)],
        [r for r in results if isinstance(r, str)],
    )


def _check_manifests(
    manifests: Iterable[Manifest], listing: dict[str, ObjectInfo]
) -> list[Finding]:
    """Report manifests whose objects are absent or of the wrong size."""
    out: list[Finding] = []
    for m in manifests:
        for what, key, size in (
            ("commit-log object", m.commit_log_key, m.commit_log.stored_size),
            ("consume-queue object", m.consume_queue_key, m.consume_queue.size),
        ):
            info = listing.get(key)
            if info is None:
                out.append(
                    Finding(
                        FindingKind.MISSING_OBJECT, key, f"{what} of manifest {m.key} is missing"
                    )
                )
            elif info.size != size:
                out.append(
                    Finding(
                        FindingKind.SIZE_MISMATCH,
                        key,
                        f"{what} is {info.size} bytes, manifest {m.key} says {size}",
                    )
                )
    return out


async def _leftovers(backend: Backend, prefix: str, now_ms: int, grace_ms: float) -> list[Garbage]:
    """Files interrupted writes left under the broker's prefix, older than the grace."""
    found = []
    for info in await backend.list_leftovers(prefix):
        age = now_ms - round(info.mtime * 1000)
        if age > grace_ms:
            found.append(Garbage(info.key, GarbageKind.LEFTOVER, info.size, age))
    return found


async def delete_garbage(report: GcReport, *, backend: Backend, lease: Lease) -> int:
    """Fence, then delete what ``report`` found, holding the lease; return how many
    were removed.

    First the batch sequence gets this GC's fence
    (:meth:`~tieredstore.dispatcher.tiering.batch.sequence.BatchKeys.fence_takeover`: a writer
    frozen inside its batch create cannot commit after GC took its epoch); then every start in
    ``report.fences`` gets this GC's fence marker; an object a manifest that landed
    since the scan names is spared (so is every object of a queue whose manifest key
    then holds something unreadable). Objects and leftovers both go through the backend
    (idempotent). Raises LeaseLostError if another writer took over, BackendError if
    one cannot be removed.
    """
    await hold_lease(lease)
    keys = BatchKeys(backend=backend, lease=lease, clock=lease.clock, retry=RetryPolicy(),
                     cluster=report.cluster, broker=report.broker)  # fmt: skip
    await keys.fence_takeover()
    spared: set[str] = set()
    for fence in report.fences:
        await hold_lease(lease)
        spared |= await _fence(fence, report, backend=backend, lease=lease)
    deleted = 0
    for item in report.garbage:
        if item.key in spared:
            continue
        await hold_lease(lease)
        if item.kind is GarbageKind.UNCOMMITTED:
            await backend.delete(item.key)
        else:
            await backend.delete_leftover(item.key)
        deleted += 1
    return deleted


async def _fence(fence: Fence, report: GcReport, *, backend: Backend, lease: Lease) -> set[str]:
    """Put GC's marker at ``fence.key``; return the garbage keys to spare after all."""
    q = fence.queue
    marker = FenceMarker(
        q.cluster, q.broker, q.topic, q.queue_id, fence.start_offset,
        lease_epoch=lease.epoch, writer_id=lease.owner, created_at_ms=report.now_ms,
    )  # fmt: skip
    data = marker.to_json()
    for _ in range(3):
        try:
            await backend.create(fence.key, data)
            return set()
        except ConditionFailedError:
            got = await backend.read_versioned(fence.key)
        try:
            stored = read_stored(got.data, fence.key)
        except CorruptManifestError:  # unreadable (or newer): what it names is unknown
            return {g.key for g in report.garbage if g.key.startswith(_queue_prefix(q))}
        if isinstance(stored, Manifest):  # landed since the scan: its objects are not garbage
            return {stored.commit_log_key, stored.consume_queue_key}
        if stored.lease_epoch >= lease.epoch:
            return set()
        await hold_lease(lease)
        try:  # an older epoch's marker: a writer of an epoch in between could replace it
            await backend.replace(fence.key, data, version=got.version)
            return set()
        except ConditionFailedError:
            continue
    return {g.key for g in report.garbage if g.key.startswith(_queue_prefix(q))}


def _queue_prefix(queue: QueuePath) -> str:
    return queue_root(queue.cluster, queue.broker, queue.topic, queue.queue_id) + "/"
