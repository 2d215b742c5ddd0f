"""docs/architecture.md's package map matches the tree.

* every folder the table names exists, and every ``name.py`` a row names exists in that
  row's folder;
* every package (a folder with ``__init__.py``) of the four layers, and every top-level
  folder of the repository, has a row;
* every module at the root of a layer's package, and of each of its subpackages, is named
  in its row, so a new module cannot land without a line saying what it holds.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.layout import PRODUCT_FOLDERS

ROOT = Path(__file__).resolve().parents[2]
LAYERS = PRODUCT_FOLDERS
#: Top-level folders that are generated, not the project's own (hidden ones other than
#: ``.ci`` are caches and tool state: .git, .venv, .pytest_cache, .hypothesis, ...).
NOT_OURS = frozenset({"build", "dist"})

_ROW = re.compile(r"^\| `([^`]+/)`[^|]*\| (.*) \|$")
_MODULE = re.compile(r"`([\w/]+\.py)`")


def _rows() -> dict[str, str]:
    """folder -> the text of its rows (a folder may have several, joined)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Package map", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        if m := _ROW.match(line):
            rows[m.group(1)] = rows.get(m.group(1), "") + " " + m.group(2)
    return rows


def _packages() -> list[Path]:
    return sorted(
        p.parent.relative_to(ROOT)
        for layer in LAYERS
        for p in (ROOT / layer).rglob("__init__.py")
        if "__pycache__" not in p.parts
    )


def test_the_rows_name_folders_and_modules_that_exist() -> None:
    rows = _rows()
    assert rows, "no package map table found"
    for folder, text in rows.items():
        assert (ROOT / folder).is_dir(), f"the package map names {folder}, which does not exist"
        for name in _MODULE.findall(text):
            assert (ROOT / folder / name).is_file(), f"{folder} row names {name}: not there"


def test_every_package_and_top_level_folder_has_a_row() -> None:
    rows = _rows()
    for package in _packages():
        assert f"{package}/" in rows, f"no package map row for {package}/"
    for entry in sorted(ROOT.iterdir()):
        hidden = entry.name.startswith(".") and entry.name != ".ci"
        generated = entry.name in NOT_OURS or entry.name.endswith(".egg-info")
        if entry.is_dir() and not hidden and not generated:
            assert f"{entry.name}/" in rows, f"no package map row for {entry.name}/"


def test_every_module_is_named_in_its_packages_row() -> None:
    rows = _rows()
    for package in _packages():
        named = set(_MODULE.findall(rows.get(f"{package}/", "")))
        for module in sorted((ROOT / package).glob("*.py")):
            if module.name in {"__init__.py", "__main__.py"}:
                continue
            assert module.name in named, (
                f"{package}/{module.name} is not in docs/architecture.md's package map: "
                "say in its row what it holds"
            )
