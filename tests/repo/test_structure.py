"""The house rules of docs/architecture.md that a test can hold: small functions and
classes in the product code (its folders: ``tests/support/layout.py: PRODUCT_FOLDERS``),
and packages of at most about 15 modules (more are grouped into subpackages by concept).

Tests and benchmarks are exempt; a fixture or a scenario may read better whole.

The class limit is a prompt to split by concern, never a count to split by. A class
that is one concern and reads best whole is a *named exception* below, with its own
limit and the reason, reviewed like any other change; an exception that is no longer
needed fails the test, so the list stays true. The same holds for a package's module
count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.layout import PRODUCT_FOLDERS

REPO = Path(__file__).resolve().parents[2]
PACKAGES = PRODUCT_FOLDERS
MAX_FUNCTION_LINES = 60
MAX_CLASS_LINES = 260  # "about 250"
MAX_PACKAGE_MODULES = 15  # not counting __init__.py and __main__.py

#: "package folder" -> (its own limit, why its modules are one list that reads best flat).
PACKAGE_EXCEPTIONS: dict[str, tuple[int, str]] = {
    "cli/commands": (
        19,
        "one module per `tieredstore` subcommand (the folder is the command list "
        "`tieredstore --help` prints), plus the flags they share (_settings.py) and the "
        "status screen's view beside its command; grouping commands would hide one",
    ),
}

#: "path Class" -> (its own limit, why it is one concern that reads best whole).
CLASS_EXCEPTIONS: dict[str, tuple[int, str]] = {
    "dispatcher/dispatcher.py Dispatcher": (
        300,
        "the sidecar's lifecycle state machine: start, tick, catch-up, drain and stop "
        "share its state and its transitions; the steps it composes already live in "
        "discovery, rounds, committer, provenance writer and background_loops, and "
        "assembly builds them all",
    ),
}


def _sizes() -> list[tuple[str, str, int, int]]:
    """(kind, where, lines, limit) of every function and class in the packages."""
    out = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    kind, limit = "function", MAX_FUNCTION_LINES
                elif isinstance(node, ast.ClassDef):
                    kind, limit = "class", MAX_CLASS_LINES
                else:
                    continue
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if kind == "class" and f"{rel} {node.name}" in CLASS_EXCEPTIONS:
                    limit = CLASS_EXCEPTIONS[f"{rel} {node.name}"][0]
                out.append((kind, f"{rel}:{node.lineno} {node.name}", lines, limit))
    return out


@pytest.mark.slow
def test_the_packages_are_parsed() -> None:
    sizes = _sizes()
    assert len(sizes) > 500  # every module was read
    assert any(where.startswith("dispatcher/dispatcher.py") for _k, where, _n, _l in sizes)


@pytest.mark.parametrize("kind", ["function", "class"])
def test_no_function_or_class_is_over_its_limit(kind: str) -> None:
    over = [f"{where}: {n} lines" for k, where, n, limit in _sizes() if k == kind and n > limit]
    assert not over, f"{kind}s over the limit (split them by concern): {over}"


@pytest.mark.slow
def test_every_named_exception_is_still_needed_and_says_why() -> None:
    classes = {
        where.split(":")[0] + " " + where.split(" ", 1)[1]: n
        for kind, where, n, _limit in _sizes()
        if kind == "class"
    }
    for name, (limit, why) in CLASS_EXCEPTIONS.items():
        assert name in classes, f"named exception {name!r}: no such class"
        assert classes[name] > MAX_CLASS_LINES, (
            f"{name} is {classes[name]} lines, within the general limit: drop its exception"
        )
        assert limit > MAX_CLASS_LINES and len(why) > 40, f"{name}: give a limit and a reason"


def _module_counts() -> dict[str, int]:
    """Modules (``.py`` files but ``__init__``/``__main__``) of every product package."""
    counts: dict[str, int] = {}
    for pkg in PACKAGES:
        for init in (REPO / pkg).rglob("__init__.py"):
            folder = init.parent
            if "__pycache__" in folder.parts:
                continue
            modules = [
                f for f in folder.glob("*.py") if f.name not in {"__init__.py", "__main__.py"}
            ]
            counts[folder.relative_to(REPO).as_posix()] = len(modules)
    return counts


def test_no_package_holds_more_than_about_15_modules() -> None:
    counts = _module_counts()
    over = {
        folder: n
        for folder, n in counts.items()
        if n > PACKAGE_EXCEPTIONS.get(folder, (MAX_PACKAGE_MODULES, ""))[0]
    }
    assert not over, f"packages over {MAX_PACKAGE_MODULES} modules (subpackages by concept): {over}"


def test_every_package_exception_is_still_needed() -> None:
    counts = _module_counts()
    for folder, (limit, why) in PACKAGE_EXCEPTIONS.items():
        assert folder in counts, f"{folder} is no package: drop its exception"
        assert counts[folder] > MAX_PACKAGE_MODULES, (
            f"{folder} holds {counts[folder]} modules, within the general limit: drop its exception"
        )
        assert limit >= counts[folder] and len(why) > 40, f"{folder}: give a limit and a reason"
