"""One table of findings: tieredstore/findings.py's FINDINGS; the others follow it."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.layout import PRODUCT_FOLDERS
from tieredstore.findings import FINDINGS, FindingKind, markdown_table
from tieredstore.verifier.vocabulary import VERIFIER_KINDS

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "verification.md"


def test_every_kind_is_in_the_table_once() -> None:
    assert set(FINDINGS) == set(FindingKind)
    assert all(f.meaning and f.found_by for f in FINDINGS.values())


def test_the_verifier_reports_the_kinds_the_table_says_it_finds() -> None:
    assert {k for k, f in FINDINGS.items() if "verifier" in f.found_by} == set(VERIFIER_KINDS)


def test_the_docs_table_is_generated_from_it() -> None:
    table = markdown_table(k for k in FINDINGS if k in VERIFIER_KINDS)
    assert table in DOC.read_text(), f"replace the table in {DOC} with:\n{table}"


def test_one_class_is_named_finding() -> None:
    """One name per thing: the occurrence gc and reconcile report is ``findings.Finding``;
    the table row, the verifier's decision output and its report row have names of
    their own."""
    named = [
        path.relative_to(REPO).as_posix()
        for pkg in PRODUCT_FOLDERS
        for path in sorted((REPO / pkg).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name == "Finding"
    ]
    assert named == ["tieredstore/findings.py"]
