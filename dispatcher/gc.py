"""Garbage collection of the cold store: objects no manifest commits, and crash leftovers.

A segment exists exactly when its manifest does; a COMMIT_LOG or CONSUME_QUEUE object no
manifest references is *uncommitted*: an upload that never reached its commit point, a
deletion a crash cut short, a repair's remnant. Once older than the grace period it is
garbage. So are the temp files a killed POSIX write leaves beside its destination
(``.<name>.tmp-<32 hex>``): the backend never lists them, so for POSIX backends only,
:func:`scan_garbage` walks the broker's directory on disk for them.

What is never touched: anything a manifest references (read from the manifests
themselves, never inferred), anything the catalogue references (``protected``, when a
catalogue is at hand), every object of a queue that has a manifest GC cannot parse (what
it references is unknown), tieredstore's own ``_lease.json`` and ``_quarantine/``, and
keys that are not tieredstore object keys (reported, never deleted).

Manifests whose objects are missing or of the wrong size are reported; GC never "fixes"
them by deleting anything.

Grace compares each object's ``mtime`` with the injected clock. :func:`scan_garbage`
only reads; :func:`delete_garbage` deletes what a scan found, holding the writer lease
(a concurrent sidecar could be rewriting an old leftover under the same deterministic
name at that very moment).
"""

from __future__ import annotations

import asyncio
import enum
import os
import re
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from dispatcher.lease import Lease
from dispatcher.lease_guard import hold_lease
from dispatcher.retention import format_age
from tieredstore.backends.base import Backend, ObjectInfo
from tieredstore.backends.posix import PosixBackend
from tieredstore.backends.retry import RetryingBackend
from tieredstore.errors import (
    BackendError,
    CorruptManifestError,
    InvalidNameError,
    ObjectNotFoundError,
)
from tieredstore.layout import SegmentKind, broker_prefix, parse_object_key
from tieredstore.manifest import Manifest, read_manifest

__all__ = [
    "Finding",
    "FindingKind",
    "Garbage",
    "GarbageKind",
    "GcReport",
    "delete_garbage",
    "scan_garbage",
]

_TEMP_NAME: Final = re.compile(r"\..+\.tmp-[0-9a-f]{32}")
_READ_CONCURRENCY: Final = 16
#: Check (or renew) the lease before every this many deletions.
_LEASE_EVERY: Final = 100


class GarbageKind(enum.Enum):
    UNCOMMITTED = "uncommitted object: no manifest references it"
    TEMP_FILE = "temp file of an interrupted POSIX write"


@dataclass(frozen=True, slots=True)
class Garbage:
    """One object (or temp file, by its path relative to the backend root) to remove."""

    key: str
    kind: GarbageKind
    size: int
    age_ms: int

    def describe(self) -> str:
        return f"{self.key}: {self.size} bytes, age {format_age(self.age_ms)}, {self.kind.value}"


class FindingKind(enum.Enum):
    MISSING_OBJECT = "missing_object"  # a manifest names an object that is not there
    SIZE_MISMATCH = "size_mismatch"  # ... or one of another size
    CORRUPT_MANIFEST = "corrupt_manifest"  # its queue is left alone entirely
    UNRECOGNISED = "unrecognised"  # not a tieredstore key: never deleted

    @property
    def damage(self) -> bool:
        """Whether the finding means committed data is damaged or unreadable."""
        return self is not FindingKind.UNRECOGNISED


@dataclass(frozen=True, slots=True)
class Finding:
    """Something GC saw and did not (and will not) delete."""

    kind: FindingKind
    key: str
    detail: str

    def describe(self) -> str:
        return f"{self.kind.value}: {self.detail} ({self.key})"


@dataclass(frozen=True, slots=True)
class GcReport:
    """What a scan found. ``young`` counts uncommitted objects still within the grace."""

    garbage: tuple[Garbage, ...]
    findings: tuple[Finding, ...]
    young: int
    manifests: int

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
) -> GcReport:
    """List one broker's garbage and damaged manifests; change nothing.

    ``protected`` keys (e.g. every object the catalogue references) are never garbage.
    Backend errors propagate.
    """
    prefix = broker_prefix(cluster, broker) + "/"
    listing = {info.key: info for info in await backend.list(prefix)}
    findings: list[Finding] = []
    segment_objects: dict[tuple[str, int], list[ObjectInfo]] = defaultdict(list)
    manifest_keys: list[str] = []
    for info in listing.values():
        if info.key[len(prefix) :].startswith("_"):
            continue  # _lease.json, _quarantine/: tieredstore's own, never garbage
        try:
            key = parse_object_key(info.key)
        except InvalidNameError as exc:
            findings.append(Finding(FindingKind.UNRECOGNISED, info.key, exc.message))
            continue
        if key.kind is SegmentKind.MANIFEST:
            manifest_keys.append(info.key)
        else:
            segment_objects[(key.topic, key.queue_id)].append(info)
    manifests, corrupt, vanished = await _read_manifests(backend, manifest_keys, listing)
    findings.extend(corrupt)
    findings.extend(_check_manifests(manifests, listing))
    # What a corrupt or vanished manifest referenced is unknown: spare its whole queue.
    blocked = {_queue_of(key) for key in [*(f.key for f in corrupt), *vanished]}
    referenced = set(protected)
    for m in manifests:
        referenced.update((m.commit_log_key, m.consume_queue_key))
    garbage: list[Garbage] = []
    young = 0
    grace_ms = grace_s * 1000
    for queue, infos in sorted(segment_objects.items()):
        if queue in blocked:
            continue
        for info in infos:
            if info.key in referenced:
                continue
            age = now_ms - round(info.mtime * 1000)
            if age > grace_ms:
                garbage.append(Garbage(info.key, GarbageKind.UNCOMMITTED, info.size, age))
            else:
                young += 1
    temps = await asyncio.to_thread(_temp_files, backend, prefix, now_ms, grace_ms)
    garbage.extend(temps)
    return GcReport(tuple(garbage), tuple(findings), young, len(manifests))


def _queue_of(manifest_key: str) -> tuple[str, int]:
    key = parse_object_key(manifest_key)
    return key.topic, key.queue_id


async def _read_manifests(
    backend: Backend, keys: Iterable[str], listing: dict[str, ObjectInfo]
) -> tuple[list[Manifest], list[Finding], list[str]]:
    """Read and validate every manifest (bounded concurrency).

    Returns the manifests, findings for corrupt ones, and the keys of manifests that
    vanished since the listing (expiry running beside a dry run).
    """
    sem = asyncio.Semaphore(_READ_CONCURRENCY)

    async def one(key: str) -> Manifest | Finding | str:
        try:
            async with sem:
                data = await backend.read_exact(key, 0, listing[key].size)
        except ObjectNotFoundError:
            return key
        try:
            return read_manifest(data, key)
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
            ("commit-log object", m.commit_log_key, m.commit_log.size),
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


def _posix_root(backend: Backend) -> list[Path]:
    """The root directory of a POSIX backend (seen through retry wrappers), as a list of
    zero or one path: other backends have no temp files of ours to find."""
    while isinstance(backend, RetryingBackend):
        backend = backend.inner
    return [backend.root] if isinstance(backend, PosixBackend) else []


def _temp_files(backend: Backend, prefix: str, now_ms: int, grace_ms: float) -> list[Garbage]:
    """Temp files older than the grace under the broker's directory (POSIX only)."""
    found: list[Garbage] = []
    for root in _posix_root(backend):
        top = root.joinpath(*prefix.rstrip("/").split("/"))
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                if not _TEMP_NAME.fullmatch(name):
                    continue
                path = Path(dirpath) / name
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue  # published or removed while we walked
                age = now_ms - st.st_mtime_ns // 1_000_000
                if age > grace_ms:
                    rel = path.relative_to(root).as_posix()
                    found.append(Garbage(rel, GarbageKind.TEMP_FILE, st.st_size, age))
    found.sort(key=lambda g: g.key)
    return found


async def delete_garbage(report: GcReport, *, backend: Backend, lease: Lease) -> int:
    """Delete what ``report`` found, holding the lease; return how many were removed.

    Objects go through the backend (idempotent); temp files are unlinked on disk.
    Raises LeaseLostError if another writer took over, BackendError if a temp file
    cannot be removed.
    """
    roots = _posix_root(backend)
    for i, item in enumerate(report.garbage):
        if i % _LEASE_EVERY == 0:
            await hold_lease(lease)
        if item.kind is GarbageKind.UNCOMMITTED:
            await backend.delete(item.key)
        else:
            for root in roots:
                await asyncio.to_thread(_unlink_temp, root, item.key)
    return len(report.garbage)


def _unlink_temp(root: Path, rel: str) -> None:
    path = root.joinpath(*rel.split("/"))
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise BackendError(f"cannot remove temp file: {exc.strerror}", where=str(path)) from exc
