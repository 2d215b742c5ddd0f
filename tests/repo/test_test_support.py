"""Test support lives in one place: ``tests/support/`` (the package ``tests.support``, out
of the product's folders and its wheel: ``test_wheel.py``).

* No module under ``tests/`` imports from another test module: what tests share is in
  ``tests.support``, in a ``conftest.py`` or in a fixture plugin (``tests/fixtures_*.py``,
  registered in ``tests/conftest.py``). ``bench/`` imports nothing of ``tests/`` but
  ``tests.support``.
* No helper module lives under ``tests/`` outside ``tests/support/``: every other ``.py``
  there is a test module (``test_*.py``), a ``conftest.py``, a package's ``__init__.py``,
  a fixture plugin, or one of :data:`NOT_HELPERS`, each with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Non-test modules that stay under ``tests/``, with the reason.
NOT_HELPERS: dict[str, str] = {
    "tests/archive/spark_submit_job.py": (
        "a job file spark-submit runs by path (tests/archive/test_spark_submit.py), never "
        "imported; it uses the verifier's data source, which test support in the core "
        "layer (tests.support) may not import"
    ),
}

#: Test modules allowed to import another test module, with the reason (none today).
SHARED_TEST_MODULES: dict[str, str] = {}


def _support_file(rel: str) -> bool:
    """A module of ``tests/`` that others may import: test support, a conftest or a
    fixture plugin."""
    path = Path(rel)
    return (
        path.parts[:2] == ("tests", "support")
        or path.name == "conftest.py"
        or (path.parent == Path("tests") and path.name.startswith("fixtures_"))
    )


def _module_file(root: Path, dotted: str) -> str | None:
    """The file (relative to ``root``) of module ``dotted``, if it is in the tree."""
    base = root.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate.relative_to(root).as_posix()
    return None


def _imported(root: Path, rel: str) -> set[str]:
    """The files under ``tests/`` that ``rel`` imports (``tests.x`` or relative)."""
    tree = ast.parse((root / rel).read_text(), filename=rel)
    package = Path(rel).parent.parts
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = list(package[: len(package) - (node.level - 1)] if node.level else ())
            base = ".".join([*parts, *(node.module.split(".") if node.module else [])])
            # ``from pkg import name`` may name a submodule: try both.
            modules = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        for module in modules:
            if module.split(".")[0] != "tests":
                continue
            target = _module_file(root, module)
            if target is not None and target != rel and not target.endswith("__init__.py"):
                found.add(target)
    return found


def _python_files(root: Path, folder: str) -> list[str]:
    """Every ``.py`` under ``root/folder``, relative to ``root``."""
    return sorted(
        p.relative_to(root).as_posix()
        for p in (root / folder).rglob("*.py")
        if "__pycache__" not in p.parts
    )


def imports_between_test_modules(root: Path = ROOT) -> list[str]:
    """Every import of one test module by another (conftest and fixture plugins aside)."""
    wrong = []
    for rel in _python_files(root, "tests"):
        for target in sorted(_imported(root, rel)):
            if not _support_file(target) and target not in SHARED_TEST_MODULES:
                wrong.append(f"{rel} imports {target}")
    return wrong


def helper_modules(root: Path = ROOT) -> list[str]:
    """Every module under ``tests/`` that is no test, conftest, package or plugin."""
    return [
        rel
        for rel in _python_files(root, "tests")
        if not Path(rel).name.startswith("test_")
        and Path(rel).name != "__init__.py"
        and not _support_file(rel)
        and rel not in NOT_HELPERS
    ]


def imports_of_tests_by_bench(root: Path = ROOT) -> list[str]:
    return [
        f"{rel} imports {target}"
        for rel in _python_files(root, "bench")
        for target in sorted(_imported(root, rel))
        if Path(target).parts[:2] != ("tests", "support")
    ]


def test_no_test_module_imports_another() -> None:
    wrong = imports_between_test_modules()
    assert not wrong, (
        "share it through tests/support/ (or, when it needs the CLI, the dispatcher "
        f"or the verifier, a conftest.py or a tests/fixtures_*.py plugin): {wrong}"
    )


def test_no_helper_module_lives_under_tests() -> None:
    stray = helper_modules()
    assert not stray, f"test support goes to tests/support/: {stray}"


def test_bench_never_imports_tests() -> None:
    wrong = imports_of_tests_by_bench()
    assert not wrong, f"bench/ shares support with tests through tests.support: {wrong}"


def test_every_listed_exception_is_still_there_and_says_why() -> None:
    for rel, why in {**NOT_HELPERS, **SHARED_TEST_MODULES}.items():
        assert (ROOT / rel).is_file(), f"{rel} is listed as an exception but is gone: unlist it"
        assert len(why) > 40, f"{rel}: say why it stays"


def test_the_checks_catch_the_layout_they_forbid(tmp_path: Path) -> None:
    """The layout before test support moved: a helper module beside the tests, a helper
    imported from another test module (absolute and relative), bench importing tests."""
    files = {
        "tests/__init__.py": "",
        "tests/conftest.py": "",
        "tests/fixtures_s3.py": "",
        "tests/coldcheck.py": "X = 1\n",
        "tests/a/__init__.py": "",
        "tests/a/conftest.py": "",
        "tests/a/test_one.py": "def helper() -> None: ...\n",
        "tests/a/test_two.py": (
            "from tests.coldcheck import X\n"
            "from tests.a import test_one\n"
            "from .test_one import helper\n"
            "from .conftest import Y\n"
            "from tests.fixtures_s3 import Z\n"
        ),
        "tests/support/__init__.py": "",
        "tests/support/stores.py": "from tests.support import other\n",
        "tests/support/other.py": "",
        "tests/a/test_three.py": "from tests.support.stores import X\n",
        "bench/run.py": "from tests.a.test_one import helper\nfrom tests.support import stores\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert imports_between_test_modules(tmp_path) == [
        "tests/a/test_two.py imports tests/a/test_one.py",
        "tests/a/test_two.py imports tests/coldcheck.py",
    ]
    assert helper_modules(tmp_path) == ["tests/coldcheck.py"]
    assert imports_of_tests_by_bench(tmp_path) == ["bench/run.py imports tests/a/test_one.py"]
