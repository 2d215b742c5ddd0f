"""One import namespace, and a wheel with the product only.

The layers above the core keep their own folders (``metadata/``, ``dispatcher/``,
``verifier/``, ``cli/``) and are linked from the core's folder, so that Python, the type
checker, the import contracts and the wheel see one package, ``tieredstore``. The wheel
installs that one top-level name (generic names such as ``metadata`` or ``verifier`` are
taken by other distributions on the package index) and no test support.
"""

from __future__ import annotations

import ast
import os
import zipfile
from pathlib import Path

import pytest

from tests.support.layout import LAYER_FOLDERS, PRODUCT_FOLDERS, REPO
from tests.support.wheel import build_wheel

#: What a wheel of the product must hold: the core, each layer and the entry point.
MUST_HOLD = (
    "tieredstore/cold/layout.py",
    "tieredstore/metadata/catalogue.py",
    "tieredstore/dispatcher/assembly.py",
    "tieredstore/verifier/job.py",
    "tieredstore/cli/main.py",
)


def wheel_problems(names: list[str]) -> list[str]:
    """What is wrong with a wheel holding the files ``names``: a top-level name other than
    ``tieredstore`` (and its dist-info), test code, or a layer missing."""
    problems = []
    for name in names:
        top = name.split("/")[0]
        if top != "tieredstore" and not top.endswith(".dist-info"):
            problems.append(f"{name}: outside the tieredstore namespace")
        elif "/support/" in name or top == "tests" or "/testing/" in name:
            problems.append(f"{name}: test support in the wheel")
    problems += [f"{must}: missing" for must in MUST_HOLD if must not in names]
    return problems


def bare_layer_imports(root: Path = REPO) -> list[str]:
    """Every import of a layer by its folder's name (``import metadata``) instead of its
    name in the namespace (``tieredstore.metadata``): run from the repository, it would
    load a second copy of the module (or another distribution's)."""
    wrong = []
    for folder in (*PRODUCT_FOLDERS, "tests", "bench"):
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                rel = path.relative_to(root).as_posix()
                wrong += [f"{rel} imports {n}" for n in names if n.split(".")[0] in LAYER_FOLDERS]
    return wrong


def test_each_layer_is_linked_from_the_cores_folder() -> None:
    for name in LAYER_FOLDERS:
        link = REPO / "tieredstore" / name
        assert link.is_symlink(), f"{link} must link to ../{name} (the {name} layer)"
        assert os.readlink(link) == f"../{name}", f"{link} links to {os.readlink(link)}"


def test_no_module_imports_a_layer_by_its_folders_name() -> None:
    assert bare_layer_imports() == []


@pytest.mark.slow
def test_the_wheel_holds_the_tieredstore_namespace_and_no_test_code(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        tops = [
            archive.read(n).decode().split()
            for n in names
            if n.endswith(".dist-info/top_level.txt")
        ]
    assert wheel_problems(names) == []
    assert tops in ([], [["tieredstore"]]), tops


def test_the_checks_catch_what_they_forbid(tmp_path: Path) -> None:
    assert wheel_problems(["metadata/rows.py", "tieredstore/tests/support/moto.py"]) == [
        "metadata/rows.py: outside the tieredstore namespace",
        "tieredstore/tests/support/moto.py: test support in the wheel",
        *(f"{must}: missing" for must in MUST_HOLD),
    ]
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "x.py").write_text(
        "import verifier.job\nfrom metadata.rows import QueueState\nimport tieredstore.cli\n"
    )
    for folder in (*PRODUCT_FOLDERS, "tests"):
        (tmp_path / folder).mkdir()
    assert bare_layer_imports(tmp_path) == [
        "bench/x.py imports verifier.job",
        "bench/x.py imports metadata.rows",
    ]
