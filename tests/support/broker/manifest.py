"""What a broker run produced: the facts a store written by it must agree with.

The live broker tests build one in memory; ``make_golden`` writes one next to the
golden store (``tests/data/golden_store_manifest.json``) so the offline tests run the
same checks without Java.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.broker.rocketmq import BrokerOffsets
from tests.support.broker.traffic import ExpectedMessage

__all__ = ["Manifest"]

FORMAT = "tieredstore-golden-manifest/1"


@dataclass(frozen=True, slots=True)
class Manifest:
    """A broker run: its settings, time window, messages and final per-queue offsets.

    ``window_start_ms``/``window_end_ms`` bracket every store timestamp the broker can
    have written (start: before the first send; end: after the broker stopped or the
    last check). ``broker_offsets`` is what the broker reported for each queue once the
    traffic had settled.
    """

    rocketmq_version: str
    store_host: str
    commitlog_file_size: int
    cq_file_size: int
    retry_group: str
    window_start_ms: int
    window_end_ms: int
    messages: tuple[ExpectedMessage, ...]
    broker_offsets: tuple[BrokerOffsets, ...]

    def to_json(self) -> str:
        doc = {
            "format": FORMAT,
            "rocketmqVersion": self.rocketmq_version,
            "storeHost": self.store_host,
            "commitlogFileSize": self.commitlog_file_size,
            "cqFileSize": self.cq_file_size,
            "retryGroup": self.retry_group,
            "windowStartMs": self.window_start_ms,
            "windowEndMs": self.window_end_ms,
            "brokerOffsets": [
                {"topic": o.topic, "queueId": o.queue_id, "min": o.min, "max": o.max}
                for o in self.broker_offsets
            ],
            "messages": [m.to_json() for m in self.messages],
        }
        # One line per queue and per message: readable diffs, a modest file in git.
        lines = []
        for key, value in doc.items():
            if isinstance(value, list):
                items = ",\n".join(f"  {json.dumps(v, ensure_ascii=False)}" for v in value)
                lines.append(f" {json.dumps(key)}: [\n{items}\n ]")
            else:
                lines.append(f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}")
        return "{\n" + ",\n".join(lines) + "\n}\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} document")
        offsets: list[Mapping[str, object]] = doc["brokerOffsets"]
        return cls(
            rocketmq_version=str(doc["rocketmqVersion"]),
            store_host=str(doc["storeHost"]),
            commitlog_file_size=int(doc["commitlogFileSize"]),
            cq_file_size=int(doc["cqFileSize"]),
            retry_group=str(doc["retryGroup"]),
            window_start_ms=int(doc["windowStartMs"]),
            window_end_ms=int(doc["windowEndMs"]),
            messages=tuple(ExpectedMessage.from_json(m) for m in doc["messages"]),
            broker_offsets=tuple(
                BrokerOffsets(str(o["topic"]), int(str(o["queueId"])), int(str(o["min"])),
                              int(str(o["max"])))
                for o in offsets
            ),
        )  # fmt: skip

    @classmethod
    def load(cls, path: Path) -> Manifest:
        return cls.from_json(path.read_text(encoding="utf-8"))

    def dump(self, path: Path) -> None:
        path.write_text(self.to_json(), encoding="utf-8")
