"""Putting the broker's ``config/`` back into a restored store.

For each file the sidecar backs up (:data:`~tieredstore.cold.layout.CONFIG_FILES`) the copy
current at ``--config-at`` (default: the newest) is written to ``<out>/config/``:

* ``topics.json`` and ``subscriptionGroup.json`` byte for byte. If a restored queue's
  topic is missing from ``topics.json`` (created after the last copy) or has fewer queues
  than were restored, the topic is added or widened (read and write queues = highest
  restored queue id + 1, permission 6) and the file is written anew in the broker's
  dialect. Without any copy, ``topics.json`` is generated from the restored queues.
* ``consumerOffset.json``: every ``<topic>@<group>`` offset is clamped into what the
  restored store holds of that queue, ``[min, max]`` (``[0, 0]`` for a queue with no
  restored message): a group resumes where it was, or at the nearest restored offset.
* ``delayOffset.json``: each delay level's offset is clamped likewise into the
  ``SCHEDULE_TOPIC_XXXX`` queue of that level (queue id = level - 1).

A file whose offsets all fit is written byte for byte; otherwise in the broker's dialect
(:mod:`tieredstore.formats.fastjson_dialect`), other fields unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from tieredstore.backends.base import Backend
from tieredstore.cold.configcopies import list_copies, pick_copy
from tieredstore.cold.layout import CONFIG_FILES
from tieredstore.errors import CorruptDataError
from tieredstore.formats import fastjson_dialect
from tieredstore.formats.topics import TopicConfig, encode_topics
from tieredstore.restore.journal import Journal, RestoreParams

__all__ = ["clamp_consumer_offsets", "clamp_delay_offsets", "restore_configs", "widen_topics"]

log = logging.getLogger(__name__)

SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
Ranges = dict[tuple[str, int], tuple[int, int]]


def _ranges(journal: Journal) -> Ranges:
    return {k: (q.start, q.next) for k, q in journal.queues.items()}


def _clamp(offset: object, rng: tuple[int, int]) -> object:
    if isinstance(offset, bool) or not isinstance(offset, int):
        return offset  # not an offset we understand: left as the broker wrote it
    return min(max(offset, rng[0]), rng[1])


def _table(doc: Any, name: str, where: str) -> dict[Any, Any]:
    table = doc.get("offsetTable") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        raise CorruptDataError(f"{name} has no offsetTable object", where=where)
    return table


def clamp_consumer_offsets(data: bytes, ranges: Ranges, *, where: str) -> bytes:
    """``consumerOffset.json`` with every offset inside its restored queue's range."""
    doc = fastjson_dialect.loads(data, where=where)
    changed = False
    for name, offsets in _table(doc, "consumerOffset.json", where).items():
        topic = str(name).rsplit("@", 1)[0]
        if not isinstance(offsets, dict):
            continue
        for qid, offset in list(offsets.items()):
            new = _clamp(offset, ranges.get((topic, int(qid)), (0, 0)))
            changed |= new != offset
            offsets[qid] = new
    return fastjson_dialect.dumps(doc) if changed else data


def clamp_delay_offsets(data: bytes, ranges: Ranges, *, where: str) -> bytes:
    """``delayOffset.json`` with each level's offset inside its schedule queue's range."""
    doc = fastjson_dialect.loads(data, where=where)
    table = _table(doc, "delayOffset.json", where)
    changed = False
    for level, offset in list(table.items()):
        new = _clamp(offset, ranges.get((SCHEDULE_TOPIC, int(level) - 1), (0, 0)))
        changed |= new != offset
        table[level] = new
    return fastjson_dialect.dumps(doc) if changed else data


def widen_topics(data: bytes, ranges: Ranges, *, where: str) -> bytes:
    """``topics.json`` holding every restored queue (unchanged bytes if it already does)."""
    doc = fastjson_dialect.loads(data, where=where)
    table = doc.get("topicConfigTable") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        raise CorruptDataError("topics.json has no topicConfigTable object", where=where)
    need = _queue_counts(ranges)
    changed = False
    for topic, n in sorted(need.items()):
        entry = table.get(topic)
        if not isinstance(entry, dict):
            table[topic] = TopicConfig(topic, n, n).to_json()
            changed = True
            continue
        for field in ("readQueueNums", "writeQueueNums"):
            if not isinstance(entry.get(field), int) or entry[field] < n:
                entry[field] = n
                changed = True
    return fastjson_dialect.dumps(doc) if changed else data


def _queue_counts(ranges: Ranges) -> dict[str, int]:
    counts: dict[str, int] = {}
    for topic, qid in ranges:
        counts[topic] = max(counts.get(topic, 0), qid + 1)
    return counts


def generated_topics(ranges: Ranges) -> bytes:
    """A ``topics.json`` for the restored queues alone."""
    return encode_topics(
        {t: TopicConfig(t, n, n) for t, n in sorted(_queue_counts(ranges).items())}
    )


_ADJUST: Final[dict[str, Callable[..., bytes]]] = {
    "topics.json": widen_topics,
    "consumerOffset.json": clamp_consumer_offsets,
    "delayOffset.json": clamp_delay_offsets,
}


async def restore_configs(
    backend: Backend, params: RestoreParams, out: Path, journal: Journal
) -> tuple[str, ...]:
    """Write ``<out>/config/`` (see the module docstring); returns the files written."""
    config = out / "config"
    config.mkdir(parents=True, exist_ok=True)
    ranges = _ranges(journal)
    written: list[str] = []
    for name in CONFIG_FILES if params.restore_config else ():
        copy = pick_copy(
            await list_copies(backend, params.cluster, params.broker, name), params.config_at
        )
        if copy is None:
            continue
        data = await backend.read(copy.key)
        adjust = _ADJUST.get(name)
        if adjust is not None:
            data = adjust(data, ranges, where=copy.key)
        (config / name).write_bytes(data)
        written.append(name)
        log.info("restored config/%s from %s", name, copy.key)
    if "topics.json" not in written:
        (config / "topics.json").write_bytes(generated_topics(ranges))
        written.append("topics.json (generated)")
    return tuple(written)
