"""Wrong input an operator meets in the first week: refused in one line, exit 3.

A ``--store`` that is not a broker store (the parent of the real one), a state dir with
no catalogue or one of another broker, and non-finite numbers in the configuration.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tieredstore.errors import ConfigError
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.settings.loader import SETTINGS, load_settings

REQUIRED = {
    "store.path": "/tmp/store",
    "cold.url": "memory://x",
    "cold.cluster": "C",
    "cold.broker": "B",
    "state.dir": "/tmp/state",
}

#: every setting that holds a number (a duration, a size, a count or a port)
NUMERIC = sorted(
    s.key
    for s in SETTINGS
    if isinstance(s.default, int | float) and not isinstance(s.default, bool)
)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tieredstore.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _toml(values: dict[str, str]) -> str:
    tables: dict[str, list[str]] = {}
    for key, literal in values.items():
        section, name = key.split(".")
        tables.setdefault(section, []).append(f"{name} = {literal}")
    return "".join(f"[{s}]\n" + "\n".join(lines) + "\n" for s, lines in tables.items())


@pytest.mark.parametrize("literal", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("key", NUMERIC)
def test_non_finite_numbers_in_toml_are_refused(key: str, literal: str, tmp_path: Path) -> None:
    assert {"lease.renew_interval", "tiering.tick_interval"} <= set(NUMERIC)
    cfg = tmp_path / "sidecar.toml"
    required = {k: f'"{v}"' for k, v in REQUIRED.items()}
    cfg.write_text(_toml({**required, key: literal}))
    with pytest.raises(ConfigError) as info:
        load_settings(cfg, env={})
    message = str(info.value)
    assert message.startswith(f"bad value for {key}: ") and message.endswith(f"({cfg})")
    assert "\n" not in message


@pytest.mark.parametrize("text", ["1" + "0" * 400, "1" + "0" * 400 + "s", "inf", "nan"])
def test_overflowing_durations_and_sizes_from_env_are_refused(text: str) -> None:
    for key in ("tiering.tick_interval", "tiering.segment_max_bytes"):
        env = {"TIEREDSTORE_" + key.upper().replace(".", "_"): text}
        with pytest.raises(ConfigError, match=f"bad value for {key}"):
            load_settings(env=env, overrides=REQUIRED)


def test_a_non_finite_per_topic_retention_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "sidecar.toml"
    cfg.write_text("[retention.topics]\nTopicA = inf\n")
    with pytest.raises(ConfigError, match=r"bad value for retention.topics: not a finite"):
        load_settings(cfg, env={}, overrides=REQUIRED)


def test_a_synth_size_flag_never_overflows_into_a_traceback(tmp_path: Path) -> None:
    done = _cli(
        "synth", "--out", str(tmp_path / "s"), "--commitlog-file-size", "1" + "0" * 400 + "K"
    )
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


# -- a --store that is not a broker store ------------------------------------------------
@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic store tiered once: ``<root>/store``, ``<root>/cold``, ``<root>/state``."""
    root = tmp_path_factory.mktemp("tiered")
    synthesize(root / "store", SynthSpec(messages=200, topics=2, queues=2))
    done = _cli("run", "--once", "--progress", "off", *_sidecar(root, store=root / "store"))
    assert done.returncode == 0, done.stderr
    return root


def _sidecar(root: Path, *, store: Path, broker: str = "B") -> list[str]:
    return [
        "--store",
        str(store),
        "--cold",
        str(root / "cold"),
        "--cluster",
        "C",
        "--broker",
        broker,
        "--state-dir",
        str(root / "state"),
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [["run", "--once", "--progress", "off"], ["status"], ["status", "--json"], ["inspect"]],
)
def test_the_parent_of_a_store_is_refused_with_exit_3(tiered: Path, command: list[str]) -> None:
    flags = _sidecar(tiered, store=tiered)
    if command == ["inspect"]:
        flags = ["--store", str(tiered)]
    done = _cli(*command, *flags)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr == (
        f"tieredstore {command[0]}: not a broker store: no commitlog/ and consumequeue/ "
        f"(give storePathRootDir, the directory holding commitlog/ and consumequeue/) "
        f"({tiered})\n"
    )
    assert done.stdout == ""


@pytest.mark.slow
def test_status_of_a_state_dir_with_nothing_tiered_is_refused(tiered: Path) -> None:
    empty = _sidecar(tiered, store=tiered / "store")
    empty[empty.index("--state-dir") + 1] = str(tiered / "no-state")
    done = _cli("status", *empty)
    assert done.returncode == 3
    assert done.stderr.startswith("tieredstore status: no catalogue here: nothing tiered")
    assert done.stderr.count("\n") == 1
    done = _cli("status", *_sidecar(tiered, store=tiered / "store", broker="b"))
    assert done.returncode == 3
    assert done.stderr.startswith(
        "tieredstore status: catalogue belongs to cluster 'C' broker 'B', not cluster 'C' "
        "broker 'b'"
    )
    assert done.stderr.count("\n") == 1
    assert _cli("status", *_sidecar(tiered, store=tiered / "store")).returncode == 0


# -- the command line itself -------------------------------------------------------------
def test_version_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    from tieredstore.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    printed = capsys.readouterr().out
    assert re.fullmatch(r"tieredstore \d+\.\d+\.\d+\S*\n", printed)
    # The version printed, pyproject's and the CHANGELOG's newest heading are one.
    root = Path(__file__).resolve().parents[2]
    declared = re.search(r'^version = "([^"]+)"', (root / "pyproject.toml").read_text(), re.M)
    newest = re.search(r"^## \[(\d+\.\d+\.\d+)\]", (root / "CHANGELOG.md").read_text(), re.M)
    assert declared and newest
    assert printed == f"tieredstore {declared[1]}\n" and declared[1] == newest[1]


def test_flags_are_never_abbreviated(tiered: Path) -> None:
    """``--stor`` must not silently mean ``--store``."""
    done = _cli("inspect", "--stor", str(tiered / "store"))
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr.splitlines()[-1].startswith("tieredstore inspect: error:")


def test_an_unknown_flag_is_one_line_naming_the_command(tiered: Path) -> None:
    done = _cli("inspect", "--store", str(tiered / "store"), "--colour")
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr == (
        "tieredstore inspect: error: unrecognized arguments: --colour "
        "(see tieredstore inspect --help)\n"
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["inspect", "--stor", "x"], "tieredstore inspect: error: unrecognized arguments: "
         "--stor; did you mean --store? (see tieredstore inspect --help)"),
        (["lease", "show", "--brokr", "b"], "tieredstore lease: error: unrecognized "
         "arguments: --brokr; did you mean --broker? (see tieredstore lease --help)"),
        (["run", "--onse"], "tieredstore run: error: unrecognized arguments: --onse; did "
         "you mean --once? (see tieredstore run --help)"),
    ],
)  # fmt: skip
def test_a_typod_flag_is_named_first_with_the_closest_flag(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tieredstore.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 3
    assert capsys.readouterr().err == line + "\n"  # one line: no usage before it


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["verify", "--lag-allowance", "-5m"], "bad lag allowance '-5m': must not be negative"),
        (["read", "--timestamp", "-1d", "--topic", "T", "--queue", "0"],
         "'-1d' is neither epoch milliseconds nor an ISO 8601 time"),
        (["gc", "--grace", "-5m", "--store", "/", "--state-dir", "/nonexistent/x"],
         "bad value for gc.grace: not a duration: '-5m'"),
    ],
)  # fmt: skip
def test_a_negative_value_is_a_value_not_a_flag(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``-5m`` after a flag is its (bad) value: the flag's own check names it, never
    argparse's "expected one argument"."""
    from tieredstore.cli.main import main

    where = ["--cold", str(tmp_path), "--cluster", "C", "--broker", "B"]
    extra = ["--hot", str(tmp_path), "--out", str(tmp_path / "o")] if argv[0] == "verify" else []
    try:
        code = main([*argv, *where, *extra])
    except SystemExit as exc:
        code = int(str(exc.code))
    err = capsys.readouterr().err
    assert code == 3 and err.count("\n") == 1, err
    assert error in err and "expected one argument" not in err


def test_unknown_settings_and_variables_suggest_the_closest(tmp_path: Path) -> None:
    toml = tmp_path / "s.toml"
    toml.write_text('[tiering]\nsegment_max_byte = "1M"\n')
    with pytest.raises(ConfigError, match=r"unknown setting 'tiering.segment_max_byte' \(did "
                       r"you mean tiering.segment_max_bytes\?\)"):  # fmt: skip
        load_settings(toml, env={})
    with pytest.raises(ConfigError, match=r"TIEREDSTORE_COLD_URI \(did you mean "
                       r"TIEREDSTORE_COLD_URL\?\)"):  # fmt: skip
        load_settings(env={"TIEREDSTORE_COLD_URI": "x"})
    with pytest.raises(ConfigError, match=r"unknown setting 'nothing.alike'$"):
        load_settings(env={}, overrides={"nothing.alike": 1})


@pytest.mark.slow
def test_read_timestamp_takes_an_iso_time_like_export_and_restore(tiered: Path) -> None:
    from tieredstore.hot.synth import SynthSpec as Spec

    first_ms = Spec().start_time
    iso = datetime.fromtimestamp(first_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    where = _sidecar(tiered, store=tiered / "store")[2:]  # read takes no --store
    by_ms = _cli(
        "read", "--topic", "SynthTopic0", "--queue", "0", "--timestamp", str(first_ms), *where
    )
    by_iso = _cli("read", "--topic", "SynthTopic0", "--queue", "0", "--timestamp", iso, *where)
    assert by_ms.returncode == 0, by_ms.stderr
    assert by_iso.returncode == 0, by_iso.stderr
    assert by_iso.stdout == by_ms.stdout and json.loads(by_iso.stdout)["queueOffset"] == 0
    bad = _cli("read", "--topic", "T", "--queue", "0", "--timestamp", "yesterday", *where)
    assert bad.returncode == 3
    assert "'yesterday' is neither epoch milliseconds nor an ISO 8601 time" in bad.stderr


# -- synth: readable help, recent times, --append ----------------------------------------
def test_synth_help_gives_every_flag_a_readable_help() -> None:
    import argparse

    from tieredstore.cli.commands import synth

    parser = argparse.ArgumentParser(prog="tieredstore synth")
    synth.add_arguments(parser)
    for action in parser._actions:
        assert action.help, f"{action.option_strings} has no help"
    text = parser.format_help()
    assert "(default (" not in text and "(default 16:1024)" in text


@pytest.mark.slow
def test_synth_stamps_recent_times_and_append_continues_the_store(tmp_path: Path) -> None:
    from tieredstore.hot.store import HotStore
    from tieredstore.hot.synth import SyntheticStore

    out = tmp_path / "s"
    before = time.time_ns() // 1_000_000
    made = _cli("synth", "--out", str(out), "--messages", "64", "--topics", "1", "--queues", "2")
    assert made.returncode == 0, made.stderr
    first = SyntheticStore.open(out)
    assert before - 64 <= first.last_store_time <= time.time_ns() // 1_000_000
    hot = HotStore(out)
    ranges = {q: hot.queue_range(q.topic, q.queue_id) for q in hot.queues()}
    assert sum(r.count for r in ranges.values()) == 64
    more = _cli("synth", "--out", str(out), "--append", "10")
    assert more.returncode == 0, more.stderr
    assert more.stderr == f"appended 10 messages to {out} (74 in all)\n"
    again = HotStore(out)
    grown = {q: again.queue_range(q.topic, q.queue_id) for q in again.queues()}
    assert set(grown) == set(ranges)  # same topics and queues, read from synth.json
    assert all(grown[q].min == ranges[q].min and grown[q].max >= ranges[q].max for q in grown)
    assert sum(r.count for r in grown.values()) == 74
    last = max(
        again.read_message(q.topic, q.queue_id, grown[q].max - 1).store_timestamp for q in grown
    )
    assert last >= first.last_store_time
    refused = _cli("synth", "--out", str(tmp_path / "not-synth"), "--append", "5")
    assert refused.returncode == 3 and refused.stderr.count("\n") == 1
    assert "--append: not a synthetic store" in refused.stderr


@pytest.mark.slow
def test_restore_check_names_a_missing_journal_and_another_cold_store(
    tiered: Path, tmp_path: Path
) -> None:
    cold = ["--cluster", "C", "--broker", "B", "--cold"]
    empty = tmp_path / "empty"
    empty.mkdir()
    done = _cli("restore", "--check", *cold, str(tiered / "cold"), "--out", str(empty))
    assert done.returncode == 3
    assert done.stderr == (
        "tieredstore restore: nothing to check: no tieredstore-restore.json here "
        f"(give the --out of a restore) ({empty})\n"
    )
    out = tmp_path / "restored"
    assert _cli("restore", *cold, str(tiered / "cold"), "--out", str(out)).returncode == 0
    other = tmp_path / "other-cold"
    shutil.copytree(tiered / "cold", other)  # the same bytes, but not the store it came from
    done = _cli("restore", "--check", *cold, str(other), "--out", str(out))
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr == (
        f"tieredstore restore: this store was restored from {tiered / 'cold'} (C/B), not from "
        f"{other} (C/B); check it against the cold store it came from ({out})\n"
    )
    same = _cli("restore", "--check", *cold, str(tiered / "cold"), "--out", str(out))
    assert same.returncode == 0 and same.stdout.startswith("CLEAN: 200 messages")


def test_the_verifier_does_not_count_the_sidecars_own_lock_files(tiered: Path) -> None:
    from tieredstore.verifier.readers import ColdLocation, list_cold_objects

    locks = sorted(p.name for p in (tiered / "cold").rglob(".*.lock"))
    assert "._lease.json.lock" in locks  # the lease is written with replace(): it has one
    listing = list_cold_objects(ColdLocation(str(tiered / "cold"), {}), "C", "B")
    assert listing.unrecognised == ()


@pytest.mark.parametrize("text", ["1" + "0" * 400, "1" + "0" * 400 + "s", "1" + "0" * 400 + ".5m"])
def test_a_lag_allowance_too_large_for_a_float_is_refused(text: str) -> None:
    from tieredstore.verifier.vocabulary import parse_lag_allowance

    with pytest.raises(ConfigError, match="bad lag allowance"):
        parse_lag_allowance(text)


def test_inspect_marks_a_cut_topic_name(tmp_path: Path) -> None:
    synthesize(tmp_path / "s", SynthSpec(messages=20, topics=1, queues=1, long_topic=True))
    done = _cli("inspect", "--store", str(tmp_path / "s"))
    assert done.returncode == 0, done.stderr
    checkpoint, blank, _header, row = done.stdout.splitlines()
    assert row.split()[0] == "SynthTopicLong" + "x" * 25 + "…"  # 40 characters, cut visibly
    # The checkpoint, as the README promises, in the text output too (not only --json).
    assert (
        re.fullmatch(
            r"checkpoint: commitlog flushed to \S+Z, consume queues to \S+Z, index to \S+Z; "
            r"master flushed offset \d+, confirm offset \d+",
            checkpoint,
        )
        and blank == ""
    )


@pytest.mark.slow
def test_lease_show_of_a_released_lease_and_of_a_typod_broker(tiered: Path) -> None:
    where = ["--cold", str(tiered / "cold"), "--cluster", "C"]
    shown = _cli("lease", "show", *where, "--broker", "B")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "holder:     nobody (released)"  # run --once released it
    assert re.fullmatch(r"epoch:      1 \(the next sidecar takes 2 at once\)", lines[1])
    assert lines[2].startswith("released:   20") and len(lines) == 3
    assert "lease time" not in shown.stdout and "from this host" not in shown.stdout
    typo = _cli("lease", "show", *where, "--broker", "b")
    assert typo.returncode == 3 and typo.stdout == ""
    assert typo.stderr.startswith("tieredstore lease: nothing tiered for broker 'b' of cluster")
    assert "(brokers tiered in that cluster there: B)" in typo.stderr


def test_synth_append_never_stamps_the_future(tmp_path: Path) -> None:
    """A live broker stamps what it stores now: the appended batch ends about now."""
    from tieredstore.hot.store import HotStore

    out = tmp_path / "s"
    flags = ["--topics", "1", "--queues", "1", "--interval-ms", "1000"]
    made = _cli("synth", "--out", str(out), "--messages", "4", *flags)
    assert made.returncode == 0, made.stderr
    more = _cli("synth", "--out", str(out), "--append", "30")
    after = time.time_ns() // 1_000_000
    assert more.returncode == 0, more.stderr
    hot = HotStore(out)
    (q,) = hot.queues()
    stamps = [hot.read_message(q.topic, q.queue_id, i).store_timestamp for i in range(34)]
    assert stamps == sorted(stamps) and stamps[-1] <= after  # 30 s apart on the old code
    assert stamps[-1] >= after - 60_000  # still recent
