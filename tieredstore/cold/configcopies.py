"""Versioned copies of a broker's ``config/`` files in its cold prefix (reading side).

The sidecar writes them (:mod:`tieredstore.dispatcher.maintenance.config_backup`); ``restore``
reads them back. Names and layout: :func:`tieredstore.cold.layout.config_copy_key`. Each copy is the
file's bytes exactly as the broker wrote them.
"""

from __future__ import annotations

from tieredstore.backends.base import Backend
from tieredstore.cold.layout import ConfigCopyKey, config_prefix, parse_config_copy_key
from tieredstore.errors import InvalidNameError

__all__ = ["list_copies", "pick_copy"]


async def list_copies(
    backend: Backend, cluster: str, broker: str, file: str
) -> list[ConfigCopyKey]:
    """Every stored copy of ``file``, oldest first; keys that do not parse are ignored."""
    out: list[ConfigCopyKey] = []
    for info in await backend.list(f"{config_prefix(cluster, broker)}/{file}/"):
        try:
            out.append(parse_config_copy_key(info.key))
        except InvalidNameError:
            continue  # a temp file or a stray object: never a copy
    return sorted(out)


def pick_copy(copies: list[ConfigCopyKey], at_ms: int | None) -> ConfigCopyKey | None:
    """The newest copy taken at or before ``at_ms`` (the newest of all when None)."""
    eligible = [c for c in copies if at_ms is None or c.stamp_ms <= at_ms]
    return max(eligible, default=None)
