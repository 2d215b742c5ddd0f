"""CHANGELOG.md: Keep a Changelog's layout, one sentence on one line per change.

Below the introduction, every line is blank, a version heading (``## [0.2.0] — ...``,
newest first), a kind heading (``### Added`` ... in Keep a Changelog's order, each at
most once per version) or one entry, ``- text`` on a single line with no sentence break.
"""

from __future__ import annotations

import re
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"
KINDS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
_VERSION = re.compile(r"^## \[(\d+)\.(\d+)\.(\d+)\] — (unreleased|\d{4}-\d{2}-\d{2})$")
_KIND = re.compile(rf"^### ({'|'.join(KINDS)})$")
_ENTRY = re.compile(r"^- \S")
#: A full stop, then a capitalised word: a second sentence (``e.g.``, ``1.5`` pass).
_SECOND_SENTENCE = re.compile(r"[a-z0-9)`*]\. [A-Z][a-z]")


def _body() -> list[str]:
    lines = CHANGELOG.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("## "))
    return lines[first:]


def _versions() -> list[list[str]]:
    """The body cut at each version heading (each list starts with its heading)."""
    out: list[list[str]] = []
    for line in _body():
        if _VERSION.match(line):
            out.append([])
        out[-1].append(line)
    return out


def test_every_line_is_a_heading_or_one_entry() -> None:
    for n, line in enumerate(_body()):
        if not line.strip():
            continue
        assert _VERSION.match(line) or _KIND.match(line) or _ENTRY.match(line), (
            f"CHANGELOG.md: not a version or kind heading nor a one-line entry: "
            f"{line[:80]!r} (line {n + 1} of the body)"
        )


def test_each_entry_is_one_sentence() -> None:
    for line in _body():
        if _ENTRY.match(line):
            assert not _SECOND_SENTENCE.search(line), f"two sentences: {line[:120]!r}"


def test_versions_go_newest_first_and_only_the_top_one_is_unreleased() -> None:
    versions = [m for line in _body() if (m := _VERSION.match(line))]
    assert versions, "no version heading"
    numbers = [tuple(int(m.group(i)) for i in (1, 2, 3)) for m in versions]
    assert numbers == sorted(numbers, reverse=True)
    assert len(set(numbers)) == len(numbers)
    assert all(m.group(4) != "unreleased" for m in versions[1:])


def test_every_entry_is_under_a_kind_and_kinds_keep_their_order() -> None:
    for section in _versions():
        kinds: list[str] = []
        for line in section[1:]:
            if m := _KIND.match(line):
                kinds.append(m.group(1))
            elif _ENTRY.match(line):
                assert kinds, f"{section[0]}: an entry above every kind heading: {line[:80]!r}"
        assert kinds, f"{section[0]}: no kind heading"
        assert kinds == sorted(set(kinds), key=KINDS.index), (section[0], kinds)


def test_every_kind_heading_has_entries() -> None:
    for section in _versions():
        body = "\n".join(section)
        for part in body.split("\n### ")[1:]:
            assert re.search(r"^- ", part, re.MULTILINE), f"{section[0]}: {part.splitlines()[0]}"
