"""docs/configuration.md's settings tables and docs/sidecar.toml, generated from the
declaration of every setting (:mod:`tieredstore.settings.declaration`).

``python -m tieredstore.settings.docs`` rewrites both (``make docs``); ``--check`` only
says whether they are current (exit 1 if not). In configuration.md only the part between
the :data:`BEGIN` and :data:`END` markers is generated; the prose around it is written by
hand. ``tests/tieredstore/settings/test_docs.py`` fails while either file differs from what
this module renders.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from tieredstore.settings.declaration import SECTIONS, Setting

__all__ = [
    "BEGIN",
    "END",
    "render_configuration_md",
    "render_sidecar_toml",
    "render_tables",
    "toml_literal",
]

BEGIN: Final = (
    "<!-- BEGIN settings: generated from tieredstore/settings/declaration.py by `make docs` -->"
)
END: Final = "<!-- END settings -->"

_COMMENT_COLUMN: Final = 37  # where sidecar.toml's comments start
_TOML_HEADER: Final = """\
# tieredstore sidecar configuration — every key, with its default unless marked.
# Reference: docs/configuration.md. Environment variables TIEREDSTORE_<SECTION>_<KEY>
# override this file; flags override both. Run with:
#   tieredstore run --config sidecar.toml
# Generated from tieredstore/settings/declaration.py by `make docs`: edit the declaration, not this.
"""


def toml_literal(value: object) -> str:
    """``value`` as TOML writes it inline (strings, numbers, booleans, lists, tables)."""
    if isinstance(value, Mapping):
        inner = ", ".join(f"{k} = {toml_literal(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    return json.dumps(value)  # strings, ints and booleans are spelt alike in TOML


def _row(s: Setting) -> str:
    default = "*required*" if s.required else f"`{toml_literal(s.toml_default)}`"
    reload = "live" if s.live else "restart"
    return f"| `{s.key}` | {default} | `{s.env}` | {reload} | {s.help} |"


def render_tables() -> str:
    """One heading and table per section, every key a row (the generated part)."""
    out: list[str] = []
    for name, section in SECTIONS.items():
        out += ["", f"## `[{name}]` — {section.TITLE}", ""]
        if section.INTRO:
            out += [section.INTRO, ""]
        out += ["| key | default | env | reload | meaning |", "|---|---|---|---|---|"]
        out += [_row(s) for s in section.settings()]
    return "\n".join(out[1:])


def render_configuration_md(current: str) -> str:
    """``current`` with the part between the markers replaced by :func:`render_tables`."""
    head, sep, rest = current.partition(BEGIN)
    _old, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"docs/configuration.md lacks the markers {BEGIN!r} and {END!r}")
    return f"{head}{BEGIN}\n{render_tables()}\n{END}{tail}"


def _line(text: str, note: str) -> str:
    if not note:
        return text
    return f"{text.ljust(_COMMENT_COLUMN - 1)} # {note}"


def _value(s: Setting) -> str:
    value = s.example if s.required else s.toml_default
    literal = toml_literal(value)
    name = s.key.split(".", 1)[1]
    if isinstance(value, list) and len(literal) > 60:  # one item a line
        return f"{name} = [\n" + "".join(f"    {toml_literal(v)},\n" for v in value) + "]"
    return f"{name} = {literal}"


def render_sidecar_toml() -> str:
    """docs/sidecar.toml: every current key at its default (a required key at its
    example); a table-valued key is its own ``[section.key]`` table, after the others."""
    out = [_TOML_HEADER]
    for name, section in SECTIONS.items():
        keys = [s for s in section.settings() if not s.deprecated]
        out.append(_line(f"[{name}]", section.TITLE))
        tables = [s for s in keys if isinstance(s.toml_default, Mapping)]
        for s in keys:
            if s not in tables:
                note = f"required: {s.note}" if s.required else s.note
                out.append(_line(_value(s), note))
        for s in tables:
            assert isinstance(s.toml_default, Mapping)
            out += ["", _line(f"[{s.key}]", s.note)]
            out += [f"{k} = {toml_literal(v)}" for k, v in s.toml_default.items()]
            if isinstance(s.example, str):
                out.append(f"# {s.example}")  # an example, commented out
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tieredstore.settings.docs", description=__doc__)
    p.add_argument("--docs", type=Path, default=Path("docs"), help="the docs folder")
    p.add_argument("--check", action="store_true", help="only check; exit 1 if stale")
    args = p.parse_args(argv)
    md, toml = args.docs / "configuration.md", args.docs / "sidecar.toml"
    wanted = {md: render_configuration_md(md.read_text()), toml: render_sidecar_toml()}
    stale = [path for path, text in wanted.items() if path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path} is not what tieredstore/settings/declaration.py declares: run make docs")
        return 1 if stale else 0
    for path in stale:
        path.write_text(wanted[path])
        print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
