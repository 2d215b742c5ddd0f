"""The developer loop: the Makefile, ``make help``, the pre-commit hooks and the docs agree.

* every name in ``.PHONY`` is a target the Makefile defines (no phantom target), and
  every target a ``## target:`` comment describes is phony and defined;
* ``make help`` lists every described target (it reads the same comments);
* every ``make X`` that README.md or CONTRIBUTING.md names is a target;
* ``.pre-commit-config.yaml`` runs ruff format, ruff check and lint-imports from the venv.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = (ROOT / "Makefile").read_text()

_TARGET = re.compile(r"^([A-Za-z0-9_./$()-]+):(?!=)", re.MULTILINE)
_DESCRIBED = re.compile(r"^## ([a-z-]+):", re.MULTILINE)
#: ``make X`` in a code span or at the start of a shell-block line.
_MAKE_IN_DOCS = re.compile(r"(?:`|^)make ([\w./-]+)", re.MULTILINE)


#: The Makefile's variables that name a target (``$(STAMP)``), as their defaults expand.
_VARIABLES = {"$(STAMP)": ".venv/.installed"}


def _targets() -> set[str]:
    """The rules' targets (special ``.X`` targets left out), variables expanded."""
    found = (_VARIABLES.get(t, t) for t in _TARGET.findall(MAKEFILE))
    return {t for t in found if not t.startswith(".PHONY") and t != ".DEFAULT_GOAL"}


def _phony() -> set[str]:
    lines = re.findall(r"^\.PHONY:(.*)$", MAKEFILE, re.MULTILINE)
    return {name for line in lines for name in line.split()}


def test_phony_names_only_targets_that_exist() -> None:
    phantom = _phony() - _targets()
    assert not phantom, f".PHONY names targets the Makefile does not define: {sorted(phantom)}"


def test_every_described_target_is_phony_and_defined() -> None:
    described = set(_DESCRIBED.findall(MAKEFILE))
    assert {"help", "fmt", "lint", "test"} <= described
    assert described <= _targets(), sorted(described - _targets())
    assert described == _phony(), "a described target is not phony, or a phony one undescribed"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_help_lists_every_described_target() -> None:
    out = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    listed = {line.split()[0] for line in out.splitlines() if line.strip() and line[2] != " "}
    assert listed == set(_DESCRIBED.findall(MAKEFILE))


@pytest.mark.parametrize("doc", ["README.md", "CONTRIBUTING.md"])
def test_every_make_target_the_docs_name_exists(doc: str) -> None:
    named = set(_MAKE_IN_DOCS.findall((ROOT / doc).read_text()))
    assert named, f"{doc} names no make target"
    missing = named - _targets()
    assert not missing, f"{doc} names make targets that do not exist: {sorted(missing)}"


def test_pre_commit_runs_the_lint_of_make_lint() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    entries = [hook["entry"] for repo in config["repos"] for hook in repo["hooks"]]
    lint = re.search(r"^lint:.*\n((?:\t.*\n)+)", MAKEFILE, re.MULTILINE)
    assert lint is not None
    tools = [
        line.strip().split()[0].replace("$(BIN)", ".venv/bin") for line in lint[1].splitlines()
    ]
    assert sorted({e.split()[0] for e in entries}) == sorted(set(tools))
    assert any(e.startswith(".venv/bin/ruff format") for e in entries)
    assert any(e.startswith(".venv/bin/ruff check") for e in entries)
    assert ".venv/bin/lint-imports" in entries


def test_each_pre_commit_hook_runs_on_the_files_it_checks() -> None:
    """A hook whose ``files`` pattern names moved files never runs: each pattern matches a
    file the repository tracks, and the settings-docs hook every file of the declaration
    (``tieredstore/settings/``) and both documents it generates."""
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=30
    ).stdout.split()
    hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
    for hook_id, hook in hooks.items():
        if "files" in hook:
            assert any(re.search(hook["files"], f) for f in tracked), f"{hook_id} runs on nothing"
    docs_hook = re.compile(hooks["settings-docs"]["files"])
    inputs = [f for f in tracked if f.startswith("tieredstore/settings/") and f.endswith(".py")]
    assert inputs, "tieredstore/settings/ holds no module"
    unmatched = [
        f
        for f in [*inputs, "docs/configuration.md", "docs/sidecar.toml"]
        if not docs_hook.search(f)
    ]
    assert not unmatched, f"the settings-docs hook does not run on {unmatched}"
