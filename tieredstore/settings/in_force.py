"""The settings in force: the one holder a running sidecar's parts read their settings from.

A running sidecar builds one :class:`SettingsInForce` from the validated settings it
started with and hands it to every part that reads a setting a ``SIGHUP`` may change
(the keys declared ``live`` in :mod:`tieredstore.settings.declaration`): the dispatcher's tick,
discovery, the rounds, the compactor, the retention pass, the upload pacing and its
gauge. Those parts read the value here each time they use it (per tick, per round, per
pass, per upload), never a copy taken when they were built; a reload calls
:meth:`SettingsInForce.replace` once and the parts see the new values at their next use.

The holder validates nothing: what it is given was validated by the loader, and which
keys a reload may change (the others keep their running value) is decided before
(:func:`tieredstore.cli.sidecar.reload.plan_reload`). Replacing is one reference swap on
the event loop's thread, so a reader sees either the old settings object or the new
one, never a mix; a part that needs several values to agree within one use reads
:attr:`SettingsInForce.settings` (or one section) once and uses that object.
"""

from __future__ import annotations

from tieredstore.settings.declaration import RetentionSettings, TieringSettings
from tieredstore.settings.loader import Settings

__all__ = ["SettingsInForce"]


class SettingsInForce:
    """Holds the current, frozen :class:`~tieredstore.settings.loader.Settings`."""

    __slots__ = ("_settings",)

    def __init__(self, settings: Settings) -> None:
        self._settings = settings

    @property
    def settings(self) -> Settings:
        """The settings in force now."""
        return self._settings

    @property
    def tiering(self) -> TieringSettings:
        """The ``[tiering]`` section in force now."""
        return self._settings.tiering

    @property
    def retention(self) -> RetentionSettings:
        """The ``[retention]`` section in force now."""
        return self._settings.retention

    def replace(self, settings: Settings) -> None:
        """Put ``settings`` in force (one swap; every part reads them at its next use)."""
        self._settings = settings
