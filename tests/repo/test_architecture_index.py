"""docs/architecture.md is an index, and its pointers hold.

* it stays short (at most about 250 lines): the mechanics belong in module docstrings;
* its "To change X, open file:function" table has a row for each of the 20 most common
  changes, and every ``path.py: name`` it names is a file that defines ``name`` (a
  function, class or constant at module level, or ``Class.member``);
* every file or folder the index names in backticks, in that table and in "Where the
  mechanics are explained", exists.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INDEX = ROOT / "docs" / "architecture.md"
MAX_LINES = 250

_POINTER = re.compile(r"`([\w./-]+\.py): ([\w.]+)`")
_PATH = re.compile(r"`([\w.-]+/[\w./-]*)`")


def _section(title: str) -> str:
    text = INDEX.read_text()
    assert f"\n## {title}\n" in text, f"docs/architecture.md has no section {title!r}"
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _rows(section: str) -> list[str]:
    return [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]


def _defines(path: Path, dotted: str) -> bool:
    """Whether ``path`` defines ``dotted`` (``name`` or ``Class.member``)."""
    body: list[ast.stmt] = ast.parse(path.read_text()).body
    for part in dotted.split("."):
        found = None
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            else:
                continue
            if part in names:
                found = node
                break
        if found is None:
            return False
        body = found.body if isinstance(found, ast.ClassDef) else []
    return True


def test_the_index_is_short() -> None:
    lines = len(INDEX.read_text().splitlines())
    assert lines <= MAX_LINES, (
        f"docs/architecture.md has {lines} lines (at most {MAX_LINES}): it is an index; "
        "put the mechanics in the module's docstring and point to it"
    )


def test_the_change_table_covers_twenty_changes() -> None:
    rows = _rows(_section("To change X, open file:function"))[1:]  # without the header
    assert len(rows) >= 20
    for row in rows:
        assert _POINTER.search(row), f"a row names no `file.py: name`: {row}"


def test_every_pointer_names_a_file_and_what_it_defines() -> None:
    pointers = _POINTER.findall(_section("To change X, open file:function"))
    assert len(pointers) >= 20
    for file, name in pointers:
        path = ROOT / file
        assert path.is_file(), f"docs/architecture.md points to {file}, which does not exist"
        assert _defines(path, name), f"{file} does not define {name}"


def test_every_named_path_exists() -> None:
    text = _section("To change X, open file:function") + _section(
        "Where the mechanics are explained"
    )
    paths = {p for p in _PATH.findall(text) if not p.startswith("../")}
    assert paths
    for p in sorted(paths):
        assert (ROOT / p).exists(), f"docs/architecture.md names {p}, which does not exist"


def test_the_checker_finds_what_is_defined_and_only_that() -> None:
    here = Path(__file__)
    assert _defines(here, "test_the_index_is_short")
    assert _defines(ROOT / "dispatcher/tiering/committer.py", "SegmentCommitter.commit")
    assert _defines(ROOT / "metadata/schema.py", "MIGRATIONS")
    assert not _defines(ROOT / "dispatcher/tiering/committer.py", "SegmentCommitter.no_such_method")
    assert not _defines(here, "no_such_function")
