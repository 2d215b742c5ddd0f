"""The project's wheel, built as a user's ``pip wheel .`` would, from a copy of the sources."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.layout import PRODUCT_FOLDERS, REPO


def build_wheel(out: Path) -> Path:
    """Build the wheel into ``out`` and return its path.

    From a copy of the sources (the layers' links in ``tieredstore/`` copied as links): a
    build in the checkout would leave ``build/`` there, whose stale files a later wheel
    would carry. The venv's own setuptools builds it (the dev extra), with no package index.
    """
    src = out / "src"
    caches = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in PRODUCT_FOLDERS:
        shutil.copytree(REPO / name, src / name, ignore=caches, symlinks=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-q", "-w", str(out), str(src)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (found,) = out.glob("tieredstore-*.whl")
    return found
