"""``config/topics.json``: the broker's topic configuration table."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tieredstore.errors import CorruptDataError, StoreNotFoundError

__all__ = ["TopicConfig", "decode_topics", "encode_topics", "read_topics"]


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One entry of ``topicConfigTable``."""

    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = 6
    order: bool = False
    attributes: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return the entry as the broker writes it."""
        return {
            "topicName": self.topic_name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm,
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0,
            "order": self.order,
            "attributes": dict(self.attributes),
        }


def _entry(name: str, raw: object, where: str) -> TopicConfig:
    if not isinstance(raw, dict):
        raise CorruptDataError(f"topic {name!r} is not an object", where=where)
    try:
        return TopicConfig(
            topic_name=str(raw.get("topicName", name)),
            read_queue_nums=int(raw["readQueueNums"]),
            write_queue_nums=int(raw["writeQueueNums"]),
            perm=int(raw.get("perm", 6)),
            order=bool(raw.get("order", False)),
            attributes={str(k): str(v) for k, v in (raw.get("attributes") or {}).items()},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptDataError(f"topic {name!r} has a bad field: {exc}", where=where) from exc


def decode_topics(data: bytes | str, *, where: str = "topics.json") -> dict[str, TopicConfig]:
    """Decode the JSON document; returns topic name → config."""
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptDataError(f"topics.json is not valid JSON: {exc}", where=where) from exc
    table = doc.get("topicConfigTable") if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        raise CorruptDataError("topics.json has no topicConfigTable object", where=where)
    return {str(name): _entry(str(name), raw, where) for name, raw in table.items()}


def encode_topics(topics: Mapping[str, TopicConfig]) -> bytes:
    """Encode a table the way the broker lays it out (pretty-printed JSON)."""
    doc = {
        "dataVersion": {"counter": len(topics), "stateVersion": 0, "timestamp": 0},
        "topicConfigTable": {name: cfg.to_json() for name, cfg in topics.items()},
    }
    return json.dumps(doc, indent=1).encode()


def read_topics(path: Path) -> dict[str, TopicConfig]:
    """Read ``config/topics.json``; a missing file gives an empty table.

    A broker that never created a topic by config (auto-created topics are persisted
    lazily) may have no file yet; the consume-queue directories still list its queues.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise StoreNotFoundError(
            f"cannot read topics.json: {exc.strerror}", where=str(path)
        ) from exc
    return decode_topics(data, where=str(path))
