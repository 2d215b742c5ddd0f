"""Applying a re-read configuration to a running sidecar (``SIGHUP``).

Only settings that are read afresh on every tick or pass, or only when a queue is first
seen, change live (:data:`LIVE_KEYS`, the keys declared ``live`` in
:mod:`tieredstore.settings.declaration`): log level and format, the group-commit limits, the
tick interval, the durability guard, the init policy (for queues seen from now on), the
topic filters, the upload bandwidth limit (the next chunk uploaded waits at the new rate)
and the retention periods (the next retention pass uses them). Everything
else — the stores, names, state dir, concurrency, batch size, lease timing, the retention
interval, GC, HTTP, shutdown deadline — is wired into objects built at start and needs a
restart: a reload keeps the running value and says so.

:func:`plan_reload` is pure; :func:`apply_reload` puts its result in force: it replaces
the content of the running sidecar's one
:class:`~tieredstore.settings.in_force.SettingsInForce`, once, and nothing else. Every
part that reads a live setting (the dispatcher's tick, discovery, the rounds, the
compactor, the retention pass, the upload pacing and its gauge, the replica reports)
reads it there at each use, so it takes the new value at its next tick, round or pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tieredstore.cli.sidecar.runtime import Runtime
from tieredstore.settings.loader import SETTINGS, Settings

__all__ = ["LIVE_KEYS", "ReloadPlan", "apply_reload", "plan_reload"]

#: The keys a ``SIGHUP`` applies at once (declared ``live`` in tieredstore/settings/declaration.py).
LIVE_KEYS: Final = frozenset(s.key for s in SETTINGS if s.live)


@dataclass(frozen=True, slots=True)
class ReloadPlan:
    """What a reload changes: the settings now in effect, what was applied, what was not.

    ``settings`` holds the new value of every applied key and the running value of every
    key that needs a restart.
    """

    settings: Settings
    applied: tuple[str, ...]
    needs_restart: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.applied or self.needs_restart)


def plan_reload(running: Settings, new: Settings) -> ReloadPlan:
    """Split the keys that differ between ``running`` and ``new`` (in SETTINGS order)."""
    differ = [s.key for s in SETTINGS if running.values[s.key] != new.values[s.key]]
    applied = tuple(k for k in differ if k in LIVE_KEYS)
    values = dict(running.values)
    sources = dict(running.sources)
    for key in applied:
        values[key] = new.values[key]
        sources[key] = new.sources.get(key, "reload")
    return ReloadPlan(
        Settings(values, sources),
        applied,
        tuple(k for k in differ if k not in LIVE_KEYS),
    )


def apply_reload(rt: Runtime, new: Settings) -> ReloadPlan:
    """Put what can change live in force in ``rt`` (its settings in force replaced once,
    only when some key applies); the keys that need a restart keep their running value.

    Logging is the caller's to reconfigure (``log.*`` in ``plan.applied``).
    """
    plan = plan_reload(rt.settings, new)
    if plan.applied:
        rt.in_force.replace(plan.settings)
    return plan
