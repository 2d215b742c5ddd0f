"""Which topics the dispatcher tiers: the core rules (:mod:`tieredstore.topic_rules`)
built from the settings."""

from __future__ import annotations

from tieredstore.config import Settings
from tieredstore.topic_rules import TopicRules

__all__ = ["TopicFilter"]


class TopicFilter(TopicRules):
    """:class:`~tieredstore.topic_rules.TopicRules` read from ``tiering.*`` settings."""

    __slots__ = ()

    @classmethod
    def from_settings(cls, settings: Settings) -> TopicFilter:
        return cls(
            include=tuple(settings.tiering.include_topics),
            exclude=tuple(settings.tiering.exclude_topics),
            system=tuple(settings.tiering.system_topics),
            include_retry=bool(settings.tiering.include_retry),
            include_dlq=bool(settings.tiering.include_dlq),
        )

    def rules(self) -> TopicRules:
        """The plain rules (what the tiering record stores)."""
        return TopicRules(
            self.include, self.exclude, self.system, self.include_retry, self.include_dlq
        )
