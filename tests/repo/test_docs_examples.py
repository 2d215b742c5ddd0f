"""The Spark data-source examples set ``PYSPARK_PYTHON`` before the session starts:
copied as they are, their tasks can import ``verifier`` and ``tieredstore``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _examples() -> list[tuple[str, str]]:
    found = []
    for doc in ("README.md", "docs/analytics.md"):
        for code in BLOCK.findall((REPO / doc).read_text()):
            if "register(spark)" in code and "SparkSession" in code:
                found.append((doc, code))
    return found


def test_both_pages_have_a_complete_example() -> None:
    assert {doc for doc, _ in _examples()} == {"README.md", "docs/analytics.md"}


@pytest.mark.parametrize(("doc", "code"), _examples(), ids=lambda v: str(v)[:20])
def test_pyspark_python_is_set_before_the_session(doc: str, code: str) -> None:
    set_at = code.find('os.environ.setdefault("PYSPARK_PYTHON", sys.executable)')
    assert 0 <= set_at < code.find("getOrCreate()"), doc
    compile(code, doc, "exec")  # it is Python as printed
