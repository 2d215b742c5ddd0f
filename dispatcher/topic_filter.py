"""Which topics the dispatcher tiers: include/exclude globs and system topics."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass

from tieredstore.config import Settings

__all__ = ["TopicFilter"]


@dataclass(frozen=True, slots=True)
class TopicFilter:
    """Decides per topic; patterns are shell globs matched case-sensitively.

    Order: an explicit exclude wins; then ``%RETRY%``/``%DLQ%`` topics need their
    switch; then system topics are skipped unless explicitly included; then, when an
    include list is given, only matching topics pass.
    """

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    system: tuple[str, ...] = ()
    include_retry: bool = False
    include_dlq: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> TopicFilter:
        return cls(
            include=tuple(settings["tiering.include_topics"]),
            exclude=tuple(settings["tiering.exclude_topics"]),
            system=tuple(settings["tiering.system_topics"]),
            include_retry=bool(settings["tiering.include_retry"]),
            include_dlq=bool(settings["tiering.include_dlq"]),
        )

    @staticmethod
    def _any(topic: str, patterns: Iterable[str]) -> bool:
        return any(fnmatch.fnmatchcase(topic, p) for p in patterns)

    def accepts(self, topic: str) -> bool:
        if self._any(topic, self.exclude):
            return False
        if topic.startswith("%RETRY%"):
            return self.include_retry
        if topic.startswith("%DLQ%"):
            return self.include_dlq
        if self._any(topic, self.system):
            return self._any(topic, self.include)
        return not self.include or self._any(topic, self.include)
