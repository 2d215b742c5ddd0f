"""Which topics the dispatcher tiers: the core rules (:mod:`tieredstore.topic_rules`)
built from the settings."""

from __future__ import annotations

from tieredstore.settings.loader import TieringSettings
from tieredstore.topic_rules import TopicRules

__all__ = ["TopicFilter"]


class TopicFilter(TopicRules):
    """:class:`~tieredstore.topic_rules.TopicRules` read from ``tiering.*`` settings."""

    __slots__ = ()

    @classmethod
    def of(cls, tiering: TieringSettings) -> TopicFilter:
        """The filter of ``tiering``'s topic settings."""
        return cls(
            include=tiering.include_topics,
            exclude=tiering.exclude_topics,
            system=tiering.system_topics,
            include_retry=tiering.include_retry,
            include_dlq=tiering.include_dlq,
        )

    def rules(self) -> TopicRules:
        """The plain rules (what the tiering record stores)."""
        return TopicRules(
            self.include, self.exclude, self.system, self.include_retry, self.include_dlq
        )
