"""Sidecar configuration: one TOML file, ``TIEREDSTORE_*`` environment overrides, flags.

Precedence (highest first): command-line flags, environment variables, the TOML file,
defaults. Every key is declared once, as a typed field of its section in
:mod:`tieredstore.settings.declaration` (parser, default, help, reload); the value syntax is
:mod:`tieredstore.settings.values`. Each key ``section.name`` maps to the environment
variable ``TIEREDSTORE_SECTION_NAME`` (e.g. ``cold.url`` → ``TIEREDSTORE_COLD_URL``).
Code reads a setting through its typed section: ``settings.cold.url``,
``settings.tiering.concurrency``.

Validation happens once, at start, and fails with one line naming the key and its
source (file, env var or flag): unknown keys, wrong types, out-of-range values, bad
URLs. Checks that touch the outside world (store readable, state dir writable) are in
:func:`check_environment`, which the ``run`` command calls before doing any work.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Final

from tieredstore.errors import ConfigError
from tieredstore.settings.declaration import (
    SECTIONS,
    SETTINGS,
    ColdSettings,
    ConfigBackupSettings,
    GcSettings,
    GroupSettings,
    HttpSettings,
    LeaseSettings,
    LogSettings,
    ReadsSettings,
    RetentionSettings,
    Setting,
    ShutdownSettings,
    StateSettings,
    StoreSettings,
    TieringSettings,
)
from tieredstore.settings.values import (
    GuardMode,
    InitPolicy,
    InitStart,
    parse_duration,
    parse_size,
)

# The declaration's names that code outside the configuration uses, re-exported; the
# other section classes are tieredstore.settings.declaration's.
__all__ = [
    "SECTIONS",
    "SETTINGS",
    "GuardMode",
    "InitPolicy",
    "InitStart",
    "Setting",
    "Settings",
    "TieringSettings",
    "check_environment",
    "load_settings",
    "parse_duration",
    "parse_size",
]

_BY_KEY: Final = {s.key: s for s in SETTINGS}


@dataclass(frozen=True, slots=True)
class Settings:
    """Validated settings, a typed attribute per section (``settings.tiering.concurrency``).

    ``values`` maps every key of :data:`SETTINGS` to its value (for code that goes over
    every key: reload, the redacted log line); ``sources`` says where each came from.
    """

    values: Mapping[str, Any]
    sources: Mapping[str, str] = field(default_factory=dict)
    store: StoreSettings = field(init=False, compare=False, repr=False)
    cold: ColdSettings = field(init=False, compare=False, repr=False)
    state: StateSettings = field(init=False, compare=False, repr=False)
    tiering: TieringSettings = field(init=False, compare=False, repr=False)
    lease: LeaseSettings = field(init=False, compare=False, repr=False)
    group: GroupSettings = field(init=False, compare=False, repr=False)
    retention: RetentionSettings = field(init=False, compare=False, repr=False)
    config_backup: ConfigBackupSettings = field(init=False, compare=False, repr=False)
    gc: GcSettings = field(init=False, compare=False, repr=False)
    http: HttpSettings = field(init=False, compare=False, repr=False)
    reads: ReadsSettings = field(init=False, compare=False, repr=False)
    log: LogSettings = field(init=False, compare=False, repr=False)
    shutdown: ShutdownSettings = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name, section in SECTIONS.items():
            object.__setattr__(self, name, section.of(self.values))

    def retention_for(self, topic: str) -> float:
        """Retention in seconds for ``topic`` (per-topic override or the default)."""
        return float(self.retention.topics.get(topic, self.retention.default))

    def deprecations(self) -> list[str]:
        """One line per deprecated key set anywhere but by default (for the log)."""
        out = []
        for s in SETTINGS:
            source = self.sources.get(s.key, "default")
            if s.deprecated and source != "default":
                out.append(f"setting {s.key} ({source}) is deprecated: {s.deprecated}")
        return out

    def redacted(self) -> dict[str, Any]:
        """All values, safe to log (no credentials are settings; URLs lose userinfo),
        paths and enum members as the text a config file would hold."""
        shown = {k: _as_text(v) for k, v in self.values.items()}
        return {**shown, "cold.url": self.cold_url_redacted}

    @property
    def cold_url_redacted(self) -> str:
        """``cold.url`` safe to log and show: without userinfo."""
        return re.sub(r"//[^/@]*@", "//***@", self.cold.url)


def _as_text(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    return value


def _suggest(name: str, known: Iterable[str]) -> str:
    """`` (did you mean tiering.segment_max_bytes?)`` for the closest known name, or ``""``."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def _flatten(doc: Mapping[str, Any], where: str) -> dict[str, object]:
    flat: dict[str, object] = {}
    for section, table in doc.items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"top-level key {section!r} must be a [section] table", where=where)
        for name, value in table.items():
            key = f"{section}.{name}"
            if key not in _BY_KEY:
                raise ConfigError(f"unknown setting {key!r}{_suggest(key, _BY_KEY)}", where=where)
            flat[key] = value
    return flat


def load_settings(
    config_file: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Settings:
    """Merge defaults, file, environment and flags; validate every key.

    ``overrides`` are flag values keyed by setting name; ``None`` values are ignored (an
    absent flag). Raises ConfigError with one line naming the key and where it came from.
    """
    env = os.environ if env is None else env
    raw: dict[str, object] = {}
    sources: dict[str, str] = {}
    if config_file is not None:
        where = str(config_file)
        try:
            doc = tomllib.loads(config_file.read_text())
        except FileNotFoundError as exc:
            raise ConfigError("config file not found", where=where) from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file: {exc}", where=where) from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file is not valid TOML: {exc}", where=where) from exc
        for key, value in _flatten(doc, where).items():
            raw[key], sources[key] = value, where
    known_env = {s.env for s in SETTINGS}
    for name in env:
        # TIEREDSTORE_CONFIG names the file; TIEREDSTORE_CACHE* is the test harness's.
        if not name.startswith("TIEREDSTORE_") or name in known_env:
            continue
        if name != "TIEREDSTORE_CONFIG" and not name.startswith("TIEREDSTORE_CACHE"):
            raise ConfigError(f"unknown environment variable {name}{_suggest(name, known_env)}")
    for s in SETTINGS:
        if s.env in env:
            raw[s.key], sources[s.key] = env[s.env], f"env {s.env}"
    for key, value in (overrides or {}).items():
        if key not in _BY_KEY:
            raise ConfigError(f"unknown setting {key!r}{_suggest(key, _BY_KEY)}")
        if value is not None:
            raw[key], sources[key] = value, "flag"
    values: dict[str, Any] = {}
    for s in SETTINGS:
        if s.key not in raw:
            if s.required:
                raise ConfigError(
                    f"missing required setting {s.key} (config file [{s.key.split('.')[0]}] "
                    f"{s.key.split('.')[1]}, env {s.env}, or its flag)"
                )
            values[s.key] = s.default
            sources.setdefault(s.key, "default")
            continue
        try:
            values[s.key] = s.parse(raw[s.key])
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"bad value for {s.key}: {exc}", where=sources[s.key]) from exc
    _check_listeners(values, sources)
    _check_group(values, sources)
    return Settings(values, sources)


def _check_listeners(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """The read API (message bodies) never shares a listener with the health/metrics one,
    which a container binds beyond loopback."""
    if not (values["http.enabled"] and values["reads.enabled"]):
        return
    if values["reads.port"] == values["http.port"] != 0:
        raise ConfigError(
            f"reads.port and http.port are both {values['http.port']}: the read API needs "
            "a listener of its own",
            where=sources["reads.port"],
        )


def _check_group(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """A sidecar of a group of several replicas names its replica: without a name it
    publishes no report, and once it holds the lease nothing would hold tiering back."""
    if values["group.replicas"] > 1 and not values["group.replica"]:
        raise ConfigError(
            f"group.replicas is {values['group.replicas']} but group.replica is empty: name "
            "this replica (unique in the group, e.g. the host name)",
            where=sources["group.replicas"],
        )


def check_environment(settings: Settings) -> None:
    """Check what a sidecar needs from the machine before it starts.

    The store must be a readable directory with a consume-queue layout; the state dir
    must be creatable and writable (tried, then what the try created is removed: the
    catalogue creates it for real). Raises ConfigError (one line) otherwise.
    """
    store = settings.store.path
    if not store.is_dir():
        raise ConfigError("store directory does not exist", where=f"store.path={store}")
    if not os.access(store, os.R_OK | os.X_OK):
        raise ConfigError("store directory is not readable", where=f"store.path={store}")
    state = settings.state.dir
    created = [d for d in (state, *state.parents) if not d.exists()]
    try:
        state.mkdir(parents=True, exist_ok=True)
        probe = state / ".write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(
            f"state directory is not writable: {exc.strerror}", where=f"state.dir={state}"
        ) from exc
    finally:
        # Only checked here: the catalogue creates it when the sidecar really starts, so
        # a start that fails later (an unreachable cold store) leaves no empty directory.
        for made in created:
            with contextlib.suppress(OSError):
                made.rmdir()
