"""One composition root: only :func:`tieredstore.dispatcher.assembly.build_dispatcher` builds the
dispatcher and the parts it composes.

The dispatcher, its tiering parts and the queue state they share are constructed in
``dispatcher/assembly.py`` and nowhere else — not in the product code (the CLI's runtime
hands its open resources to the builder) and not in the tests or benchmarks (they go
through the builder or the runtime; only the shared state's own unit tests make one
alone), so a second, diverging wiring cannot creep back.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from tests.support.layout import PRODUCT_FOLDERS

ROOT = Path(__file__).resolve().parents[2]
#: The classes only the builder constructs.
BUILT = frozenset(
    {
        "Dispatcher",
        "Discovery",
        "Rounds",
        "SegmentCommitter",
        "SharedState",
        "BatchWriter",
        "Compactor",
    }
)
BUILDER = "dispatcher/assembly.py"
PRODUCT = PRODUCT_FOLDERS
ELSEWHERE = ("tests", "bench")


def _constructions(path: Path, names: frozenset[str] = BUILT) -> Counter[str]:
    """How many times ``path`` calls each class of ``names`` (by name or attribute)."""
    found: Counter[str] = Counter()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name in names:
            found[name] += 1
    return found


def _builders(folders: tuple[str, ...], names: frozenset[str]) -> dict[str, Counter[str]]:
    """Every file under ``folders`` that constructs a class of ``names``."""
    out = {}
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if found := _constructions(path, names):
                out[path.relative_to(ROOT).as_posix()] = found
    return out


def test_the_builder_constructs_each_part_once() -> None:
    assert _constructions(ROOT / BUILDER) == Counter(dict.fromkeys(BUILT, 1))


def test_no_product_code_but_the_builder_constructs_them() -> None:
    builders = _builders(PRODUCT, BUILT)
    assert set(builders) == {BUILDER}, (
        "only dispatcher/assembly.py: build_dispatcher builds the dispatcher and its parts; "
        f"hand it what you opened instead: {sorted(set(builders) - {BUILDER})}"
    )


def test_no_test_or_benchmark_constructs_them() -> None:
    here = Path(__file__).relative_to(ROOT).as_posix()
    parts = BUILT - {"SharedState"}  # its own unit tests make one alone
    builders = {where for where in _builders(ELSEWHERE, parts) if where != here}
    assert not builders, (
        f"build the dispatcher with open_runtime or build_dispatcher: {sorted(builders)}"
    )


def test_the_scan_finds_a_construction(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import tieredstore.dispatcher.tiering.rounds as r\n"
        "d = Dispatcher(hot=None)\n"
        "x = r.Rounds()\n"
        "y = QueueStatesLike()\n"
    )
    assert _constructions(sample) == Counter({"Dispatcher": 1, "Rounds": 1})
