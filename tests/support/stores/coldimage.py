"""Tier a synthetic hot store into cold objects with the real segment codec (no sidecar),
and age them the ways the verifier must notice.

:func:`tier` cuts each queue into fixed-size segments (``tieredstore.cold.segment``) and
returns a :class:`ColdImage` — object key → bytes, plus the manifests per queue — that
:func:`write_local` / :func:`write_fs` store under a cold root.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.oracle import build_segment
from tieredstore.cold.layout import QueuePath
from tieredstore.cold.manifest import Manifest
from tieredstore.cold.provenance import QueueInit, RuleEpoch, TieringRecord
from tieredstore.cold.segment import Segment
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.topic_rules import TopicRules

CREATED_AT_MS = 1_700_000_000_000


@dataclass
class ColdImage:
    """Cold objects (key → bytes) and each queue's manifests in offset order."""

    objects: dict[str, bytes] = field(default_factory=dict)
    manifests: dict[QueueKey, list[Manifest]] = field(default_factory=dict)

    def add(self, segment: Segment) -> None:
        m = segment.manifest
        self.objects[m.commit_log_key] = segment.commit_log
        self.objects[m.consume_queue_key] = segment.consume_queue
        self.objects[m.key] = m.to_json()
        self.manifests.setdefault(QueueKey(m.topic, m.queue_id), []).append(m)


def build(
    hot: HotStore,
    queue: QueueKey,
    start: int,
    end: int,
    cl_base: int,
    *,
    cluster: str = CLUSTER,
    broker: str = BROKER,
) -> Segment:
    """One segment of ``queue`` covering hot offsets ``[start, end)`` at ``cl_base``."""
    units = hot.read_units(queue.topic, queue.queue_id, start, end)
    records = hot.read_records_bytes(units["commitlog_offset"], units["size"])
    return build_segment(
        QueuePath(cluster, broker, queue.topic, queue.queue_id),
        start_offset=start,
        cl_base=cl_base,
        records=records,
        units=units,
        writer_id="test-writer",
        lease_epoch=1,
        created_at_ms=CREATED_AT_MS,
    )


def tiering_record(
    rules: TopicRules | None = None, *, cluster: str = CLUSTER, broker: str = BROKER
) -> TieringRecord:
    """The broker's tiering record a sidecar tiering by ``rules`` (default: every topic)
    would have written."""
    epoch = RuleEpoch(CREATED_AT_MS, rules or TopicRules(), "test-writer", 1)
    return TieringRecord(cluster, broker, (epoch,))


def init_record(
    queue: QueueKey,
    init_offset: int,
    policy: str = "earliest",
    *,
    cluster: str = CLUSTER,
    broker: str = BROKER,
) -> QueueInit:
    """The init record of ``queue`` as the sidecar writes it when it initialises it."""
    return QueueInit.new(
        QueuePath(cluster, broker, queue.topic, queue.queue_id), init_offset, policy,
        created_at_ms=CREATED_AT_MS, writer_id="test-writer", lease_epoch=1,
    )  # fmt: skip


def tier(
    hot_root: Path,
    *,
    segment_messages: int,
    records: bool = True,
    cluster: str = CLUSTER,
    broker: str = BROKER,
) -> ColdImage:
    """Tier every queue of the hot store from hot min to hot max.

    With ``records`` (the default) the image also holds what a sidecar writes besides
    segments: the broker's tiering record (every topic) and each queue's init record
    (``earliest``, at the hot min); without, it is a store an older sidecar wrote.
    ``cluster``/``broker`` name the broker prefix (a fleet is several).
    """
    hot = HotStore(hot_root)
    image = ColdImage()
    if records:
        rec = tiering_record(cluster=cluster, broker=broker)
        image.objects[rec.key] = rec.to_json()
    for q in hot.queues():
        rng = hot.queue_range(q.topic, q.queue_id)
        if records:
            init = init_record(q, rng.min, cluster=cluster, broker=broker)
            image.objects[init.key] = init.to_json()
        cl_base = 0
        for start in range(rng.min, rng.max, segment_messages):
            end = min(start + segment_messages, rng.max)
            segment = build(hot, q, start, end, cl_base, cluster=cluster, broker=broker)
            image.add(segment)
            cl_base = segment.manifest.cl_end
    return image


def write_local(image: ColdImage, root: Path) -> None:
    """Store ``image`` under the local directory ``root`` (the POSIX layout: key = path)."""
    for key, data in image.objects.items():
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def write_fs(image: ColdImage, url: str, storage_options: Mapping[str, Any]) -> None:
    """Store ``image`` under any fsspec URL (e.g. an S3 bucket on moto)."""
    fs, root = fsspec.core.url_to_fs(url, **dict(storage_options))
    fs.pipe({f"{root.rstrip('/')}/{k}": v for k, v in image.objects.items()})


def age(path: Path, seconds: float) -> None:
    """Set a file's mtime ``seconds`` into the past."""
    st = path.stat()
    os.utime(path, (st.st_atime - seconds, st.st_mtime - seconds))
