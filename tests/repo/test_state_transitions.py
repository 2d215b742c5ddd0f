"""Every change of a queue's persisted state the code performs is in the state table
(:data:`tieredstore.metadata.rows.TRANSITIONS`), and the table holds nothing else.

The product code is read (AST) for every write of a queue state to the catalogue:
``….set_state(…, QueueState.X)`` (called, or handed to ``asyncio.to_thread``) and
``set_queue(…, state=QueueState.X)`` inside the catalogue. Each such site is listed in
:data:`PERFORMED` by its function and target, with the states the queue can be in when it
runs — what the code around it guarantees, said beside each entry. A new site, or one
whose target cannot be read from the source, fails until it is listed here; a listed
move the table refuses fails; a move in the table that no site performs fails too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.layout import PRODUCT_FOLDERS
from tieredstore.metadata.rows import TRANSITIONS, QueueState, is_valid_transition

REPO = Path(__file__).resolve().parents[2]
PACKAGES = PRODUCT_FOLDERS

A, P, DV, DL = QueueState.ACTIVE, QueueState.PAUSED, QueueState.DIVERGED, QueueState.DELETED

#: (function, target) -> the states the queue can be in when the function sets it.
PERFORMED: dict[tuple[str, QueueState], frozenset[QueueState]] = {
    # the committer, on a queue discovery handed to tiering: ACTIVE rows only
    ("diverge", DV): frozenset({A}),
    ("hot_data_lost", P): frozenset({A}),
    # `resume`: plan_resume refuses a queue that is not PAUSED; after a loss is accepted
    # only a queue still not ACTIVE is set
    ("execute_resume", A): frozenset({P}),
    # accept_loss (resume, reconcile adopting a loss record): refuses all but these two
    ("accept_loss", A): frozenset({A, P}),
    # `repair`: plan_repair refuses a queue that is not DIVERGED
    ("execute_repair", A): frozenset({DV}),
    # retention and `expire --purge`: their plans leave DELETED queues out
    ("destroy_queue", DL): frozenset({A, P, DV}),
}


def _state(node: ast.expr) -> QueueState | None:
    """``QueueState.X`` as its member, else None (a target the source does not say)."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "QueueState"
    ):
        return QueueState[node.attr]
    return None


def _target(call: ast.Call) -> ast.expr | None:
    """The state a call writes, if it writes one; raises for a write it cannot read."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name == "set_state" and call.args:
        return call.args[-1]
    if name == "to_thread" and call.args:
        handed = call.args[0]
        if isinstance(handed, ast.Attribute) and handed.attr == "set_state":
            return call.args[-1]
    if name == "set_queue":
        return next((k.value for k in call.keywords if k.arg == "state"), None)
    return None


def _writes(path: Path) -> Iterator[tuple[str, ast.expr, int]]:
    """(enclosing function, the state expression, line) of each state write in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.Call) and (target := _target(node)) is not None:
                yield func.name, target, node.lineno


def _performed() -> dict[tuple[str, QueueState], list[str]]:
    found: dict[tuple[str, QueueState], list[str]] = {}
    unreadable: list[str] = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            where = path.relative_to(REPO)
            for function, expr, line in _writes(path):
                if function == "set_state" and isinstance(expr, ast.Name):
                    continue  # QueueTable.set_state itself, writing its argument
                state = _state(expr)
                if state is None:
                    unreadable.append(f"{where}:{line} in {function}: {ast.unparse(expr)}")
                    continue
                found.setdefault((function, state), []).append(f"{where}:{line}")
    assert not unreadable, f"state writes whose target is not a QueueState member: {unreadable}"
    return found


def test_every_state_write_of_the_code_is_listed() -> None:
    found = _performed()
    assert set(found) == set(PERFORMED), (
        f"new state writes (list them in PERFORMED): "
        f"{ {k: v for k, v in found.items() if k not in PERFORMED} }; "
        f"listed but gone: {set(PERFORMED) - set(found)}"
    )


def test_every_move_the_code_makes_is_in_the_table() -> None:
    refused = [
        (function, source.value, target.value)
        for (function, target), sources in PERFORMED.items()
        for source in sources
        if not is_valid_transition(source, target)
    ]
    assert not refused, f"moves the code makes that the state table refuses: {refused}"


def test_the_table_holds_only_moves_the_code_makes() -> None:
    made = {
        (source, target)
        for (_, target), sources in PERFORMED.items()
        for source in sources
        if source is not target
    }
    assert made == TRANSITIONS, (
        f"in the table but never made: {TRANSITIONS - made}; made but not in it: "
        f"{made - TRANSITIONS}"
    )
