"""CHANGELOG.md: one line per change, under version headings only.

Below the introduction, every line is blank, a version heading (``## [0.2.0] — ...``,
newest first) or one entry, ``- Kind: text`` on a single line.
"""

from __future__ import annotations

import re
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"
KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
_VERSION = re.compile(r"^## \[(\d+)\.(\d+)\.(\d+)\] — (unreleased|\d{4}-\d{2}-\d{2})$")
_ENTRY = re.compile(rf"^- ({'|'.join(KINDS)}): \S")


def _body() -> list[str]:
    lines = CHANGELOG.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("## "))
    return lines[first:]


def test_every_line_is_a_version_heading_or_one_entry() -> None:
    for n, line in enumerate(_body()):
        if not line.strip():
            continue
        assert _VERSION.match(line) or _ENTRY.match(line), (
            f"CHANGELOG.md: not a version heading nor a one-line entry: {line[:80]!r} "
            f"(line {n + 1} of the body)"
        )


def test_versions_go_newest_first_and_only_the_top_one_is_unreleased() -> None:
    versions = [m for line in _body() if (m := _VERSION.match(line))]
    assert versions, "no version heading"
    numbers = [tuple(int(m.group(i)) for i in (1, 2, 3)) for m in versions]
    assert numbers == sorted(numbers, reverse=True)
    assert len(set(numbers)) == len(numbers)
    assert all(m.group(4) != "unreleased" for m in versions[1:])


def test_every_version_has_entries() -> None:
    body = "\n".join(_body())
    for section in body.split("\n## "):
        assert re.search(r"^- ", section, re.MULTILINE), section.splitlines()[0]
