"""Planning a query of the archive: one Spark input partition per link of the committed
history (a segment, or a batch slice no segment holds) that can hold a matching row.

Runs once per query where Spark plans it (a Python worker beside the driver), with a
plain sync fsspec filesystem, as the verifier's driver listing does:

1. list the brokers of the cluster (or take the ``broker`` option);
2. list each broker's prefix — only the topics an ``=``/``IN`` filter names, when one
   does — and keep the MANIFEST keys whose topic and queue pass the filters; a segment
   whose successor starts at or below the lowest wanted offset, or that starts above the
   highest, is dropped by its name alone;
3. read the remaining manifests (concurrently on object stores) and the heads of the
   broker's batch objects (``_batches/``), take each queue's links by the one reading
   rule (:func:`~tieredstore.cold.history.choose`: segments win), and keep the links
   whose offsets and store times overlap the filters.

No COMMIT_LOG or CONSUME_QUEUE bytes are touched here: tasks read those, and only for
the links planned. Object keys and byte ranges always come from the commit points.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from fsspec.spec import AbstractFileSystem
from pyspark.sql.datasource import InputPartition

from tieredstore.cold.history import Committed, Withdrawal, batch_links, choose
from tieredstore.cold.layout import (
    ObjectKey,
    QueuePath,
    SegmentKind,
    batch_prefix,
    cluster_dir,
    parse_batch_key,
    parse_object_key,
    validate_topic,
)
from tieredstore.cold.manifest import Manifest, read_stored
from tieredstore.cold.provenance import NotTieredError
from tieredstore.errors import ConfigError, InvalidNameError
from tieredstore.export.rows import TimeWindow
from tieredstore.verifier.archive.options import SOURCE_NAME, ArchiveOptions
from tieredstore.verifier.archive.pruning import Pruning
from tieredstore.verifier.readers import (
    ColdLocation,
    open_cold_filesystem,
    read_batch,
    require_tiered,
)

__all__ = ["SegmentPartition", "check_sources", "plan"]


@dataclass(frozen=True)
class SegmentPartition(InputPartition):
    """One link to read (``link``: a segment or a batch slice, with its byte spans), the
    queue offsets ``[first, end)`` wanted of it, and the store times worth decoding
    (None: all). ``manifest_key`` is the link's history key."""

    cluster: str
    broker: str
    manifest_key: str
    link: Committed
    first: int
    end: int
    window: TimeWindow | None


def _dirs(fs: AbstractFileSystem, path: str) -> list[str]:
    try:
        entries: list[Mapping[str, Any]] = fs.ls(path, detail=True)
    except FileNotFoundError:
        return []
    return sorted(
        str(e["name"]).rstrip("/").rsplit("/", 1)[-1] for e in entries if e["type"] == "directory"
    )


def check_sources(options: ArchiveOptions) -> None:
    """Fail early on a cold root, cluster or named broker that is not there.

    Raises:
        ConfigError: one line naming what is missing and what is there instead.
    """
    fs, root = open_cold_filesystem(options.cold)
    cdir = cluster_dir(options.cluster)
    brokers = _dirs(fs, ColdLocation.path(root, cdir))
    if not brokers:
        clusters = [d.split("_", 1)[1] for d in _dirs(fs, root) if "_" in d]
        raise ConfigError(
            f"{SOURCE_NAME} data source: no cluster {options.cluster!r} in the cold store "
            f"(clusters there: {', '.join(clusters) or 'none'})",
            where=options.cold.url,
        )
    for broker in options.brokers:
        try:
            require_tiered(options.cold, options.cluster, broker, require_record=False)
        except NotTieredError as exc:  # the one check verify, restore, export, read make
            raise ConfigError(  # the data source's errors are ConfigErrors
                f"{SOURCE_NAME} data source: {exc.message}", where=options.cold.url
            ) from exc


def _manifest_keys(
    fs: AbstractFileSystem, root: str, prefix: str, pruning: Pruning
) -> list[ObjectKey]:
    """The MANIFEST keys under one broker's ``prefix`` whose topic and queue may match."""
    topics = pruning.topic.values
    bases = [prefix] if topics is None else [f"{prefix}/{t}" for t in sorted(topics) if _ok(t)]
    cut = len(root) + 1 if root else 0
    found: list[ObjectKey] = []
    for base in bases:
        for path in fs.find(ColdLocation.path(root, base)):
            key = str(path)[cut:]
            if f"/{SegmentKind.MANIFEST.value}/" not in key:
                continue
            try:
                parsed = parse_object_key(key)
            except InvalidNameError:
                continue  # not a segment object (the lease, quarantine, a temp file)
            if (
                parsed.kind is SegmentKind.MANIFEST
                and pruning.topic.admits(parsed.topic)
                and pruning.queue_id.admits(parsed.queue_id)
            ):
                found.append(parsed)
    return found


def _ok(topic: str) -> bool:
    try:
        validate_topic(topic)
    except InvalidNameError:
        return False  # no segment can have it: nothing to list
    return True


def _by_name(keys: Iterable[ObjectKey], pruning: Pruning) -> list[ObjectKey]:
    """Drop the segments whose offsets are out of range by their names alone."""
    lo, hi = pruning.queue_offset.lo, pruning.queue_offset.hi
    kept: list[ObjectKey] = []
    order = sorted(keys, key=lambda k: (k.broker, k.topic, k.queue_id, k.base_offset))
    for _, queue in groupby(order, key=lambda k: (k.broker, k.topic, k.queue_id)):
        segs = list(queue)
        for seg, nxt in zip(segs, [*segs[1:], None], strict=True):
            if hi is not None and seg.base_offset > hi:
                break
            # A segment ends at or before its successor's start.
            if lo is not None and nxt is not None and nxt.base_offset <= lo:
                continue
            kept.append(seg)
    return kept


def _read_manifests(
    fs: AbstractFileSystem, root: str, keys: list[ObjectKey]
) -> list[tuple[ObjectKey, bytes]]:
    """Each key's manifest bytes; a manifest gone since the listing (expired) is left out."""
    paths = {ColdLocation.path(root, k.key): k for k in keys}
    if not paths:
        return []
    got: Mapping[str, bytes | BaseException] = fs.cat(list(paths), on_error="return")
    out: list[tuple[ObjectKey, bytes]] = []
    for path, key in paths.items():
        data = got.get(path, FileNotFoundError(path))
        if isinstance(data, FileNotFoundError):
            continue
        if isinstance(data, BaseException):
            raise data
        out.append((key, data))
    return out


def plan(options: ArchiveOptions, pruning: Pruning) -> list[SegmentPartition]:
    """One partition per segment that may hold a row passing ``pruning``, in
    (broker, topic, queue, offset) order.

    Raises:
        ConfigError: the cold root is missing or unreachable.
        CorruptManifestError: a manifest that does not validate (naming its key).
    """
    if not pruning.cluster.admits(options.cluster):
        return []
    fs, root = open_cold_filesystem(options.cold)
    cdir = cluster_dir(options.cluster)
    brokers = options.brokers or tuple(_dirs(fs, ColdLocation.path(root, cdir)))
    keys: list[ObjectKey] = []
    for broker in brokers:
        if pruning.broker.admits(broker):
            keys += _manifest_keys(fs, root, f"{cdir}/{broker}", pruning)
    segments: dict[QueuePath, list[Committed]] = {}
    for key, data in _read_manifests(fs, root, _by_name(keys, pruning)):
        m = read_stored(data, key.key)
        if isinstance(m, Manifest):  # a fence marker is no segment
            segments.setdefault(m.queue, []).append(Committed.of_manifest(m))
    slices: dict[QueuePath, list[Committed | Withdrawal]] = {}
    for broker in brokers:
        if pruning.broker.admits(broker):
            for link in _slices(fs, root, options.cluster, broker, pruning):
                slices.setdefault(link.queue, []).append(link)
    parts: list[SegmentPartition] = []
    for queue in sorted({*segments, *slices}, key=lambda q: (q.broker, q.topic, q.queue_id)):
        for c in choose(segments.get(queue, []), slices.get(queue, [])).links:
            cut = pruning.cut(
                c.start_offset, c.end_offset, c.min_store_timestamp, c.max_store_timestamp
            )
            if cut is not None:
                part = SegmentPartition(
                    options.cluster, queue.broker, c.history_key, c, cut.first, cut.end, cut.window
                )
                parts.append(part)
    return parts


def _slices(
    fs: AbstractFileSystem, root: str, cluster: str, broker: str, pruning: Pruning
) -> list[Committed | Withdrawal]:
    """The slices (and fences' withdrawals) of the broker's batch objects whose topic and
    queue may match (one listing of ``_batches/``, one head read per batch; a batch
    collected meanwhile is left out)."""
    prefix = batch_prefix(cluster, broker)
    try:
        found: dict[str, Mapping[str, Any]] = fs.find(ColdLocation.path(root, prefix), detail=True)
    except FileNotFoundError:
        return []
    cut = len(root) + 1 if root else 0
    out: list[Committed | Withdrawal] = []
    for path, info in sorted(found.items()):
        key = str(path)[cut:]
        if parse_batch_key(key, prefix + "/") is None:
            continue
        try:
            head = read_batch(fs, str(path), key, int(info["size"]))
        except FileNotFoundError:
            continue
        out += [
            c
            for c in batch_links(head)
            if pruning.topic.admits(c.topic) and pruning.queue_id.admits(c.queue_id)
        ]
    return out
