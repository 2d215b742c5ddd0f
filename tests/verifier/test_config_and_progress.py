"""``tieredstore verify`` speaks as the other commands do: ``--config`` (the sidecar's
own file), ``--store`` / ``--state-dir`` (``--hot`` / ``--metadata`` kept as aliases),
and one line per stage on stderr while it runs (``--progress``)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.cli.main import main as cli_main

from .conftest import World, sample_result


def _config(path: Path, world: World, state: Path) -> Path:
    path.write_text(
        f'[store]\npath = "{world.hot}"\n'
        f'[cold]\nurl = "{world.cold}"\ncluster = "{CLUSTER}"\nbroker = "{BROKER}"\n'
        f'[state]\ndir = "{state}"\n'
    )
    return path


@pytest.mark.spark
def test_verify_reads_the_sidecar_config_and_reports_each_stage(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path / "sidecar.toml", world, tmp_path / "state")
    out = tmp_path / "report"
    code = cli_main(
        ["verify", "--config", str(config), "--out", str(out), "--lag-allowance", "0",
         "--progress", "on"]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out.splitlines() == [
        f"CLEAN: 0 anomalies in 6 queues; report: {out / 'report.html'}"
    ]
    params = json.loads((out / "report.json").read_text())["parameters"]
    assert (params["hot"], params["cold"]) == (str(world.hot), str(world.cold))
    assert (params["cluster"], params["broker"]) == (CLUSTER, BROKER)
    assert params["catalogue"] is None  # the config's state dir holds no catalogue
    lines = captured.err.splitlines()
    assert all(re.match(r"tieredstore verify: \[ *[\d.]+ m?s\] \S", line) for line in lines)
    stages = [line.split("] ", 1)[1] for line in lines]
    assert stages[0] == f"checking the cold store at {world.cold}"
    assert "reading 6 hot queues" in stages
    assert any(
        re.fullmatch(r"checking \d+ segments of 6 queues \(offsets level\)", s) for s in stages
    )
    assert stages.index("reading 6 hot queues") < stages.index("looking for anomalies")
    assert "verified 6 queues: 6 ok; 0 anomalies" in stages
    assert stages[-1] == f"writing the reports into {out}"


@pytest.mark.spark
def test_store_and_state_dir_are_the_flag_names_hot_and_metadata_their_aliases(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "state"
    empty.mkdir()
    for store, state in (("--store", "--state-dir"), ("--hot", "--metadata")):
        code = cli_main(
            ["verify", store, str(world.hot), "--cold", str(world.cold), "--cluster", CLUSTER,
             "--broker", BROKER, "--out", str(tmp_path / "out"), state, str(empty)]
        )  # fmt: skip
        assert code == 3  # the state dir is the catalogue to check: there is none
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and "no catalogue here" in err[0], err


def test_verify_without_locations_or_config_names_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TIEREDSTORE_CONFIG", raising=False)
    code = cli_main(["verify", "--cold", str(tmp_path), "--out", str(tmp_path / "r")])
    assert code == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "tieredstore verify: could not run: missing --store, --cluster, --broker "
        "(or --config naming the sidecar's config file)"
    ]


def test_a_bad_config_is_one_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "sidecar.toml"
    config.write_text('[cold]\nurl = "x"\nclustre = "C"\n')
    code = cli_main(["verify", "--config", str(config), "--store", str(tmp_path)])
    assert code == 3
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "unknown setting 'cold.clustre'" in line and str(config) in line


def test_the_last_stage_line_counts_the_queues_by_status_worst_first(tmp_path: Path) -> None:
    from dataclasses import replace

    from tieredstore.findings import FindingKind
    from tieredstore.verifier.cli import _queues_done
    from tieredstore.verifier.outcome import Anomaly

    base = sample_result(tmp_path, [])
    q = base.queues[0]
    queues = tuple(replace(q, topic=t) for t in ("A", "B", "C", "D"))
    anomalies = (
        Anomaly("B", 0, None, FindingKind.ORPHAN_OBJECT, None, 1, "k", "orphan"),
        Anomaly("C", 0, 0, FindingKind.GAP, 5, 5, None, "gap"),
        Anomaly("C", 0, 7, FindingKind.GAP, 9, 2, None, "gap"),
    )
    result = replace(base, queues=queues, anomalies=anomalies)
    assert _queues_done(result) == "verified 4 queues: 1 corrupt, 1 dirty, 2 ok; 3 anomalies"


def test_the_config_gives_each_location_flag_its_setting_a_flag_winning(tmp_path: Path) -> None:
    from tieredstore.state_dir import CATALOGUE_FILE
    from tieredstore.verifier.cli import add_arguments, with_config

    state = tmp_path / "state"
    state.mkdir()
    config = tmp_path / "sidecar.toml"
    config.write_text(
        f'[store]\npath = "{tmp_path / "store"}"\n'
        f'[cold]\nurl = "memory://c"\ncluster = "{CLUSTER}"\nbroker = "{BROKER}"\n'
        'endpoint_url = "http://127.0.0.1:9000"\nregion = "eu-west-1"\n'
        f'[state]\ndir = "{state}"\n'
    )
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = with_config(parser.parse_args(["--config", str(config), "--broker", "other"]))
    assert (args.hot, args.cold, args.cluster) == (tmp_path / "store", "memory://c", CLUSTER)
    assert args.broker == "other"  # the flag wins over the file
    assert (args.endpoint_url, args.region) == ("http://127.0.0.1:9000", "eu-west-1")
    assert args.metadata is None  # the state dir holds no catalogue: no drift check
    (state / CATALOGUE_FILE).touch()
    args = with_config(parser.parse_args(["--config", str(config), "--region", "us-east-2"]))
    assert (args.metadata, args.region) == (state, "us-east-2")
