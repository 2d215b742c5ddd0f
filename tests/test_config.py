"""Configuration: precedence, and one validation test for every key."""

from __future__ import annotations

from pathlib import Path

import pytest

from tieredstore.config import (
    SETTINGS,
    check_environment,
    load_settings,
    parse_duration,
    parse_size,
)
from tieredstore.errors import ConfigError

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
    "cold.url": ("s3://Bad_Bucket!/x", "no valid bucket name"),
    "cold.cluster": ("a/b", "not a valid name"),
    "cold.broker": ("..", "not a valid name"),
    "cold.endpoint_url": (["x"], "not a string"),
    "cold.region": ({"a": 1}, "not a string"),
    "cold.multipart_threshold": ("lots", "not a size"),
    "state.dir": (True, "not a string"),
    "tiering.segment_max_bytes": ("0", "must be positive"),
    "tiering.segment_max_messages": (-1, "must be positive"),
    "tiering.segment_max_age": ("soon", "not a duration"),
    "tiering.tick_interval": (0, "must be positive"),
    "tiering.concurrency": ("four", "invalid literal"),
    "tiering.read_batch_bytes": (True, "not a boolean"),
    "tiering.init_policy": ("oldest", "not earliest, latest or timestamp"),
    "tiering.guard": ("maybe", "is not one of checkpoint, none"),
    "tiering.guard_age": ("a while", "not a duration"),
    "tiering.include_topics": (5, "not a list of strings"),
    "tiering.exclude_topics": ([1], "not a list of strings"),
    "tiering.system_topics": ({"a": 1}, "not a list of strings"),
    "tiering.include_retry": ("perhaps", "not a boolean"),
    "tiering.include_dlq": (2, "not a boolean"),
    "lease.renew_interval": ("-5s", "not a duration"),
    "lease.wait": ("sometimes", "not a boolean"),
    "retention.default": ("3 weeks", "not a duration"),
    "retention.topics": ("TopicA=1h", "a table of topic = duration"),
    "retention.interval": (0, "must be positive"),
    "gc.grace": ("never", "not a duration"),
    "http.bind": ([], "not a string"),
    "http.port": (70000, "not in 0..65535"),
    "http.enabled": ("yes please", "not a boolean"),
    "log.format": ("xml", "is not one of text, json"),
    "log.level": ("loud", "is not one of debug"),
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


def test_defaults_and_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "sidecar.toml"
    cfg.write_text(
        '[store]\npath = "/from/file"\n[cold]\nurl = "memory://f"\ncluster = "C"\nbroker = "B"\n'
        '[state]\ndir = "/s"\n[tiering]\nsegment_max_bytes = "1M"\nsegment_max_age = "2m"\n'
        '[retention.topics]\nTopicA = "1h"\n'
    )
    env = {"TIEREDSTORE_STORE_PATH": "/from/env", "TIEREDSTORE_TIERING_CONCURRENCY": "7"}
    s = load_settings(cfg, env=env, overrides={"cold.url": "s3://bucket/p", "cold.broker": None})
    assert s["store.path"] == "/from/env"
    assert s.sources["store.path"] == "env TIEREDSTORE_STORE_PATH"
    assert s.cold_url == "s3://bucket/p"
    assert s.sources["cold.url"] == "flag"
    assert s.broker == "B"
    assert s["tiering.segment_max_bytes"] == 1 << 20
    assert s["tiering.segment_max_age"] == 120.0
    assert s["tiering.concurrency"] == 7
    assert s["lease.renew_interval"] == 10.0
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
    assert (tmp_path / "state").is_dir()
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
