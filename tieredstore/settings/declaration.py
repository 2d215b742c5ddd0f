"""Every setting, declared once: a typed field of its ``[section]`` dataclass.

Each key is one field of a frozen section dataclass (``TieringSettings.concurrency``)
declared with :func:`key` (or :func:`required`), which carries all there is to say of it:
its parser (:mod:`tieredstore.settings.values`; the field's type is what the parser
returns, so mypy checks the two agree), its default as it is written in TOML, its help
(the text of docs/configuration.md), whether ``SIGHUP`` applies it live, the comment of
docs/sidecar.toml, and why it is deprecated, if it is. Its environment variable follows
from its name (``tiering.concurrency`` → ``TIEREDSTORE_TIERING_CONCURRENCY``).

:data:`SETTINGS` is the flat list the loader, the reload and the docs generator
(:mod:`tieredstore.settings.docs`) go over. Adding a setting is one field here and the code
that uses it (``settings.tiering.<name>``); ``make docs`` then rewrites the docs, and
``tests/tieredstore/settings/test_docs.py`` fails until it has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Final, Self, TypeVar

from tieredstore.settings.values import (
    LOG_FORMATS,
    LOG_LEVELS,
    GuardMode,
    InitPolicy,
    parse_between,
    parse_bool,
    parse_choice,
    parse_duration,
    parse_enum,
    parse_int,
    parse_name,
    parse_non_negative,
    parse_optional_name,
    parse_path,
    parse_port,
    parse_positive,
    parse_retention_map,
    parse_size,
    parse_str,
    parse_str_list,
    parse_url,
)

__all__ = [
    "SECTIONS",
    "SETTINGS",
    "ColdSettings",
    "ConfigBackupSettings",
    "GcSettings",
    "HttpSettings",
    "LeaseSettings",
    "LogSettings",
    "ReadsSettings",
    "RetentionSettings",
    "Section",
    "Setting",
    "ShutdownSettings",
    "StateSettings",
    "StoreSettings",
    "TieringSettings",
]

_T = TypeVar("_T")
_DECLARED: Final = "tieredstore.setting"
#: The largest frame a seek table can describe (tieredstore.cold.compressed.frames.MAX_FRAME_BYTES;
#: settings sit below the cold layer, so the limit is said here too, and checked equal).
_MAX_FRAME_BYTES: Final = 1 << 30


@dataclass(frozen=True, slots=True)
class Setting:
    """One key of :data:`SETTINGS`, as the loader, the reload and the docs see it."""

    #: ``section.name``; empty while only attached to its field (:meth:`Section.settings`).
    key: str
    parse: Callable[[object], Any]
    #: The parsed default; None for a required key.
    default: Any
    #: The default as written in TOML (docs/configuration.md, docs/sidecar.toml).
    toml_default: object
    help: str
    required: bool = False
    #: ``SIGHUP`` applies a change at once; otherwise the running value stays.
    live: bool = False
    #: docs/sidecar.toml's value of a required key, or a commented-out line under a
    #: table-valued one.
    example: object = None
    #: docs/sidecar.toml's comment on the key.
    note: str = ""
    #: Why the key is deprecated and what replaces it; empty for a current key.
    deprecated: str = ""

    @property
    def env(self) -> str:
        return "TIEREDSTORE_" + self.key.replace(".", "_").upper()


def key(
    parse: Callable[[object], _T],
    default: object,
    help: str,
    *,
    live: bool = False,
    note: str = "",
    example: object = None,
    deprecated: str = "",
) -> _T:
    """Declare a setting with a default, given as it is written in TOML (``"64M"``,
    ``"60s"``); ``parse`` turns it into the field's value at import, so a default
    that does not parse fails at once. ``live``: a ``SIGHUP`` applies it at once
    (otherwise it needs a restart). ``note``: the comment of docs/sidecar.toml;
    ``example``: a commented-out line under a table-valued key there."""
    declared = Setting(
        "", parse, parse(default), default, help, live=live, example=example, note=note,
        deprecated=deprecated,
    )  # fmt: skip
    return field(metadata={_DECLARED: declared})  # type: ignore[no-any-return]


def required(parse: Callable[[object], _T], help: str, *, example: object, note: str = "") -> _T:
    """Declare a setting without a default (``example`` is docs/sidecar.toml's value)."""
    declared = Setting("", parse, None, None, help, required=True, example=example, note=note)
    return field(metadata={_DECLARED: declared})  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class Section:
    """A ``[section]`` of the settings as typed fields, built from validated values.

    ``TITLE`` heads its part of docs/configuration.md, ``INTRO`` (optional) is the
    paragraph under the heading.
    """

    SECTION: ClassVar[str]
    TITLE: ClassVar[str]
    INTRO: ClassVar[str] = ""

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Self:
        prefix = cls.SECTION + "."
        own = {k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)}
        return cls(**own)

    @classmethod
    def default_of(cls, name: str) -> Any:
        """The parsed default of the section's key ``name`` (the one place a default is
        said: code that needs it outside the settings reads it here). KeyError if the
        section has no such key or the key is required (it has no default)."""
        declared = {f.name: f.metadata[_DECLARED] for f in fields(cls)}[name]
        if declared.required:
            raise KeyError(f"{cls.SECTION}.{name} is required: it has no default")
        return declared.default

    @classmethod
    def settings(cls) -> tuple[Setting, ...]:
        """The section's keys, in declaration order."""
        return tuple(
            replace(f.metadata[_DECLARED], key=f"{cls.SECTION}.{f.name}") for f in fields(cls)
        )


_DEFAULT_SYSTEM_TOPICS: Final = [
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
]


@dataclass(frozen=True, slots=True)
class StoreSettings(Section):
    """``[store]``: the broker store."""

    SECTION: ClassVar[str] = "store"
    TITLE: ClassVar[str] = "the broker's store (read-only)"
    path: Path = required(
        parse_path,
        "The broker's `storePathRootDir` (holds `commitlog/`, `consumequeue/`, `checkpoint`, "
        "`config/`). Read-only: the sidecar never writes there and never takes the broker's "
        "`lock`. Must exist and be readable at start.",
        example="/home/rocketmq/store",
        note="the broker's storePathRootDir (read-only)",
    )
    commitlog_dir: str = key(
        parse_str,
        "",
        "The commitlog directory when the broker keeps it elsewhere (`storePathCommitLog`); "
        "empty = `<store.path>/commitlog`.",
        note="empty = <store.path>/commitlog",
    )
    config_dir: str = key(
        parse_str,
        "",
        "The broker's config directory (`topics.json`, `consumerOffset.json`, ...) when it is "
        "not `<store.path>/config`; read only by the config backup.",
        note="empty = <store.path>/config",
    )


@dataclass(frozen=True, slots=True)
class ColdSettings(Section):
    """``[cold]``: the cold store."""

    SECTION: ClassVar[str] = "cold"
    TITLE: ClassVar[str] = "where segments go"
    url: str = required(
        parse_url,
        "The cold store root: a plain path or `file:///abs/path` (POSIX), "
        "`s3://bucket/prefix` (S3, MinIO), `memory://name` (tests), or another fsspec URL. "
        "Probed at start (one listing): unreachable, no such bucket or access denied is exit "
        "3. Credentials never go here: S3 uses the AWS chain "
        "(`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, profile, instance role).",
        example="s3://rocketmq-tiered/prod",
        note="path, file://, s3://bucket/prefix, memory://",
    )
    cluster: str = required(
        parse_name,
        "The broker's `brokerClusterName`; the cold prefix is `<md5(cluster)[:8]>_<cluster>/`.",
        example="DefaultCluster",
        note="brokerClusterName",
    )
    broker: str = required(
        parse_name,
        "The broker's `brokerName`; one writer lease (`_lease.json`) per broker.",
        example="broker-a",
        note="brokerName",
    )
    endpoint_url: str = key(
        parse_str,
        "",
        "S3 endpoint for S3-compatible stores (MinIO: `http://minio:9000`); empty = AWS.",
        note='S3-compatible endpoint, e.g. "http://minio:9000"',
    )
    region: str = key(
        parse_str,
        "",
        "S3 region; empty = from the AWS environment or profile.",
        note="empty = from the AWS environment/profile",
    )
    multipart_threshold: int = key(
        parse_positive(parse_size),
        "64M",
        "S3 objects larger than this are uploaded in parts (size, > 0).",
    )
    allow_unconditional_writes: bool = key(
        parse_bool,
        False,
        "Write through a backend that cannot create objects or swap the lease atomically (the "
        "generic fsspec adapter: `gs://`, `az://`, ...). Off by default: such a backend is "
        "refused for writing (`run`, `expire`, `gc`, `repair`), because fencing between two "
        "sidecars would rest on timing. Reading (`read`, `verify`) always works. See "
        "docs/reliability.md.",
        note="only for backends without atomic create (gs://, az://)",
    )
    compression: str = key(
        parse_choice("none", "zstd"),
        "none",
        "How new COMMIT_LOG segment objects and batch objects' data sections are stored: "
        "`none` (plain) or `zstd` (seekable zstd frames, which `zstd -d` decompresses; "
        "docs/format.md). Readers read both kinds side by side, so turning it on or off needs "
        "no rewrite; a tieredstore that reads manifest formats 1 and 2 (batch format 1) only "
        "refuses a compressed segment (batch) as an unsupported format rather than misreading "
        "it.",
        note="none | zstd",
    )
    compression_level: int = key(
        parse_between(parse_int, -7, 22),
        1,
        'The zstd level of `cold.compression = "zstd"` (-7 .. 22; 1 is fastest of the usual '
        "levels, 19 smallest; negative: faster still, larger).",
    )
    frame_size: int = key(
        parse_between(parse_size, 1, _MAX_FRAME_BYTES),
        "1M",
        "Uncompressed bytes per zstd frame of a compressed object: the least a read of any "
        "range decodes (size, > 0, at most 1G).",
    )


@dataclass(frozen=True, slots=True)
class StateSettings(Section):
    """``[state]``: the sidecar's state directory."""

    SECTION: ClassVar[str] = "state"
    TITLE: ClassVar[str] = "the catalogue"
    dir: Path = required(
        parse_path,
        "Directory for the SQLite catalogue (created if missing; must be writable). It can "
        "always be rebuilt from the cold store's manifests. One sidecar per state dir. Also "
        "holds `spool/`: each tiering round's gathered segments until they are uploaded (up "
        "to about a million records' worth, removed after the round); a POSIX cold store on "
        "the same filesystem takes them by hard link, without a second copy.",
        example="/var/lib/tieredstore",
        note="the SQLite catalogue lives here",
    )


@dataclass(frozen=True, slots=True)
class TieringSettings(Section):
    """``[tiering]``: what is tiered, when and how fast."""

    SECTION: ClassVar[str] = "tiering"
    TITLE: ClassVar[str] = "the dispatcher"
    segment_max_bytes: int = key(
        parse_positive(parse_size),
        "64M",
        "Cut a segment when this many commitlog bytes are pending (size, > 0). A single "
        "larger record is its own segment.",
        live=True,
    )
    segment_max_messages: int = key(
        parse_positive(parse_int),
        1000000,
        "Cut a segment at this many pending messages (> 0).",
        live=True,
    )
    segment_max_age: float = key(
        parse_positive(parse_duration),
        "60s",
        "Cut a segment when its oldest pending message is this old (duration, > 0); bounds "
        "the lag of a quiet queue.",
        live=True,
    )
    batching: bool = key(
        parse_bool,
        True,
        "Put the segments cut by age (queues whose segment is not full when "
        "`segment_max_age` passes) into ONE batch object for the broker, every other tick, "
        "instead of three objects per queue: the PUTs stay constant whatever the number of "
        "queues, and no message waits longer than `segment_max_age`. A segment that is "
        "full, or holds over 1 MiB, stays per queue. Batch slices are rewritten as per-queue "
        "segments by compaction (`compact_after`). Off: per-queue segments only, as before 0.2. "
        "See [operations: cost](operations.md#cost-and-bandwidth) and [format: batch "
        "objects](format.md#batch-objects).",
        live=True,
        note="one object per tick for the small queues",
    )
    compact_after: float = key(
        parse_positive(parse_duration),
        "1h",
        "A queue's batch slices are rewritten as one per-queue segment once the oldest is "
        "this old, or once they hold `segment_max_bytes` (duration, > 0).",
        live=True,
    )
    tick_interval: float = key(
        parse_positive(parse_duration),
        "1s",
        "How often the dispatcher looks for new queues and ready segments; also how often the "
        "lag gauges are refreshed (duration, > 0).",
        live=True,
    )
    concurrency: int = key(
        parse_positive(parse_int),
        4,
        "Segments uploaded at once, across queues (> 0).",
    )
    spool_max_bytes: int = key(
        parse_non_negative(parse_size),
        0,
        "Spool bytes one tiering round may use in `<state.dir>/spool` (a round gathers its "
        "segments there before uploading them). `0`: the free space of the state dir's "
        "filesystem less 64 MiB, measured before each round. A backlog that does not fit is "
        "taken in smaller rounds; a single segment that does not fit stops that queue "
        "(`SpoolTooSmallError` each tick, `tieredstore_spool_too_small` 1, alert "
        "`TieredStoreSpoolTooSmall`). See [operations: the state dir's "
        "disk](operations.md#the-state-dirs-disk).",
        note="0 = state dir free space less 64 MiB",
    )
    read_batch_bytes: int = key(
        parse_positive(parse_size),
        "1M",
        "Bytes per chunk when a gathered segment is streamed to the cold store (S3 and other "
        "non-POSIX backends); bounds memory per upload (size, > 0). The commitlog itself is "
        "read in 2 MiB windows by the tiering pass.",
    )
    max_bytes_per_second: int = key(
        parse_non_negative(parse_size),
        0,
        'Upload bandwidth limit for segment uploads, in bytes per second (size: `"50M"` is 50 '
        "MiB/s; `0` = no limit). A token bucket holding one second's worth paces every chunk "
        "of a streamed COMMIT_LOG object, the CONSUME_QUEUE object and the manifest; lease "
        "renewals, retention and reads are never held back. A chunk larger than a second's "
        "worth still goes, and the next waits longer. A reload applies the new rate to the "
        "next chunk. Time spent waiting is `tieredstore_upload_throttled_seconds_total`.",
        live=True,
        note='upload bandwidth limit, e.g. "50M"; 0 = none',
    )
    init_policy: InitPolicy = key(
        InitPolicy.parse,
        "earliest",
        "Where a queue seen for the first time starts: `earliest` (hot min), `latest` (hot "
        "max: only new messages) or `timestamp:<epoch ms>` (first message stored at or after "
        "it). Existing queues are never moved.",
        live=True,
        note="earliest | latest | timestamp:<epoch ms>",
    )
    guard: GuardMode = key(
        parse_enum(GuardMode),
        "sync",
        "Durability guard: no record a power cut of the broker host could take away ever "
        "reaches cold. `sync` makes a segment's records durable itself before uploading them "
        "(`fdatasync` of the broker's commitlog files that may still hold unflushed data up "
        "to the segment's last record) \u2014 safe and adds no lag on ASYNC_FLUSH and SYNC_FLUSH "
        "brokers; if the store's filesystem refuses `fdatasync` it falls back to "
        "`checkpoint`, loudly. `checkpoint` only observes: records stored strictly before the "
        "checkpoint's `physicMsgTimestamp` (on ASYNC_FLUSH that moves every "
        "`flushCommitLogThoroughInterval`, 10 s). `none` turns the guard off. The rule and "
        "the broker code behind it: [reliability.md](reliability.md#the-durability-guard).",
        live=True,
        note="sync | checkpoint | none (docs/reliability.md)",
    )
    guard_age: float = key(
        parse_positive(parse_duration),
        "10s",
        "**Deprecated, ignored** (a warning is logged when it is set). It let the old guard "
        "tier records older than this whatever the checkpoint said; at its default it "
        "equalled the broker's thorough-flush interval, so its safety margin was zero. Remove "
        'it; `tiering.guard = "sync"` needs no age.',
        live=True,
        deprecated="ignored since the durability guard no longer trusts a record for its "
        "age (a fixed age equal to the broker's thorough-flush interval left no margin); "
        "tiering.guard = sync is safe and fast, checkpoint waits for the checkpoint; "
        "remove the setting",
    )
    include_topics: tuple[str, ...] = key(
        parse_str_list,
        [],
        "Only these topics (globs); empty = every topic. Also the way to tier a system topic.",
        live=True,
        note="globs; empty = every topic",
    )
    exclude_topics: tuple[str, ...] = key(
        parse_str_list,
        [],
        "Never these topics (globs); wins over everything.",
        live=True,
    )
    system_topics: tuple[str, ...] = key(
        parse_str_list,
        _DEFAULT_SYSTEM_TOPICS,
        "Topics skipped as RocketMQ-internal (globs) unless `include_topics` names them.",
        live=True,
    )
    include_retry: bool = key(
        parse_bool,
        False,
        "Tier `%RETRY%<group>` topics.",
        live=True,
    )
    include_dlq: bool = key(
        parse_bool,
        False,
        "Tier `%DLQ%<group>` topics.",
        live=True,
    )


@dataclass(frozen=True, slots=True)
class LeaseSettings(Section):
    """``[lease]``: the writer lease."""

    SECTION: ClassVar[str] = "lease"
    TITLE: ClassVar[str] = "single writer per broker"
    renew_interval: float = key(
        parse_positive(parse_duration),
        "10s",
        "Renew the writer lease this often; it expires after three intervals without renewal "
        "(duration, > 0).",
    )
    wait: bool = key(
        parse_bool,
        True,
        "When another sidecar holds the lease: wait until its record stays unchanged for its "
        "lease time on this host's clock (`true`, `/healthz` answers 503 meanwhile), or exit "
        "1 as soon as the record is seen renewed, within about one renew interval (`false`, "
        "same as `--no-wait`; a dead holder's lease is still taken, after one lease time).",
    )


@dataclass(frozen=True, slots=True)
class GroupSettings(Section):
    """``[group]``: one sidecar per replica of a broker group."""

    SECTION: ClassVar[str] = "group"
    TITLE: ClassVar[str] = "broker groups (master and slaves)"
    replica: str = key(
        parse_optional_name,
        "",
        "This replica's name in its broker group, unique in the group (e.g. the host name); "
        "every sidecar of the group has the same `cold.broker`. The sidecar publishes what "
        "its store holds durably as `_replicas/<replica>.json` every tick, holding the lease "
        "or standing by (letters, digits, `_ - . % |`). Empty: not in a group (a single "
        "broker), nothing published; required when `group.replicas` is above 1.",
        note='e.g. "broker-a-0"',
    )
    replicas: int = key(
        parse_positive(parse_int),
        1,
        "Replicas in the group, this one included. Above 1, the sidecar that holds the lease "
        "tiers a record only once every other replica that reports has it durably (the lowest "
        "`confirmed` offset), so cold is never ahead of a replica that takes over; 1: no "
        "such limit (a single broker).",
    )
    replica_timeout: float = key(
        parse_positive(parse_duration),
        "30s",
        "A replica whose report did not change for this long (on this host's clock) no longer "
        "holds tiering back: tiering goes on under the others, logged and counted in "
        "`tieredstore_group_replicas_missing`. Also how long a starting sidecar waits for "
        "the replicas it has not heard from yet (duration, > 0; longer than a slave's "
        "expected stalls, e.g. a GC pause or a network blip).",
    )


@dataclass(frozen=True, slots=True)
class RetentionSettings(Section):
    """``[retention]``: how long cold data is kept."""

    SECTION: ClassVar[str] = "retention"
    TITLE: ClassVar[str] = "expiry of cold data"
    default: float = key(
        parse_positive(parse_duration),
        "72h",
        "A committed segment expires when its newest message is older than this (duration, > "
        "0). Only a queue's oldest segments expire, never its newest.",
        live=True,
    )
    topics: Mapping[str, float] = key(
        parse_retention_map,
        {},
        "Per-topic overrides: a table `topic = duration` (in the file: `[retention.topics]` "
        'then `Orders = "7d"`).',
        live=True,
        note="per-topic overrides (default: none)",
        example='Orders = "7d"',
    )
    interval: float = key(
        parse_positive(parse_duration),
        "60s",
        "How often the retention pass runs (duration, > 0).",
    )


@dataclass(frozen=True, slots=True)
class ConfigBackupSettings(Section):
    """``[config_backup]``: copies of the broker's config files."""

    SECTION: ClassVar[str] = "config_backup"
    TITLE: ClassVar[str] = "copies of the broker's `config/`"
    enabled: bool = key(
        parse_bool,
        True,
        "Keep versioned copies of `topics.json`, `subscriptionGroup.json`, "
        "`consumerOffset.json` and `delayOffset.json` in the broker's cold prefix "
        "(`_config/`), byte for byte, so `tieredstore restore` brings topics and consumer "
        "offsets back (docs/restore.md).",
    )
    interval: float = key(
        parse_positive(parse_duration),
        "60s",
        "How often the files are compared with their newest copy and copied when they "
        "changed; also once when the sidecar starts (`run --once` too) (duration, > 0).",
    )
    history: int = key(
        parse_positive(parse_int),
        100,
        "Versions kept per file; the oldest beyond this are deleted (> 0). At the default "
        "interval, 100 versions of a busy `consumerOffset.json` cover at least 100 minutes "
        "for `restore --config-at`.",
        note="versions kept per file",
    )


@dataclass(frozen=True, slots=True)
class GcSettings(Section):
    """``[gc]``: garbage collection of unreferenced objects."""

    SECTION: ClassVar[str] = "gc"
    TITLE: ClassVar[str] = "uncommitted objects"
    grace: float = key(
        parse_non_negative(parse_duration),
        "1h",
        "Segment objects without a manifest older than this are garbage (an upload that "
        "crashed before its commit point) and may be collected by `tieredstore gc` (duration, "
        ">= 0; keep it well above the longest upload).",
    )


@dataclass(frozen=True, slots=True)
class HttpSettings(Section):
    """``[http]``: the health/metrics API."""

    SECTION: ClassVar[str] = "http"
    TITLE: ClassVar[str] = "health and metrics"
    INTRO: ClassVar[str] = (
        "The sidecar has two listeners. This one carries no message contents, so it is "
        "the one a container opens to the kubelet and Prometheus; message contents are "
        "on the read API's (`[reads]`), which stays inside the pod."
    )
    enabled: bool = key(
        parse_bool,
        True,
        "Serve `GET /healthz`, `/metrics` (Prometheus) and `/v1/queues` while `run` runs "
        "(never with `--once`). Read-only: there are no write endpoints.",
    )
    bind: str = key(
        parse_str,
        "127.0.0.1",
        "Address to listen on. The default keeps the API on the host; in a container set "
        "`0.0.0.0` so the kubelet and Prometheus can reach it.",
        note='"0.0.0.0" in a container',
    )
    port: int = key(
        parse_port,
        9780,
        "Port (0..65535; `0` picks a free port, logged as `HTTP API listening on "
        "http://HOST:PORT`).",
    )


@dataclass(frozen=True, slots=True)
class ReadsSettings(Section):
    """``[reads]``: the read API."""

    SECTION: ClassVar[str] = "reads"
    TITLE: ClassVar[str] = "the read API (message contents, the broker plugin)"
    enabled: bool = key(
        parse_bool,
        True,
        "Serve `GET /v1/messages` and the broker plugin's `/v1/cold/*` while `run` runs, also "
        "on a standby sidecar (reads need no lease). See [serving.md](serving.md).",
    )
    bind: str = key(
        parse_str,
        "127.0.0.1",
        "Address to listen on. There is no authentication and the answers are message bodies: "
        "keep it on loopback (the broker shares the pod's network namespace) and never "
        "publish it.",
        note="the broker plugin reads over loopback",
    )
    port: int = key(
        parse_port,
        9781,
        "Port (0..65535; `0` picks a free port, logged as `read API listening on "
        "http://HOST:PORT`); never the same as `http.port`.",
    )
    cache_bytes: int = key(
        parse_non_negative(parse_size),
        "64M",
        "Read-ahead cache: parts of segment objects (decoded frames of compressed ones) kept in "
        "memory for sequential consumers, least recently used first out by size (size, >= 0; "
        "`0` turns read-ahead off). Counts "
        "in the sidecar's RSS; `tieredstore_readahead_bytes` shows what it holds.",
        note="read-ahead cache, evicted by size",
    )
    part_bytes: int = key(
        parse_positive(parse_size),
        "1M",
        "Bytes of a segment object fetched per part; a read of one part starts fetching the "
        "next (size, > 0).",
    )


@dataclass(frozen=True, slots=True)
class LogSettings(Section):
    """``[log]``: logging."""

    SECTION: ClassVar[str] = "log"
    TITLE: ClassVar[str] = "logging"
    format: str = key(
        parse_choice(*LOG_FORMATS),
        "text",
        "`text` (human-readable lines) or `json` (one object per line: ts, level, logger, "
        "message). Logs go to stderr.",
        live=True,
        note="text | json",
    )
    level: str = key(
        parse_choice(*LOG_LEVELS),
        "info",
        "`debug`, `info`, `warning` or `error`.",
        live=True,
        note="debug | info | warning | error",
    )
    summary_interval: float = key(
        parse_positive(parse_duration),
        "60s",
        "While the sidecar works, one INFO line this often: `tiered 120 segments, 61,440 "
        "messages, 42.0 MiB in the last 1 m 00 s; 0 errors; lag 812 messages, oldest 3.2 s`. "
        "Nothing is logged for an interval with no segment and no error. With "
        "`tiering.batching` on, batch slices are counted apart: `tiered 2 segments, 1,024 "
        "batch slices, ...`.",
        note="one INFO line this often while tiering",
    )


@dataclass(frozen=True, slots=True)
class ShutdownSettings(Section):
    """``[shutdown]``: stopping."""

    SECTION: ClassVar[str] = "shutdown"
    TITLE: ClassVar[str] = "stopping"
    deadline: float = key(
        parse_positive(parse_duration),
        "30s",
        "On SIGTERM/SIGINT no new segment starts and a log line says at once how many uploads "
        "are in flight and this bound (`SIGINT: finishing 3 uploads, at most 30.0 s; Ctrl-C "
        "again to abandon them`); segments in flight get this long to commit, then are "
        "abandoned (their objects stay uncommitted, never read, and are rewritten or "
        "collected later); a second signal abandons them at once. Then the lease is released "
        "and the sidecar exits 0 (`run --once`: 130/143, its last line saying what was "
        "committed, abandoned and left). Keep it below the orchestrator's kill timeout "
        "(Kubernetes `terminationGracePeriodSeconds`, Compose `stop_grace_period`).",
    )


#: The typed section classes, by section name (the attribute of ``Settings``), in the
#: order of the docs.
SECTIONS: Final[Mapping[str, type[Section]]] = {
    cls.SECTION: cls
    for cls in (
        StoreSettings,
        ColdSettings,
        StateSettings,
        TieringSettings,
        LeaseSettings,
        GroupSettings,
        RetentionSettings,
        ConfigBackupSettings,
        GcSettings,
        HttpSettings,
        ReadsSettings,
        LogSettings,
        ShutdownSettings,
    )
}

#: Every key, section by section.
SETTINGS: Final[tuple[Setting, ...]] = tuple(
    s for section in SECTIONS.values() for s in section.settings()
)
