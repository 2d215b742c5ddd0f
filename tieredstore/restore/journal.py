"""The restore journal: ``<out>/tieredstore-restore.json``, what a restore has made durable.

It records the restore's parameters and, at each commit, how far it got: the commitlog
end and every queue's restored range ``[start, next)`` (``closed`` once the time window
ended the queue). A commit is written only after the data it describes is fsynced
(temp file, fsync, rename, fsync of the directory), so after a crash or an interrupt the
journal never claims more than the disk holds. A rerun with the same parameters resumes
from the last commit: bytes written after it are discarded and written again.

When the restore finishes the journal says ``complete`` and stays in the store: it
records what the store was built from, which ``restore --check`` verifies.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from tieredstore.errors import CorruptDataError, StoreError
from tieredstore.restore.files import replace_file

__all__ = ["JOURNAL_NAME", "Journal", "JournalState", "QueueProgress", "RestoreParams"]

JOURNAL_NAME: Final = "tieredstore-restore.json"
_FORMAT: Final = 1


class JournalState(enum.Enum):
    RUNNING = "running"
    COMPLETE = "complete"


@dataclass(frozen=True, slots=True)
class RestoreParams:
    """Everything that decides the bytes a restore writes; a resume must match it."""

    cold_url: str
    cluster: str
    broker: str
    topics: tuple[str, ...]
    since: int | None
    until: int | None
    commitlog_file_size: int
    cq_file_size: int
    index_hash_slots: int
    index_max_entries: int
    write_index: bool
    restore_config: bool
    config_at: int | None

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["topics"] = list(self.topics)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> RestoreParams:
        values = dict(doc)
        values["topics"] = tuple(values["topics"])
        return cls(**values)


@dataclass(slots=True)
class QueueProgress:
    """One queue's durable restored range ``[start, next)``."""

    topic: str
    queue_id: int
    start: int
    next: int
    closed: bool = False


@dataclass(slots=True)
class Journal:
    """The journal's content; :meth:`save` commits it, :meth:`load` reads it back."""

    params: RestoreParams
    state: JournalState = JournalState.RUNNING
    commitlog_base: int = 0
    commitlog_end: int = 0
    queues: dict[tuple[str, int], QueueProgress] = field(default_factory=dict)
    segments: int = 0
    messages: int = 0
    restored_bytes: int = 0
    index_entries: int = 0
    max_store_timestamp: int = 0

    def to_json(self) -> bytes:
        doc = {
            "format": _FORMAT,
            "state": self.state.value,
            "params": self.params.to_json(),
            "commitlog_base": self.commitlog_base,
            "commitlog_end": self.commitlog_end,
            "segments": self.segments,
            "messages": self.messages,
            "bytes": self.restored_bytes,
            "index_entries": self.index_entries,
            "max_store_timestamp": self.max_store_timestamp,
            "queues": [asdict(q) for _, q in sorted(self.queues.items())],
        }
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def load(cls, path: Path) -> Journal:
        """Read a journal; CorruptDataError (naming the file) if it does not parse."""
        try:
            doc = json.loads(path.read_bytes())
            if doc.get("format") != _FORMAT:
                raise ValueError(f"unknown journal format {doc.get('format')!r}")
            queues = [QueueProgress(**q) for q in doc["queues"]]
            return cls(
                params=RestoreParams.from_json(doc["params"]),
                state=JournalState(doc["state"]),
                commitlog_base=int(doc["commitlog_base"]),
                commitlog_end=int(doc["commitlog_end"]),
                queues={(q.topic, q.queue_id): q for q in queues},
                segments=int(doc["segments"]),
                messages=int(doc["messages"]),
                restored_bytes=int(doc["bytes"]),
                index_entries=int(doc["index_entries"]),
                max_store_timestamp=int(doc["max_store_timestamp"]),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CorruptDataError(
                f"restore journal is unreadable: {exc}", where=str(path)
            ) from exc

    def save(self, path: Path) -> None:
        """Commit atomically: temp file, fsync, rename, fsync the directory."""
        try:
            replace_file(path, self.to_json())
        except OSError as exc:
            raise StoreError(
                f"cannot write the restore journal: {exc.strerror}", where=str(path)
            ) from exc
