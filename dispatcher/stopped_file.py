"""Queues a newer-format manifest stopped, remembered beside the catalogue.

The running sidecar keeps its STOPPED queues in memory
(:data:`tieredstore.dispatcher.shared_state.Stopped`)
and writes them here, so that ``tieredstore status``, which reads the state directory and
never the sidecar, shows them too. The file belongs to the sidecar holding the state
directory's lock: it is emptied when the dispatcher starts (a restart tries each queue
once more: an upgraded sidecar may read the manifest) and rewritten, whole and atomically,
each time a queue stops. A missing file means no queue is stopped.

It also holds the queues DEGRADED by cold damage found at start (the ``degraded`` list,
:func:`tieredstore.dispatcher.tiering.cold_writer.report_damage`).

Format: a JSON object ``{"version": 2, "queues": [{"topic", "queue", "reason"}, ...],
"degraded": [...]}``
(the reason is one line naming the key or offset that stopped the queue; version 1
files, with a ``key`` of a newer-format manifest instead, are still read).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from tieredstore.errors import ConfigError
from tieredstore.hot.store import QueueKey
from tieredstore.restore.files import replace_file

__all__ = ["FILE_NAME", "load", "load_degraded", "save"]

#: The file's name in the state directory.
FILE_NAME: Final = "stopped-queues.json"


def save(
    path: Path, stopped: Mapping[QueueKey, str], degraded: Mapping[QueueKey, str] | None = None
) -> None:
    """Write ``stopped`` (and the ``degraded`` queues: cold damage found at start,
    :func:`tieredstore.dispatcher.tiering.cold_writer.report_damage`) to ``path`` whole
    (:func:`~tieredstore.restore.files.replace_file`)."""
    doc = {"version": 2, "queues": _entries(stopped), "degraded": _entries(degraded or {})}
    replace_file(path, json.dumps(doc, indent=1).encode())


def _entries(queues: Mapping[QueueKey, str]) -> list[dict[str, object]]:
    return [
        {"topic": q.topic, "queue": q.queue_id, "reason": reason}
        for q, reason in sorted(queues.items(), key=lambda item: (item[0].topic, item[0].queue_id))
    ]


def load(path: Path) -> dict[QueueKey, str]:
    """The stopped queues saved at ``path``, with their reasons (none when it does not
    exist).

    Raises ConfigError, naming the file, when it is not what :func:`save` writes.
    """
    return _load(path, "queues")


def load_degraded(path: Path) -> dict[QueueKey, str]:
    """The degraded queues saved at ``path``, with their reasons (as :func:`load`)."""
    return _load(path, "degraded")


def _load(path: Path, field: str) -> dict[QueueKey, str]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"cannot read the stopped queues ({path}): {exc}") from exc
    try:
        return {QueueKey(str(q["topic"]), int(q["queue"])): _reason(q) for q in doc.get(field, [])}
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"not a stopped-queues file ({path}): {exc!r}") from exc


def _reason(entry: dict[str, object]) -> str:
    """A queue entry's reason (version 1 saved only a newer-format manifest's key)."""
    if "reason" in entry:
        return str(entry["reason"])
    return f"newer-format manifest at {entry['key']}"
