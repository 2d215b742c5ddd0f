"""The repository documents itself: no outside design document, no dead relative link.

* No source or documentation file names the design notes the project started from
  (their content lives in ``docs/architecture.md`` and ``docs/format.md`` now).
* Every relative markdown link in ``README.md``, ``CONTRIBUTING.md`` and ``docs/*.md``
  points to a file or directory that exists, and a ``#fragment`` into a markdown file
  names one of its headings (GitHub's anchor rules).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Directories that are not the project's own files.
SKIP_DIRS = frozenset(
    {".git", ".venv", "build", ".demo", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
)
CHECKED_SUFFIXES = (".py", ".md", ".toml", ".yml", ".yaml")
# Spelled in pieces so that this file does not name them itself.
FORBIDDEN = ("DESIGN" + ".md", "ROCKETMQ" + "_FORMAT")

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _project_files() -> Iterator[Path]:
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            if name.endswith(CHECKED_SUFFIXES):
                yield Path(top, name)


def _docs() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]


def _prose_lines(text: str) -> Iterator[str]:
    """The lines of a markdown text outside fenced code blocks."""
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"`([^`]*)`", r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file (repeated headings get ``-1``, ``-2``...)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        slug = _slug(match.group(2))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def relative_links(path: Path) -> list[str]:
    """The relative link targets of a markdown file (outside code, URLs left out)."""
    targets: list[str] = []
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        for found in (*_LINK.findall(line), *_IMAGE.findall(line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", found, re.IGNORECASE):
                continue  # http:, https:, mailto:
            targets.append(found)
    return targets


def broken_link(doc: Path, target: str) -> str | None:
    """Why ``target`` (a link in ``doc``) does not resolve, or None when it does."""
    file_part, _, fragment = target.partition("#")
    dest = (doc.parent / file_part).resolve() if file_part else doc
    if not dest.exists():
        return f"{target}: no such file"
    if fragment and dest.suffix == ".md" and fragment not in anchors(dest):
        return f"{target}: no heading #{fragment} in {dest.name}"
    return None


def test_no_file_names_an_outside_design_document() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in _project_files()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if any(word in line for word in FORBIDDEN)
    ]
    assert offenders == []


def test_the_scan_sees_the_project() -> None:
    """The file walk must find the packages and the docs, or the check above proves nothing."""
    names = {p.relative_to(ROOT).as_posix() for p in _project_files()}
    assert {"tieredstore/cold/layout.py", "docs/format.md", "pyproject.toml", "README.md"} <= names


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(doc: Path) -> None:
    problems = [why for t in relative_links(doc) if (why := broken_link(doc, t))]
    assert problems == []


def test_a_dead_link_and_a_dead_anchor_are_caught(tmp_path: Path) -> None:
    """The checker itself: a missing file and a missing heading are both reported."""
    (tmp_path / "there.md").write_text("# A heading\n\n## `code` and/or more\n")
    doc = tmp_path / "doc.md"
    doc.write_text("x\n```\n[in code](nowhere.md)\n```\n")
    assert broken_link(doc, "there.md#a-heading") is None
    assert broken_link(doc, "there.md#code-andor-more") is None
    assert broken_link(doc, "missing.md") == "missing.md: no such file"
    assert broken_link(doc, "there.md#nope") is not None
    assert relative_links(doc) == []
