"""Small facts said once in the product code (``tieredstore``, ``metadata``, ``dispatcher``,
``verifier``), so that two copies cannot drift apart:

* the cold store's ``_queues/`` directory is spelled by the cold layout only
  (``tieredstore/cold/layout.py``: every other module builds keys with its functions);
* the catalogue's file name by ``tieredstore/state_dir.py`` only (metadata writes the
  file, the verifier reads it);
* which setting a flag stands for by ``tieredstore/settings/flags.py`` only (the sidecar's
  commands and the verifier declare their flags from it: no second map, no help text
  naming a setting by hand);
* a setting's default by its declaration only (``tieredstore/settings/declaration.py``): a
  ``DEFAULT_<NAME>`` constant for a setting ``<section>.<name>`` takes it from there;
* a committed segment or batch slice is counted by ``TickReport.count`` only (the tick
  report, the running count and the ``run --once`` progress line all count with it);
* the broker's batch keys are built by the sidecar's builder (``dispatcher/assembly.py``;
  ``repair`` fences with the running sidecar's) and by ``gc``, which holds the lease
  without a sidecar.

Each check scans the source (string constants other than docstrings, dict literals,
calls, assignments; slow: it parses every module) and has a quick test of its own that it
finds the repeat it guards against.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.layout import PRODUCT_FOLDERS
from tieredstore.backends.options import DEFAULT_MULTIPART_THRESHOLD, BackendOptions
from tieredstore.metadata.catalogue import DB_NAME
from tieredstore.settings.declaration import ColdSettings
from tieredstore.settings.flags import SETTING_FLAGS
from tieredstore.settings.loader import SETTINGS
from tieredstore.state_dir import CATALOGUE_FILE

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = PRODUCT_FOLDERS
#: The directory as a component of a key (not a name ending in it: ``stopped_queues``).
QUEUES_DIR = r"(^|/)_queues(/|$)"
CATALOGUE = re.escape("catalogue.sqlite3")


@functools.cache
def _parse(folder: str) -> tuple[tuple[str, ast.Module], ...]:
    return tuple(
        (rel, ast.parse(path.read_text(), filename=rel))
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (rel := path.relative_to(ROOT).as_posix())
    )


def _modules(folders: tuple[str, ...] = PRODUCT) -> Iterator[tuple[str, ast.Module]]:
    """(path relative to the repository, its syntax tree) of every module under ``folders``
    (each folder parsed once for the whole file)."""
    for folder in folders:
        yield from _parse(folder)


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring nodes of ``tree`` (module, classes, functions)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _strings(tree: ast.Module) -> Iterator[str]:
    """Every string constant of ``tree`` but its docstrings (f-strings' parts included)."""
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.value


def _spelling(pattern: str, trees: Iterator[tuple[str, ast.Module]]) -> set[str]:
    """The modules with a string constant (not a docstring) that ``pattern`` matches."""
    found = re.compile(pattern).search
    return {rel for rel, tree in trees if any(found(s) for s in _strings(tree))}


def _parsed(tmp_path: Path, source: str) -> Iterator[tuple[str, ast.Module]]:
    sample = tmp_path / "sample.py"
    sample.write_text(source)
    yield "sample.py", ast.parse(sample.read_text())


# -- the cold layout's _queues/ ------------------------------------------------------------


@pytest.mark.slow
def test_only_the_cold_layout_spells_the_queue_records_directory() -> None:
    assert _spelling(QUEUES_DIR, _modules()) == {"tieredstore/cold/layout.py"}


def test_the_scan_finds_a_spelled_directory_and_skips_docstrings(tmp_path: Path) -> None:
    spelled = 'def f(prefix):\n    """Lists ``_queues/``."""\n    return prefix + "_queues/"\n'
    assert _spelling(QUEUES_DIR, _parsed(tmp_path, spelled)) == {"sample.py"}
    documented = 'def f(prefix):\n    """Lists ``_queues/``."""\n    return prefix\n'
    assert _spelling(QUEUES_DIR, _parsed(tmp_path, documented)) == set()


# -- the catalogue's file name -------------------------------------------------------------


@pytest.mark.slow
def test_the_catalogue_file_is_named_once_in_the_core() -> None:
    assert _spelling(CATALOGUE, _modules()) == {"tieredstore/state_dir.py"}


def test_metadata_and_the_verifier_open_the_same_file() -> None:
    verifier_catalogue = ast.parse((ROOT / "verifier" / "catalogue_reader.py").read_text())
    imported = {
        alias.name
        for node in ast.walk(verifier_catalogue)
        if isinstance(node, ast.ImportFrom) and node.module == "tieredstore.state_dir"
        for alias in node.names
    }
    assert imported == {"CATALOGUE_FILE"}
    assert DB_NAME is CATALOGUE_FILE


# -- the flags that stand for a setting ----------------------------------------------------


def _setting_maps(trees: Iterator[tuple[str, ast.Module]]) -> set[str]:
    """Modules with a dict literal mapping to two or more settings a flag stands for."""
    keys = set(SETTING_FLAGS.values())
    out = set()
    for rel, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                values = {v.value for v in node.values if isinstance(v, ast.Constant)}
                if len(values & keys) >= 2:
                    out.add(rel)
    return out


def _settings_in_help(trees: Iterator[tuple[str, ast.Module]]) -> set[str]:
    """Modules with a string constant naming a flag's setting in brackets (a help text)."""
    needles = [f"[{key}" for key in SETTING_FLAGS.values()]
    return {rel for rel, tree in trees if any(n in s for s in _strings(tree) for n in needles)}


@pytest.mark.slow
def test_one_map_says_which_setting_a_flag_stands_for() -> None:
    assert _setting_maps(_modules()) == {"tieredstore/settings/flags.py"}


@pytest.mark.slow
def test_no_help_text_names_a_flags_setting_by_hand() -> None:
    assert _settings_in_help(_modules()) == set()


def test_the_scans_find_a_second_map_and_a_help_by_hand(tmp_path: Path) -> None:
    second = '_FLAGS = {"store": "store.path", "cold": "cold.url"}\n'
    assert _setting_maps(_parsed(tmp_path, second)) == {"sample.py"}
    one = '_FLAGS = {"store": "store.path", "out": "report"}\n'
    assert _setting_maps(_parsed(tmp_path, one)) == set()
    by_hand = 'p.add_argument("--broker", help="broker name [cold.broker]")\n'
    assert _settings_in_help(_parsed(tmp_path, by_hand)) == {"sample.py"}


# -- a setting's default -------------------------------------------------------------------


def _literal(node: ast.expr) -> bool:
    """Whether ``node`` is a value written out (``64 << 20``, ``"1h"``), not one taken
    from a name or a call."""
    return all(
        isinstance(n, ast.Constant | ast.BinOp | ast.UnaryOp | ast.operator | ast.unaryop)
        for n in ast.walk(node)
    )


def _repeated_defaults(trees: Iterator[tuple[str, ast.Module]]) -> set[str]:
    """``path NAME`` of each module-level ``DEFAULT_<name>`` written out as a literal
    where ``<name>`` is a setting's (``<section>.<name>``)."""
    names = {s.key.split(".", 1)[1].upper() for s in SETTINGS}
    out = set()
    for rel, tree in trees:
        for node in tree.body:
            target, value = None, None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign):
                target, value = node.target, node.value
            if not isinstance(target, ast.Name) or value is None:
                continue
            name = target.id.removeprefix("DEFAULT_")
            if name != target.id and name in names and _literal(value):
                out.add(f"{rel} {target.id}")
    return out


#: "path NAME" -> why a constant named as a setting is another thing.
NOT_A_SETTING: dict[str, str] = {
    "cli/commands/fingerprint.py DEFAULT_MAX_BYTES_PER_SECOND": (
        "the pace of `fingerprint`'s hot reads (a flag of that command), not "
        "tiering.max_bytes_per_second, the sidecar's upload pace"
    ),
}


@pytest.mark.slow
def test_no_constant_repeats_a_settings_default() -> None:
    assert _repeated_defaults(_modules()) == set(NOT_A_SETTING)


def test_the_backends_take_the_multipart_threshold_from_its_setting() -> None:
    declared = ColdSettings.default_of("multipart_threshold")
    assert DEFAULT_MULTIPART_THRESHOLD == declared == BackendOptions().multipart_threshold


def test_the_scan_finds_a_repeated_default(tmp_path: Path) -> None:
    repeated = "DEFAULT_MULTIPART_THRESHOLD = 64 << 20\nDEFAULT_OTHER = 5\n"
    found = _repeated_defaults(_parsed(tmp_path, repeated))
    assert found == {"sample.py DEFAULT_MULTIPART_THRESHOLD"}
    taken = 'DEFAULT_MULTIPART_THRESHOLD: int = ColdSettings.default_of("multipart_threshold")\n'
    assert _repeated_defaults(_parsed(tmp_path, taken)) == set()


# -- counting what was committed -----------------------------------------------------------


def _counters(trees: Iterator[tuple[str, ast.Module]]) -> set[str]:
    """Modules that count a segment or slice by hand (``x.segments += 1``)."""
    out = set()
    for rel, tree in trees:
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.AugAssign)
                and isinstance(node.target, ast.Attribute)
                and node.target.attr in ("segments", "slices")
                and isinstance(node.value, ast.Constant)
                and node.value.value == 1
            ):
                out.add(rel)
    return out


@pytest.mark.slow
def test_only_the_tick_report_counts_a_committed_segment() -> None:
    # The sidecar's side: tiering, the dispatcher and the command line (restore's
    # journal and compaction's tally count other things).
    found = _counters(_modules(("dispatcher", "cli/")))
    assert found == {"dispatcher/tiering/tick_report.py"}


def test_the_scan_finds_a_second_counter(tmp_path: Path) -> None:
    counter = "class Line:\n    def add(self):\n        self.segments += 1\n"
    assert _counters(_parsed(tmp_path, counter)) == {"sample.py"}


# -- the broker's batch keys ---------------------------------------------------------------


def _builders_of(name: str, trees: Iterator[tuple[str, ast.Module]]) -> set[str]:
    """Modules that call ``name`` (by name or attribute)."""
    out = set()
    for rel, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if called == name:
                    out.add(rel)
    return out


@pytest.mark.slow
def test_the_batch_keys_are_built_by_the_builder_and_gc_only() -> None:
    assert _builders_of("BatchKeys", _modules()) == {
        "dispatcher/assembly.py",
        "dispatcher/maintenance/gc.py",
    }


def test_the_scan_finds_a_construction(tmp_path: Path) -> None:
    built = "keys = batch.BatchKeys(backend=b, lease=l)\n"
    assert _builders_of("BatchKeys", _parsed(tmp_path, built)) == {"sample.py"}
