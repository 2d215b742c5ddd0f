"""Queues a newer-format manifest stopped, remembered beside the catalogue.

The running sidecar keeps its STOPPED queues in memory (:data:`dispatcher.committer.Stopped`)
and writes them here, so that ``tieredstore status``, which reads the state directory and
never the sidecar, shows them too. The file belongs to the sidecar holding the state
directory's lock: it is emptied when the dispatcher starts (a restart tries each queue
once more: an upgraded sidecar may read the manifest) and rewritten, whole and atomically,
each time a queue stops. A missing file means no queue is stopped.

Format: a JSON object ``{"version": 1, "queues": [{"topic", "queue", "key"}, ...]}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from tieredstore.errors import ConfigError
from tieredstore.hot_store import QueueKey
from tieredstore.restore.files import replace_file

__all__ = ["FILE_NAME", "load", "save"]

#: The file's name in the state directory.
FILE_NAME: Final = "stopped-queues.json"


def save(path: Path, stopped: Mapping[QueueKey, str]) -> None:
    """Write ``stopped`` to ``path`` whole (:func:`~tieredstore.restore.files.replace_file`)."""
    doc = {
        "version": 1,
        "queues": [
            {"topic": q.topic, "queue": q.queue_id, "key": key}
            for q, key in sorted(
                stopped.items(), key=lambda item: (item[0].topic, item[0].queue_id)
            )
        ],
    }
    replace_file(path, json.dumps(doc, indent=1).encode())


def load(path: Path) -> dict[QueueKey, str]:
    """The stopped queues saved at ``path`` (none when it does not exist).

    Raises ConfigError, naming the file, when it is not what :func:`save` writes.
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"cannot read the stopped queues ({path}): {exc}") from exc
    try:
        return {QueueKey(str(q["topic"]), int(q["queue"])): str(q["key"]) for q in doc["queues"]}
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"not a stopped-queues file ({path}): {exc!r}") from exc
