"""The catalogue remembers the cold store it caches and refuses another one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.backends.factory import canonical_cold_url
from tieredstore.clock import VirtualClock
from tieredstore.errors import ConfigError
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.schema import MIGRATIONS


def _open(state: Path, url: str | None, **kw: object) -> Catalogue:
    return Catalogue.open(state, cluster=CLUSTER, broker=BROKER, cold_url=url, **kw)  # type: ignore[arg-type]


def test_spellings_of_one_store_are_one_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cold = tmp_path / "cold"
    cold.mkdir()
    (tmp_path / "link").symlink_to(cold)
    monkeypatch.chdir(tmp_path)
    same = [str(cold), f"{cold}/", f"file://{cold}", f"file://localhost{cold}//", "cold",
            str(tmp_path / "link")]  # fmt: skip
    assert {canonical_cold_url(u) for u in same} == {f"file://{cold}"}
    assert canonical_cold_url("s3a://bkt/p/") == canonical_cold_url("s3://key:secret@bkt/p")
    assert canonical_cold_url("s3://bkt/p") == "s3://bkt/p"  # no credentials kept
    assert canonical_cold_url("memory://a/") == "memory://a"
    assert len({canonical_cold_url(u) for u in ["s3://bkt/p", "s3://bkt/q", "memory://p"]}) == 3


def test_another_cold_store_is_refused_with_one_line(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _open(state, str(tmp_path / "cold")).close()
    _open(state, f"file://{tmp_path}/cold/").close()  # the same store, spelt otherwise
    with pytest.raises(ConfigError) as info:
        _open(state, str(tmp_path / "other"))
    message = str(info.value)
    assert "\n" not in message
    assert f"caches cold store file://{tmp_path}/cold, not file://{tmp_path}/other" in message
    with pytest.raises(ConfigError, match="caches cold store"):
        _open(state, "memory://elsewhere", read_only=True)  # status, gc: refused too
    _open(state, str(tmp_path / "cold")).close()  # the refusal released the writer lock


def test_a_catalogue_without_a_url_adopts_the_current_one_once(
    tmp_path: Path,
) -> None:
    state, clock = tmp_path / "state", VirtualClock()
    with _open(state, None, clock=clock, migrations=MIGRATIONS[:3]) as old:  # 0.2: schema v3
        row = old.queues.ensure("T", 0, 7)
    with _open(state, "memory://first", read_only=True, clock=clock, migrations=MIGRATIONS[:3]):
        pass  # read-only: no check, nothing recorded
    with _open(state, None) as migrated:  # migrated, still no URL: not adopted without one
        assert migrated.queues.all() == [row]
    with _open(state, "memory://first", read_only=True):
        pass  # nothing recorded yet: a reader adopts nothing and refuses nothing
    with _open(state, "memory://first") as adopted:
        assert adopted.queues.all() == [row]
    with pytest.raises(ConfigError, match="caches cold store memory://first, not memory://second"):
        _open(state, "memory://second")


@pytest.mark.slow
def test_run_with_another_cold_url_exits_3_and_writes_nothing(tmp_path: Path) -> None:
    synthesize(tmp_path / "store", SynthSpec(topics=1, queues=1, messages=50))
    common = ["--store", str(tmp_path / "store"), "--cluster", "C", "--broker", "B",
              "--state-dir", str(tmp_path / "state")]  # fmt: skip

    def run(cold: Path) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "tieredstore.cli", "run", "--once", "--cold", str(cold)]
        return subprocess.run([*argv, *common], capture_output=True, text=True, timeout=120)

    assert run(tmp_path / "cold").returncode == 0
    moved = run(tmp_path / "other")
    assert moved.returncode == 3, moved.stderr
    (line,) = [ln for ln in moved.stderr.splitlines() if "caches cold store" in ln]
    assert line.startswith("tieredstore run: state directory caches cold store")
    assert not (tmp_path / "other").exists() or not any((tmp_path / "other").rglob("*"))
    assert run(tmp_path / "cold").returncode == 0
