"""A ``SIGHUP`` reload replaces the settings in force, once, and touches no part.

The running sidecar's parts read their live settings from the one
:class:`~tieredstore.settings.in_force.SettingsInForce` at each use; a reload puts the new
settings there. So ``cli/sidecar/reload.py`` assigns no attribute (of the
dispatcher, the compactor, the retention pass, the upload pacing or anything else), calls
no ``setattr``, and the only method it calls on the runtime's parts is
``rt.in_force.replace``: a value pushed into one part by hand would let the parts
disagree.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELOAD = ROOT / "cli/sidecar/reload.py"
#: The one call on the runtime ``apply_reload`` may make.
ALLOWED = frozenset({"rt.in_force.replace"})


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for an attribute chain on a name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _pushes(source: str) -> list[str]:
    """Each attribute assignment, ``setattr`` and call on ``rt.<part>`` in ``source``
    other than :data:`ALLOWED`, as ``line: text``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name == "setattr" or (
                name is not None and name.startswith("rt.") and name not in ALLOWED
            ):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        if targets and any(isinstance(s, ast.Attribute) for t in targets for s in ast.walk(t)):
            found.append(f"{targets[0].lineno}: {ast.unparse(node)}")
    return found


def test_reload_assigns_no_attribute_of_another_part() -> None:
    pushes = _pushes(RELOAD.read_text())
    assert not pushes, (
        "reload.py pushes values into the parts; replace the settings in force "
        f"(rt.in_force.replace) and let the parts read them: {pushes}"
    )


def test_reload_replaces_the_settings_in_force() -> None:
    calls = {
        _dotted(node.func)
        for node in ast.walk(ast.parse(RELOAD.read_text()))
        if isinstance(node, ast.Call)
    }
    assert calls >= ALLOWED


def test_the_scan_finds_a_push() -> None:
    old = (
        "def apply_reload(rt, new):\n"
        "    plan = plan_reload(rt.settings, new)\n"
        "    rt.dispatcher.tiering = plan.settings.tiering\n"
        "    rt.settings: object = plan.settings\n"
        "    rt.compactor.n += 1\n"
        "    setattr(rt.retention, 'policy', None)\n"
        "    rt.upload_limit.set_rate(5)\n"
        "    rt.in_force.replace(plan.settings)\n"
        "    local = plan\n"
    )
    assert [line.split(":")[0] for line in _pushes(old)] == ["3", "4", "5", "6", "7"]
