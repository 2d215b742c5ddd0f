"""The one-way layers hold in every test run, not only under ``make lint``.

The contracts live in ``pyproject.toml`` (``[tool.importlinter]``; docs/architecture.md
"Layers"). This runs ``lint-imports`` on them, and once on a contract that the code is
known to break, so a checker that silently checks nothing cannot pass.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_every_layer_contract_is_kept() -> None:
    run = _lint()
    assert run.returncode == 0, run.stdout + run.stderr
    assert " BROKEN" not in run.stdout
    assert "KEPT" in run.stdout


def test_a_broken_contract_fails_the_check(tmp_path: Path) -> None:
    config = tmp_path / "broken.toml"
    config.write_text(
        "[tool.importlinter]\n"
        'root_packages = ["tieredstore", "verifier"]\n'
        "[[tool.importlinter.contracts]]\n"
        'name = "the verifier never uses the core (false: it must)"\n'
        'type = "forbidden"\n'
        'source_modules = ["verifier"]\n'
        'forbidden_modules = ["tieredstore"]\n'
    )
    run = _lint("--config", str(config))
    assert run.returncode != 0
    assert "BROKEN" in run.stdout
