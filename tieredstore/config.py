"""Sidecar configuration: one TOML file, ``TIEREDSTORE_*`` environment overrides, flags.

Precedence (highest first): command-line flags, environment variables, the TOML file,
defaults. Every key is declared once in :data:`SETTINGS` (name, type, default, help);
``docs/configuration.md`` documents the same table. Each key ``section.name`` maps to the
environment variable ``TIEREDSTORE_SECTION_NAME`` (e.g. ``cold.url`` →
``TIEREDSTORE_COLD_URL``).

Validation happens once, at start, and fails with one line naming the key and its
source (file, env var or flag): unknown keys, wrong types, out-of-range values, bad
URLs. Checks that touch the outside world (store readable, state dir writable) are in
:func:`check_environment`, which the ``run`` command calls before doing any work.
"""

from __future__ import annotations

import contextlib
import difflib
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, Self

from tieredstore.errors import ConfigError

__all__ = [
    "SECTIONS",
    "SETTINGS",
    "ColdSettings",
    "ConfigBackupSettings",
    "GcSettings",
    "HttpSettings",
    "InitPolicy",
    "LeaseSettings",
    "LogSettings",
    "ReadsSettings",
    "RetentionSettings",
    "Setting",
    "Settings",
    "ShutdownSettings",
    "StateSettings",
    "StoreSettings",
    "TieringSettings",
    "check_environment",
    "load_settings",
    "parse_duration",
    "parse_size",
]

_SIZE_UNITS: Final = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_DURATION_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_size(value: object) -> int:
    """Parse a byte size: an int, or ``"64M"``/``"64MiB"``/``"1G"``/``"512K"``."""
    if isinstance(value, bool):
        raise ValueError("a size, not a boolean")
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", str(value), re.IGNORECASE)
    if not m:
        raise ValueError(f"not a size: {value!r} (e.g. 67108864, 64M, 1G)")
    size = float(m.group(1)) * _SIZE_UNITS[m.group(2).upper()]
    if not math.isfinite(size):  # a few hundred digits overflow a float
        raise ValueError(f"not a finite size: {value!r}")
    return int(size)


def parse_duration(value: object) -> float:
    """Parse seconds: a number, or ``"500ms"``/``"60s"``/``"5m"``/``"72h"``/``"7d"``.

    TOML's ``nan`` and ``inf`` are refused: an infinite tick interval would tick once
    and then never again, silently, and ``nan`` compares false with every bound check.
    """
    if isinstance(value, bool):
        raise ValueError("a duration, not a boolean")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", str(value))
        if not m:
            raise ValueError(f"not a duration: {value!r} (e.g. 60, 60s, 5m, 72h)")
        seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2) or "s"]
    if not math.isfinite(seconds):
        raise ValueError(f"not a finite duration: {value!r}")
    return seconds


def _bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def _int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError("an integer, not a boolean")
    return int(str(value)) if not isinstance(value, int) else value


def _str(value: object) -> str:
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ValueError(f"not a string: {value!r}")
    return str(value)


def _str_list(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"not a list of strings: {value!r}")


def _choice(*choices: str) -> Callable[[object], str]:
    def parse(value: object) -> str:
        text = _str(value)
        if text not in choices:
            raise ValueError(f"{text!r} is not one of {', '.join(choices)}")
        return text

    return parse


def _init_policy(value: object) -> str:
    text = _str(value)
    if text in ("earliest", "latest") or re.fullmatch(r"timestamp:\d+", text):
        return text
    raise ValueError(f"{text!r} is not earliest, latest or timestamp:<epoch ms>")


def _url(value: object) -> str:
    text = _str(value).strip()
    if not text:
        raise ValueError("empty URL")
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)$", text)
    bucket = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/|$)"
    if m and m.group(1) == "s3" and not re.match(bucket, m.group(2)):
        raise ValueError(f"{text!r} has no valid bucket name (s3://bucket/prefix)")
    if m and not m.group(2):
        raise ValueError(f"{text!r} has nothing after {m.group(1)}://")
    return text


def _name(value: object) -> str:
    text = _str(value)
    if not re.fullmatch(r"[A-Za-z0-9_.%|-]{1,127}", text) or text in (".", ".."):
        raise ValueError(f"{text!r} is not a valid name (letters, digits, _ - . % |; max 127)")
    return text


def _positive(parse: Callable[[object], Any]) -> Callable[[object], Any]:
    def check(value: object) -> Any:
        out = parse(value)
        if out <= 0:
            raise ValueError(f"must be positive, got {value!r}")
        return out

    return check


def _non_negative(parse: Callable[[object], Any]) -> Callable[[object], Any]:
    def check(value: object) -> Any:
        out = parse(value)
        if out < 0:
            raise ValueError(f"must not be negative, got {value!r}")
        return out

    return check


def _port(value: object) -> int:
    port = _int(value)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is not in 0..65535")
    return port


def _retention_map(value: object) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise ValueError("a table of topic = duration")
    return {str(k): parse_duration(v) for k, v in value.items()}


@dataclass(frozen=True, slots=True)
class Setting:
    """One configuration key: its dotted name, parser, default and help text."""

    key: str
    parse: Callable[[object], Any]
    default: Any
    help: str
    required: bool = False
    #: Why the key is deprecated and what replaces it; empty for a current key.
    deprecated: str = ""

    @property
    def env(self) -> str:
        return "TIEREDSTORE_" + self.key.replace(".", "_").upper()


_DEFAULT_SYSTEM_TOPICS: Final = (
    "rmq_sys_*",
    "SCHEDULE_TOPIC_XXXX",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "TBW102",
    "BenchmarkTest",
    "OFFSET_MOVED_EVENT",
    "SELF_TEST_TOPIC",
    "*_REPLY_TOPIC",
)

SETTINGS: Final[tuple[Setting, ...]] = (
    Setting("store.path", _str, None, "broker store root (storePathRootDir)", required=True),
    Setting("store.commitlog_dir", _str, "", "commitlog dir if not <store.path>/commitlog"),
    Setting("store.config_dir", _str, "", "broker config dir if not <store.path>/config"),
    Setting(
        "cold.url",
        _url,
        None,
        "cold store URL: a path, file://, s3://bucket/prefix, memory://name",
        required=True,
    ),
    Setting("cold.cluster", _name, None, "broker cluster name (brokerClusterName)", required=True),
    Setting("cold.broker", _name, None, "broker name (brokerName)", required=True),
    Setting("cold.endpoint_url", _str, "", "S3 endpoint URL (MinIO, moto, ...); empty = AWS"),
    Setting("cold.region", _str, "", "S3 region; empty = from the AWS environment/profile"),
    Setting(
        "cold.multipart_threshold",
        _positive(parse_size),
        64 << 20,
        "S3 objects above this size use multipart upload",
    ),
    Setting(
        "cold.allow_unconditional_writes",
        _bool,
        False,
        "write through a backend without atomic create/compare-and-swap (generic fsspec): "
        "weaker fencing, see docs/reliability.md",
    ),
    Setting("state.dir", _str, None, "state directory for the SQLite catalogue", required=True),
    Setting(
        "tiering.segment_max_bytes",
        _positive(parse_size),
        64 << 20,
        "cut a segment at this many pending bytes",
    ),
    Setting(
        "tiering.segment_max_messages",
        _positive(_int),
        1_000_000,
        "cut a segment at this many pending messages",
    ),
    Setting(
        "tiering.segment_max_age",
        _positive(parse_duration),
        60.0,
        "cut a segment when its oldest pending message is this old",
    ),
    Setting(
        "tiering.tick_interval",
        _positive(parse_duration),
        1.0,
        "how often the dispatcher looks for work",
    ),
    Setting("tiering.concurrency", _positive(_int), 4, "queues uploaded at once"),
    Setting(
        "tiering.spool_max_bytes",
        _non_negative(parse_size),
        0,
        "spool bytes a round may use in <state.dir>/spool (0 = free space less 64 MiB)",
    ),
    Setting(
        "tiering.read_batch_bytes",
        _positive(parse_size),
        1 << 20,
        "bytes read and uploaded per chunk (bounds memory)",
    ),
    Setting(
        "tiering.max_bytes_per_second",
        _non_negative(parse_size),
        0,
        "upload bandwidth limit for segment objects, bytes per second (e.g. 50M); 0 = none",
    ),
    Setting(
        "tiering.init_policy",
        _init_policy,
        "earliest",
        "where a new queue starts: earliest | latest | timestamp:<ms>",
    ),
    Setting(
        "tiering.guard",
        _choice("sync", "checkpoint", "none"),
        "sync",
        "durability guard: sync (fdatasync the broker's commitlog up to a segment before "
        "uploading it) | checkpoint (only records stored before the checkpoint's flushed "
        "time) | none",
    ),
    Setting(
        "tiering.guard_age",
        _positive(parse_duration),
        10.0,
        "deprecated, ignored (the old guard's fallback age)",
        deprecated="ignored since the durability guard no longer trusts a record for its "
        "age (a fixed age equal to the broker's thorough-flush interval left no margin); "
        "tiering.guard = sync is safe and fast, checkpoint waits for the checkpoint; "
        "remove the setting",
    ),
    Setting(
        "tiering.include_topics", _str_list, (), "only these topics (glob patterns); empty = all"
    ),
    Setting("tiering.exclude_topics", _str_list, (), "never these topics (glob patterns)"),
    Setting(
        "tiering.system_topics",
        _str_list,
        _DEFAULT_SYSTEM_TOPICS,
        "topics skipped as system topics (glob patterns)",
    ),
    Setting("tiering.include_retry", _bool, False, "tier %RETRY%<group> topics"),
    Setting("tiering.include_dlq", _bool, False, "tier %DLQ%<group> topics"),
    Setting(
        "lease.renew_interval",
        _positive(parse_duration),
        10.0,
        "renew the writer lease this often (expires after 3x)",
    ),
    Setting(
        "lease.wait",
        _bool,
        True,
        "when another writer holds the lease: wait (true) or exit (false)",
    ),
    Setting(
        "retention.default", _positive(parse_duration), 72 * 3600.0, "how long cold data is kept"
    ),
    Setting(
        "retention.topics", _retention_map, {}, "per-topic retention: a table of topic = duration"
    ),
    Setting(
        "retention.interval", _positive(parse_duration), 60.0, "how often the retention pass runs"
    ),
    Setting(
        "config_backup.enabled",
        _bool,
        True,
        "keep versioned copies of the broker's config/ files in the cold store",
    ),
    Setting(
        "config_backup.interval",
        _positive(parse_duration),
        60.0,
        "how often the config files are compared and copied on change",
    ),
    Setting(
        "config_backup.history",
        _positive(_int),
        100,
        "versions kept of each config file (older ones are deleted)",
    ),
    Setting(
        "gc.grace",
        _non_negative(parse_duration),
        3600.0,
        "objects without a manifest older than this are garbage",
    ),
    Setting("http.bind", _str, "127.0.0.1", "health/metrics API bind address"),
    Setting("http.port", _port, 9780, "health/metrics API port (0 = any free port)"),
    Setting("http.enabled", _bool, True, "serve /healthz, /metrics and /v1/queues"),
    Setting("reads.bind", _str, "127.0.0.1", "read API bind address (message bodies: keep local)"),
    Setting("reads.port", _port, 9781, "read API port (0 = any free port)"),
    Setting("reads.enabled", _bool, True, "serve /v1/messages and /v1/cold (the broker plugin)"),
    Setting(
        "reads.cache_bytes",
        _non_negative(parse_size),
        64 << 20,
        "read-ahead cache of segment parts, evicted by size (0 = no read-ahead)",
    ),
    Setting(
        "reads.part_bytes",
        _positive(parse_size),
        1 << 20,
        "bytes of a segment object fetched per read-ahead part",
    ),
    Setting("log.format", _choice("text", "json"), "text", "log lines: text | json"),
    Setting("log.level", _choice("debug", "info", "warning", "error"), "info", "log level"),
    Setting(
        "log.summary_interval",
        _positive(parse_duration),
        60.0,
        "while tiering, one INFO line this often: segments, messages, bytes, errors, lag",
    ),
    Setting(
        "shutdown.deadline",
        _positive(parse_duration),
        30.0,
        "on SIGTERM, time allowed to finish in-flight segments",
    ),
)

_BY_KEY: Final = {s.key: s for s in SETTINGS}


# -- typed sections: one frozen dataclass per [section], a field per key of SETTINGS -----
# (tests/tieredstore/test_config.py checks the two agree, key for key; mypy sees every use).


@dataclass(frozen=True, slots=True)
class _Section:
    """A ``[section]`` of :data:`SETTINGS` as typed fields, built from validated values."""

    SECTION: ClassVar[str]

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Self:
        prefix = cls.SECTION + "."
        fields = {k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)}
        return cls(**fields)


@dataclass(frozen=True, slots=True)
class StoreSettings(_Section):
    """``[store]``: the broker store."""

    SECTION: ClassVar[str] = "store"
    path: str
    commitlog_dir: str
    config_dir: str


@dataclass(frozen=True, slots=True)
class ColdSettings(_Section):
    """``[cold]``: the cold store."""

    SECTION: ClassVar[str] = "cold"
    url: str
    cluster: str
    broker: str
    endpoint_url: str
    region: str
    multipart_threshold: int
    allow_unconditional_writes: bool


@dataclass(frozen=True, slots=True)
class StateSettings(_Section):
    """``[state]``: the sidecar's state directory."""

    SECTION: ClassVar[str] = "state"
    dir: str


@dataclass(frozen=True, slots=True)
class TieringSettings(_Section):
    """``[tiering]``: what is tiered, when and how fast."""

    SECTION: ClassVar[str] = "tiering"
    segment_max_bytes: int
    segment_max_messages: int
    segment_max_age: float
    tick_interval: float
    concurrency: int
    spool_max_bytes: int
    read_batch_bytes: int
    max_bytes_per_second: int
    init_policy: str
    guard: str
    guard_age: float
    include_topics: tuple[str, ...]
    exclude_topics: tuple[str, ...]
    system_topics: tuple[str, ...]
    include_retry: bool
    include_dlq: bool


@dataclass(frozen=True, slots=True)
class LeaseSettings(_Section):
    """``[lease]``: the writer lease."""

    SECTION: ClassVar[str] = "lease"
    renew_interval: float
    wait: bool


@dataclass(frozen=True, slots=True)
class RetentionSettings(_Section):
    """``[retention]``: how long cold data is kept."""

    SECTION: ClassVar[str] = "retention"
    default: float
    topics: Mapping[str, float]
    interval: float


@dataclass(frozen=True, slots=True)
class ConfigBackupSettings(_Section):
    """``[config_backup]``: copies of the broker's config files."""

    SECTION: ClassVar[str] = "config_backup"
    enabled: bool
    interval: float
    history: int


@dataclass(frozen=True, slots=True)
class GcSettings(_Section):
    """``[gc]``: garbage collection of unreferenced objects."""

    SECTION: ClassVar[str] = "gc"
    grace: float


@dataclass(frozen=True, slots=True)
class HttpSettings(_Section):
    """``[http]``: the health/metrics API."""

    SECTION: ClassVar[str] = "http"
    bind: str
    port: int
    enabled: bool


@dataclass(frozen=True, slots=True)
class ReadsSettings(_Section):
    """``[reads]``: the read API."""

    SECTION: ClassVar[str] = "reads"
    bind: str
    port: int
    enabled: bool
    cache_bytes: int
    part_bytes: int


@dataclass(frozen=True, slots=True)
class LogSettings(_Section):
    """``[log]``: logging."""

    SECTION: ClassVar[str] = "log"
    format: str
    level: str
    summary_interval: float


@dataclass(frozen=True, slots=True)
class ShutdownSettings(_Section):
    """``[shutdown]``: stopping."""

    SECTION: ClassVar[str] = "shutdown"
    deadline: float


#: The typed section classes, by section name (the attribute of :class:`Settings`).
SECTIONS: Final[Mapping[str, type[_Section]]] = {
    "store": StoreSettings,
    "cold": ColdSettings,
    "state": StateSettings,
    "tiering": TieringSettings,
    "lease": LeaseSettings,
    "retention": RetentionSettings,
    "config_backup": ConfigBackupSettings,
    "gc": GcSettings,
    "http": HttpSettings,
    "reads": ReadsSettings,
    "log": LogSettings,
    "shutdown": ShutdownSettings,
}


class InitPolicy:
    """Parsed ``tiering.init_policy``: ``earliest``, ``latest`` or a timestamp."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.timestamp_ms = int(text.split(":", 1)[1]) if text.startswith("timestamp:") else None

    @property
    def is_earliest(self) -> bool:
        return self.text == "earliest"

    @property
    def is_latest(self) -> bool:
        return self.text == "latest"


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

    # Typed accessors for the keys code reads most.
    @property
    def store_path(self) -> Path:
        return Path(self.values["store.path"])

    @property
    def cold_url(self) -> str:
        return str(self.values["cold.url"])

    @property
    def cluster(self) -> str:
        return str(self.values["cold.cluster"])

    @property
    def broker(self) -> str:
        return str(self.values["cold.broker"])

    @property
    def state_dir(self) -> Path:
        return Path(self.values["state.dir"])

    @property
    def init_policy(self) -> InitPolicy:
        return InitPolicy(self.values["tiering.init_policy"])

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
        """All values, safe to log (no credentials are settings; URLs lose userinfo)."""
        return {**self.values, "cold.url": self.cold_url_redacted}

    @property
    def cold_url_redacted(self) -> str:
        """``cold.url`` safe to log and show: without userinfo."""
        return re.sub(r"//[^/@]*@", "//***@", self.cold.url)


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


def check_environment(settings: Settings) -> None:
    """Check what a sidecar needs from the machine before it starts.

    The store must be a readable directory with a consume-queue layout; the state dir
    must be creatable and writable (tried, then what the try created is removed: the
    catalogue creates it for real). Raises ConfigError (one line) otherwise.
    """
    store = settings.store_path
    if not store.is_dir():
        raise ConfigError("store directory does not exist", where=f"store.path={store}")
    if not os.access(store, os.R_OK | os.X_OK):
        raise ConfigError("store directory is not readable", where=f"store.path={store}")
    state = settings.state_dir
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
