"""The broker's ``config/*.json`` files: JSON as fastjson writes it, read and written back.

RocketMQ serialises its config tables with fastjson, which writes the keys of
integer-keyed maps without quotes (``consumerOffset.json``: ``{0:5,1:8}``; ``delayOffset``
the same): not strict JSON, so :mod:`json` refuses it. :func:`loads` reads it as the
broker does: standard JSON plus bare integer object keys, which come back as ``int``
(quoted keys stay ``str``). :func:`dumps` writes the same dialect — tab-indented, string
keys quoted, ``int`` keys bare — which the broker reads back into the same tables.

=====================================  ===========================================
input                                  :func:`loads`
=====================================  ===========================================
``{"a@g":{0:5,1:8}}``                  ``{"a@g": {0: 5, 1: 8}}``
``{"offsetTable":{-1:3}}``             ``{"offsetTable": {-1: 3}}``
``{"n":1.5,"t":true,"x":null}``        ``{"n": 1.5, "t": True, "x": None}``
``{0x1:2}`` / ``{a:1}``                :class:`~tieredstore.errors.CorruptDataError`
=====================================  ===========================================
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from tieredstore.errors import CorruptDataError

__all__ = ["dumps", "loads"]

_WS: Final = re.compile(r"[ \t\n\r]*")
_NUMBER: Final = re.compile(r"-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?")
_INT_KEY: Final = re.compile(r"-?\d+")
_LITERALS: Final = {"true": True, "false": False, "null": None}
_DECODER: Final = json.JSONDecoder()


class _Parser:
    def __init__(self, text: str, where: str) -> None:
        self.text = text
        self.pos = 0
        self.where = where

    def fail(self, what: str) -> CorruptDataError:
        line = self.text.count("\n", 0, self.pos) + 1
        return CorruptDataError(f"{what} at line {line} (char {self.pos})", where=self.where)

    def skip(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def peek(self) -> str:
        self.skip()
        return self.text[self.pos : self.pos + 1]

    def expect(self, ch: str) -> None:
        if self.peek() != ch:
            raise self.fail(f"expected {ch!r}")
        self.pos += 1

    def value(self) -> Any:
        ch = self.peek()
        if ch == "{":
            return self.obj()
        if ch == "[":
            return self.array()
        if ch == '"':
            return self.string()
        for word, literal in _LITERALS.items():
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return literal
        m = _NUMBER.match(self.text, self.pos)
        if m is None:
            raise self.fail("expected a value")
        self.pos = m.end()
        return float(m.group()) if m.group(1) or m.group(2) else int(m.group())

    def string(self) -> str:
        try:
            value, self.pos = json.decoder.scanstring(self.text, self.pos + 1)  # type: ignore[attr-defined]
        except json.JSONDecodeError as exc:
            raise self.fail(f"bad string: {exc.msg}") from exc
        return str(value)

    def key(self) -> str | int:
        if self.peek() == '"':
            return self.string()
        m = _INT_KEY.match(self.text, self.pos)
        if m is None:
            raise self.fail("expected a quoted or integer key")
        self.pos = m.end()
        return int(m.group())

    def obj(self) -> dict[str | int, Any]:
        self.expect("{")
        out: dict[str | int, Any] = {}
        if self.peek() == "}":
            self.pos += 1
            return out
        while True:
            key = self.key()
            self.expect(":")
            out[key] = self.value()
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("}")
            return out

    def array(self) -> list[Any]:
        self.expect("[")
        out: list[Any] = []
        if self.peek() == "]":
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("]")
            return out


def loads(data: bytes | str, *, where: str = "config") -> Any:
    """Parse fastjson output (see the module docstring); CorruptDataError if it is not."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise CorruptDataError(f"not UTF-8: {exc}", where=where) from exc
    parser = _Parser(text, where)
    value = parser.value()
    parser.skip()
    if parser.pos != len(text):
        raise parser.fail("trailing data")
    return value


def _dump(value: Any, depth: int, out: list[str]) -> None:
    if isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        pad = "\t" * (depth + 1)
        items = []
        for k, v in value.items():
            part: list[str] = []
            _dump(v, depth + 1, part)
            name = (
                str(k)
                if isinstance(k, int) and not isinstance(k, bool)
                else json.dumps(str(k), ensure_ascii=False)
            )
            items.append(f"{pad}{name}:{''.join(part)}")
        out.append("{\n" + ",\n".join(items) + "\n" + "\t" * depth + "}")
    elif isinstance(value, list):
        parts = []
        for v in value:
            part = []
            _dump(v, depth + 1, part)
            parts.append("".join(part))
        out.append("[" + ",".join(parts) + "]")
    else:
        out.append(json.dumps(value, ensure_ascii=False))


def dumps(value: Any) -> bytes:
    """Encode as the broker does: tab-indented, ``int`` keys bare; UTF-8 bytes."""
    out: list[str] = []
    _dump(value, 0, out)
    return "".join(out).encode()
