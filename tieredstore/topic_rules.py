"""Which topics the sidecar tiers: include/exclude globs, system, retry and DLQ topics.

One copy of the rules, shared by the dispatcher (which topics to tier) and the verifier
(which hot data must be in cold, read back from the broker's tiering record,
:mod:`tieredstore.cold.provenance`). :meth:`TopicRules.decide` names the rule that decided,
so a report can say *why* a topic is not tiered.

Order: an explicit exclude wins; then ``%RETRY%``/``%DLQ%`` topics need their switch;
then system topics are skipped unless explicitly included; then, when an include list
is given, only matching topics pass.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["TopicDecision", "TopicRules"]


@dataclass(frozen=True, slots=True)
class TopicDecision:
    """Whether a topic is tiered, and the rule that says so (for reports)."""

    tiered: bool
    rule: str


@dataclass(frozen=True, slots=True)
class TopicRules:
    """The topic filter; patterns are shell globs matched case-sensitively."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    system: tuple[str, ...] = ()
    include_retry: bool = False
    include_dlq: bool = False

    @staticmethod
    def _match(topic: str, patterns: Iterable[str]) -> str | None:
        return next((p for p in patterns if fnmatch.fnmatchcase(topic, p)), None)

    def decide(self, topic: str) -> TopicDecision:
        """Whether ``topic`` is tiered and by which rule (see the module docstring)."""
        hit = self._match(topic, self.exclude)
        if hit is not None:
            return TopicDecision(False, f"exclude_topics {hit!r}")
        if topic.startswith("%RETRY%"):
            return TopicDecision(self.include_retry, f"include_retry = {self.include_retry}")
        if topic.startswith("%DLQ%"):
            return TopicDecision(self.include_dlq, f"include_dlq = {self.include_dlq}")
        sys_hit = self._match(topic, self.system)
        inc_hit = self._match(topic, self.include)
        if sys_hit is not None:
            if inc_hit is not None:
                return TopicDecision(True, f"include_topics {inc_hit!r}")
            return TopicDecision(False, f"system_topics {sys_hit!r}")
        if not self.include:
            return TopicDecision(True, "include_topics empty (all topics)")
        if inc_hit is not None:
            return TopicDecision(True, f"include_topics {inc_hit!r}")
        return TopicDecision(False, "include_topics (no pattern matches)")

    def accepts(self, topic: str) -> bool:
        return self.decide(topic).tiered

    def to_doc(self) -> dict[str, Any]:
        """The rules as a JSON-ready dict (:meth:`from_doc` inverts it)."""
        return {
            "include_topics": list(self.include),
            "exclude_topics": list(self.exclude),
            "system_topics": list(self.system),
            "include_retry": self.include_retry,
            "include_dlq": self.include_dlq,
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> TopicRules:
        """Rules from :meth:`to_doc`'s dict; ValueError on a field of the wrong shape."""

        def globs(name: str) -> tuple[str, ...]:
            value = doc[name]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{name} is not a list of strings")
            return tuple(value)

        def flag(name: str) -> bool:
            value = doc[name]
            if not isinstance(value, bool):
                raise ValueError(f"{name} is not a boolean")
            return value

        if set(doc) != set(cls().to_doc()):
            raise ValueError(f"topic rules have fields {sorted(doc)}, expected "
                             f"{sorted(cls().to_doc())}")  # fmt: skip
        return cls(
            globs("include_topics"), globs("exclude_topics"), globs("system_topics"),
            flag("include_retry"), flag("include_dlq"),
        )  # fmt: skip
