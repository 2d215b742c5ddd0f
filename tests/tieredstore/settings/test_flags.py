"""The flags that stand for a setting (said once) and a setting's default read from its
declaration."""

from __future__ import annotations

import argparse

import pytest

from tieredstore.settings.declaration import ColdSettings, TieringSettings
from tieredstore.settings.flags import SETTING_FLAGS, setting_help, settings_by_dest
from tieredstore.settings.loader import SETTINGS, load_settings


def test_every_flag_stands_for_a_declared_setting() -> None:
    declared = {s.key for s in SETTINGS}
    assert set(SETTING_FLAGS.values()) <= declared
    assert all(flag.startswith("--") for flag in SETTING_FLAGS)


def test_a_flags_help_ends_with_its_setting() -> None:
    assert setting_help("--broker", "broker name") == "broker name [cold.broker]"
    assert setting_help("--log-format") == "[log.format]"
    assert setting_help("--state-dir", "state dir", more="checked when there") == (
        "state dir [state.dir; checked when there]"
    )
    with pytest.raises(KeyError):
        setting_help("--out", "not a setting's flag")


def test_the_dests_are_argparses_own_unless_renamed() -> None:
    dests = settings_by_dest()
    assert dests["store"] == "store.path"
    assert dests["state_dir"] == "state.dir"
    assert dests["endpoint_url"] == "cold.endpoint_url"
    renamed = settings_by_dest({"--store": "hot"})
    assert renamed["hot"] == "store.path" and "store" not in renamed
    with pytest.raises(KeyError, match="--hot"):
        settings_by_dest({"--hot": "hot"})


def test_the_dests_are_the_ones_argparse_gives() -> None:
    p = argparse.ArgumentParser()
    for flag in SETTING_FLAGS:
        p.add_argument(flag)
    args = p.parse_args([x for flag in SETTING_FLAGS for x in (flag, f"v{flag}")])
    given = {key: getattr(args, dest) for dest, key in settings_by_dest().items()}
    assert given == {key: f"v{flag}" for flag, key in SETTING_FLAGS.items()}


def test_a_default_is_read_from_its_declaration() -> None:
    settings = load_settings(
        None,
        env={},
        overrides={
            "store.path": "/tmp/store",
            "cold.url": "memory://x",
            "cold.cluster": "C",
            "cold.broker": "B",
            "state.dir": "/tmp/state",
        },
    )
    assert ColdSettings.default_of("multipart_threshold") == 64 << 20
    assert ColdSettings.default_of("multipart_threshold") == settings.cold.multipart_threshold
    assert TieringSettings.default_of("concurrency") == settings.tiering.concurrency
    with pytest.raises(KeyError, match=r"cold\.url is required"):
        ColdSettings.default_of("url")
    with pytest.raises(KeyError):
        ColdSettings.default_of("no_such_key")
