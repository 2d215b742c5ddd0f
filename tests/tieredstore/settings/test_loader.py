"""Configuration: precedence, and one validation test for every key."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tieredstore.errors import ConfigError
from tieredstore.settings.loader import (
    SECTIONS,
    SETTINGS,
    check_environment,
    load_settings,
    parse_duration,
    parse_size,
)

REQUIRED = {
    "store.path": "/tmp/store",
    "cold.url": "memory://x",
    "cold.cluster": "DefaultCluster",
    "cold.broker": "broker-a",
    "state.dir": "/tmp/state",
}

#: A value each key must refuse, and the words its error must contain.
BAD: dict[str, tuple[object, str]] = {
    "store.path": (["a"], "not a string"),
    "store.commitlog_dir": ({"x": 1}, "not a string"),
    "store.config_dir": ([1], "not a string"),
    "cold.url": ("s3://Bad_Bucket!/x", "no valid bucket name"),
    "cold.cluster": ("a/b", "not a valid name"),
    "cold.broker": ("..", "not a valid name"),
    "cold.endpoint_url": (["x"], "not a string"),
    "cold.region": ({"a": 1}, "not a string"),
    "cold.multipart_threshold": ("lots", "not a size"),
    "cold.compression": ("lz4", "is not one of none, zstd"),
    "cold.compression_level": (23, "must be between -7 and 22"),
    "cold.frame_size": ("2G", "must be between 1 and 1073741824"),
    "state.dir": (True, "not a string"),
    "tiering.segment_max_bytes": ("0", "must be positive"),
    "tiering.segment_max_messages": (-1, "must be positive"),
    "tiering.segment_max_age": ("soon", "not a duration"),
    "tiering.batching": ("often", "not a boolean"),
    "tiering.compact_after": ("0s", "must be positive"),
    "tiering.tick_interval": (0, "must be positive"),
    "tiering.spool_max_bytes": ("-1", "not a size"),
    "tiering.concurrency": ("four", "invalid literal"),
    "tiering.read_batch_bytes": (True, "not a boolean"),
    "tiering.max_bytes_per_second": (-1, "must not be negative"),
    "tiering.init_policy": ("oldest", "not earliest, latest or timestamp"),
    "tiering.guard": ("maybe", "is not one of sync, checkpoint, none"),
    "tiering.guard_age": ("a while", "not a duration"),
    "tiering.include_topics": (5, "not a list of strings"),
    "tiering.exclude_topics": ([1], "not a list of strings"),
    "tiering.system_topics": ({"a": 1}, "not a list of strings"),
    "tiering.include_retry": ("perhaps", "not a boolean"),
    "cold.allow_unconditional_writes": ("sometimes", "not a boolean"),
    "tiering.include_dlq": (2, "not a boolean"),
    "lease.renew_interval": ("-5s", "not a duration"),
    "lease.wait": ("sometimes", "not a boolean"),
    "group.replica": ("broker-a/0", "not a valid name"),
    "group.replicas": (0, "must be positive"),
    "group.replica_timeout": ("0s", "must be positive"),
    "retention.default": ("3 weeks", "not a duration"),
    "retention.topics": ("TopicA=1h", "a table of topic = duration"),
    "retention.interval": (0, "must be positive"),
    "config_backup.enabled": ("often", "not a boolean"),
    "config_backup.interval": (0, "must be positive"),
    "config_backup.history": (0, "must be positive"),
    "gc.grace": ("never", "not a duration"),
    "http.bind": ([], "not a string"),
    "http.port": (70000, "not in 0..65535"),
    "http.enabled": ("yes please", "not a boolean"),
    "reads.bind": ([], "not a string"),
    "reads.port": (-1, "not in 0..65535"),
    "reads.enabled": ("maybe", "not a boolean"),
    "reads.cache_bytes": ("lots", "not a size"),
    "reads.part_bytes": (0, "must be positive"),
    "log.format": ("xml", "is not one of text, json"),
    "log.level": ("loud", "is not one of debug"),
    "log.summary_interval": (0, "must be positive"),
    "shutdown.deadline": ("0s", "must be positive"),
}


def test_every_key_has_a_validation_case() -> None:
    assert set(BAD) == {s.key for s in SETTINGS}


@pytest.mark.parametrize("key", sorted(BAD))
def test_each_key_refuses_a_bad_value_with_one_line(key: str) -> None:
    value, words = BAD[key]
    with pytest.raises(ConfigError) as info:
        load_settings(env={}, overrides={**REQUIRED, key: value})
    message = str(info.value)
    assert f"bad value for {key}" in message
    assert words in message
    assert "\n" not in message


def test_a_group_of_several_replicas_needs_this_replicas_name() -> None:
    # Without a name the sidecar publishes no report: once it held the lease, nothing
    # would hold its tiering back for the others.
    with pytest.raises(ConfigError) as info:
        load_settings(env={"TIEREDSTORE_GROUP_REPLICAS": "2"}, overrides=REQUIRED)
    assert str(info.value) == (
        "group.replicas is 2 but group.replica is empty: name this replica (unique in the "
        "group, e.g. the host name) (env TIEREDSTORE_GROUP_REPLICAS)"
    )
    ok = load_settings(env={}, overrides={**REQUIRED, "group.replicas": 2, "group.replica": "a"})
    assert (ok.group.replicas, ok.group.replica) == (2, "a")
    assert load_settings(env={}, overrides=REQUIRED).group.replica == ""  # a single broker


def test_defaults_and_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "sidecar.toml"
    cfg.write_text(
        '[store]\npath = "/from/file"\n[cold]\nurl = "memory://f"\ncluster = "C"\nbroker = "B"\n'
        '[state]\ndir = "/s"\n[tiering]\nsegment_max_bytes = "1M"\nsegment_max_age = "2m"\n'
        '[retention.topics]\nTopicA = "1h"\n'
    )
    env = {"TIEREDSTORE_STORE_PATH": "/from/env", "TIEREDSTORE_TIERING_CONCURRENCY": "7"}
    s = load_settings(cfg, env=env, overrides={"cold.url": "s3://bucket/p", "cold.broker": None})
    assert s.store.path == Path("/from/env")
    assert s.sources["store.path"] == "env TIEREDSTORE_STORE_PATH"
    assert s.cold.url == "s3://bucket/p"
    assert s.sources["cold.url"] == "flag"
    assert s.cold.broker == "B"
    assert s.tiering.segment_max_bytes == 1 << 20
    assert s.tiering.segment_max_age == 120.0
    assert s.tiering.concurrency == 7
    assert s.lease.renew_interval == 10.0
    assert s.retention_for("TopicA") == 3600.0
    assert s.retention_for("Other") == 72 * 3600.0


def test_unknown_keys_and_variables(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[tiering]\nsegment_max_byte = 5\n")
    with pytest.raises(
        ConfigError, match=r"unknown setting 'tiering.segment_max_byte' \(.*c.toml\)"
    ):
        load_settings(cfg, env={})
    with pytest.raises(ConfigError, match="unknown environment variable TIEREDSTORE_COLD_URI"):
        load_settings(env={"TIEREDSTORE_COLD_URI": "x"}, overrides=REQUIRED)
    cfg.write_text("[tiering\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(cfg, env={})
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(tmp_path / "missing.toml", env={})
    with pytest.raises(ConfigError, match=r"missing required setting cold\.url"):
        load_settings(env={}, overrides={**REQUIRED, "cold.url": None})


def test_check_environment(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    good = {**REQUIRED, "store.path": str(tmp_path / "store"), "state.dir": str(tmp_path / "state")}
    ok = load_settings(env={}, overrides=good)
    check_environment(ok)
    assert not (tmp_path / "state").exists()  # checked, not left behind: a run makes it
    missing = load_settings(env={}, overrides={**REQUIRED, "store.path": str(tmp_path / "no")})
    with pytest.raises(ConfigError, match="store directory does not exist"):
        check_environment(missing)
    (tmp_path / "file").write_text("")
    bad = {
        **REQUIRED,
        "store.path": str(tmp_path / "store"),
        "state.dir": str(tmp_path / "file" / "x"),
    }
    bad_state = load_settings(env={}, overrides=bad)
    with pytest.raises(ConfigError, match="state directory is not writable"):
        check_environment(bad_state)


@pytest.mark.parametrize(
    ("text", "value"), [("64M", 64 << 20), ("1GiB", 1 << 30), (5, 5), ("512k", 512 << 10)]
)
def test_parse_size(text: object, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize(
    ("text", "value"), [("500ms", 0.5), ("60", 60.0), ("5m", 300.0), ("72h", 259200.0), (2, 2.0)]
)
def test_parse_duration(text: object, value: float) -> None:
    assert parse_duration(text) == value


# -- docs/configuration.md and docs/sidecar.toml ----------------------------------------
DOCS = Path(__file__).resolve().parents[3] / "docs"
_ROW = re.compile(
    r"^\| `(?P<key>[a-z_]+\.[a-z_]+)` \| (?P<default>.+?) \| `(?P<env>\w+)` \| (?P<reload>\w+) \|"
)


@dataclass(frozen=True)
class DocRow:
    key: str
    default: str
    env: str
    reload: str


def documented() -> dict[str, DocRow]:
    """The key rows of docs/configuration.md (duplicates refused)."""
    rows: dict[str, DocRow] = {}
    for line in (DOCS / "configuration.md").read_text().splitlines():
        m = _ROW.match(line)
        if m:
            assert m["key"] not in rows, f"{m['key']} documented twice"
            rows[m["key"]] = DocRow(m["key"], m["default"], m["env"], m["reload"])
    return rows


def _normalise(value: object) -> object:
    return tuple(value) if isinstance(value, list | tuple) else value


def test_configuration_md_documents_exactly_the_settings() -> None:
    from tieredstore.cli.sidecar.reload import LIVE_KEYS

    rows = documented()
    assert set(rows) == {s.key for s in SETTINGS}
    for s in SETTINGS:
        row = rows[s.key]
        assert row.env == s.env, s.key
        assert row.reload == ("live" if s.key in LIVE_KEYS else "restart"), s.key
        if s.required:
            assert row.default == "*required*", s.key
            continue
        literal = row.default.strip("`")
        value = tomllib.loads(f"v = {literal}")["v"]
        assert _normalise(s.parse(value)) == _normalise(s.default), f"{s.key} default"


def test_example_sidecar_toml_sets_every_key_to_a_valid_value() -> None:
    example = DOCS / "sidecar.toml"
    doc = tomllib.loads(example.read_text())
    in_file = {f"{section}.{name}" for section, table in doc.items() for name in table}
    assert in_file == {s.key for s in SETTINGS if not s.deprecated}  # no deprecated key
    settings = load_settings(example, env={})
    for s in SETTINGS:
        if not s.required:  # the example shows the defaults
            assert _normalise(settings.values[s.key]) == _normalise(s.default), s.key


def _toml_literal(value: object) -> str:
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {_toml_literal(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_literal(v) for v in value) + "]"
    return json.dumps(value)  # strings, ints and booleans are spelt alike in TOML


@pytest.mark.parametrize("key", sorted(documented()))
def test_each_documented_key_refuses_a_bad_value_from_the_file(key: str, tmp_path: Path) -> None:
    value, words = BAD[key]
    tables: dict[str, list[str]] = {}
    for k, v in {**REQUIRED, key: value}.items():
        section, name = k.split(".")
        tables.setdefault(section, []).append(f"{name} = {_toml_literal(v)}")
    cfg = tmp_path / "sidecar.toml"
    cfg.write_text("".join(f"[{s}]\n" + "\n".join(lines) + "\n" for s, lines in tables.items()))
    with pytest.raises(ConfigError) as info:
        load_settings(cfg, env={})
    assert str(info.value).startswith(f"bad value for {key}")
    assert words in str(info.value)
    assert str(info.value).endswith(f"({cfg})")


# -- validation at start: one line, exit 3 ----------------------------------------------
def _run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from tieredstore.cli.main import main

    code = main(["run", "--once", "--progress", "off", *args])
    return code, capsys.readouterr().err


def _start_args(tmp_path: Path, **changes: str) -> list[str]:
    (tmp_path / "store").mkdir(exist_ok=True)
    flags = {
        "--store": str(tmp_path / "store"),
        "--cold": str(tmp_path / "cold"),
        "--cluster": "C",
        "--broker": "B",
        "--state-dir": str(tmp_path / "state"),
        **changes,
    }
    return [x for flag, value in flags.items() if value for x in (flag, value)]


def test_start_refuses_an_unknown_key_in_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "sidecar.toml"
    cfg.write_text('[tiering]\nsegment_max_byte = "1M"\n')
    code, err = _run_cli(["--config", str(cfg), *_start_args(tmp_path)], capsys)
    assert code == 3
    assert err == (
        "tieredstore run: unknown setting 'tiering.segment_max_byte' (did you mean "
        f"tiering.segment_max_bytes?) ({cfg})\n"
    )


def test_start_refuses_a_bad_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIEREDSTORE_COLD_URL", "s3://Bad_Bucket!/x")
    code, err = _run_cli(_start_args(tmp_path, **{"--cold": ""}), capsys)
    assert code == 3
    assert err.count("\n") == 1
    assert "bad value for cold.url" in err
    assert err.rstrip().endswith("(env TIEREDSTORE_COLD_URL)")


def test_start_refuses_an_unwritable_state_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    code, err = _run_cli(_start_args(tmp_path, **{"--state-dir": str(tmp_path / "file/x")}), capsys)
    assert code == 3
    assert err.count("\n") == 1
    assert "state directory is not writable" in err


@pytest.mark.slow
def test_start_refuses_an_unreachable_cold_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    args = _start_args(tmp_path, **{"--cold": "s3://bucket/prefix", "--endpoint-url": closed})
    code, err = _run_cli(args, capsys)
    assert code == 3
    assert err.count("\n") == 1
    assert err.startswith(
        f"tieredstore run: cold store s3://bucket/prefix unreachable at endpoint {closed}: "
    )
    assert not (tmp_path / "state").exists(), "nothing started, nothing left behind"


def test_every_key_has_a_typed_field_and_every_field_a_key() -> None:
    """The typed sections (``settings.tiering.concurrency``) and :data:`SETTINGS` agree
    key for key, so mypy sees every use of a setting and none is left out."""
    typed = {
        f"{name}.{f.name}"
        for name, section in SECTIONS.items()
        for f in dataclasses.fields(section)
    }
    assert typed == {s.key for s in SETTINGS}
    for name, section in SECTIONS.items():
        assert name == section.SECTION


def test_typed_fields_hold_the_parsed_values_with_their_declared_types() -> None:
    settings = load_settings(DOCS / "sidecar.toml", env={})
    for name, section in SECTIONS.items():
        hints = typing.get_type_hints(section)
        typed = getattr(settings, name)
        assert isinstance(typed, section)
        for f in dataclasses.fields(section):
            value = getattr(typed, f.name)
            assert value == settings.values[f"{name}.{f.name}"]
            expected = typing.get_origin(hints[f.name]) or hints[f.name]
            assert isinstance(value, expected), f"{name}.{f.name}: {value!r}"


def test_redacted_values_read_as_the_file_would_hold_them() -> None:
    """The reload's log lines show ``'/tmp/state'`` and ``'sync'``, not reprs of objects."""
    s = load_settings(env={}, overrides={**REQUIRED, "cold.url": "memory://user:pw@x"})
    shown = s.redacted()
    assert shown["state.dir"] == "/tmp/state"
    assert shown["tiering.guard"] == "sync"
    assert repr(shown["tiering.init_policy"]) == "'earliest'"
    assert shown["cold.url"] == "memory://***@x"
