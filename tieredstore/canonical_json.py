"""Strict, canonical JSON for the records tieredstore commits to the cold store.

Manifests and loss records are small JSON objects whose bytes must mean one thing:
:func:`canonical` writes sorted keys, no whitespace, ASCII (so equal records are equal
bytes and a parse/encode round trip returns the same bytes), and :func:`parse_object`
with :class:`Fields` reads them strictly — invalid JSON, duplicate, missing or unknown
fields, and wrong types (a bool is never an int) are each one error of the caller's
class (``error``: e.g. CorruptManifestError) naming the object.
"""

from __future__ import annotations

import json
from collections.abc import Set as AbstractSet
from typing import Any

from tieredstore.errors import TieredStoreError, UnsupportedFormatError

__all__ = ["Fields", "canonical", "parse_object"]


def canonical(doc: dict[str, Any]) -> bytes:
    """Canonical JSON bytes of ``doc``: sorted keys, no whitespace, ASCII."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for name, value in pairs:
        if name in doc:
            raise ValueError(f"duplicate field {name!r}")
        doc[name] = value
    return doc


def parse_object(data: bytes, *, error: type[TieredStoreError], what: str, where: str) -> Fields:
    """Parse ``data`` as one JSON object (duplicate keys refused) for typed reading."""
    try:
        doc = json.loads(data, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
        raise error(f"{what} is not valid JSON: {exc}", where=where) from exc
    return Fields(doc, error=error, what=what, where=where)


class Fields:
    """Typed access to a decoded JSON object; every misfit raises ``error``."""

    def __init__(
        self, doc: object, *, error: type[TieredStoreError], what: str, where: str
    ) -> None:
        if not isinstance(doc, dict):
            raise error(f"{what} is not a JSON object", where=where)
        self.doc: dict[str, Any] = doc
        self.error = error
        self.where = where
        self.what = what
        self.seen: set[str] = set()

    def get(self, name: str) -> object:
        """The raw value of field ``name`` (marked as seen); missing raises."""
        if name not in self.doc:
            raise self.error(f"{self.what} lacks field {name!r}", where=self.where)
        self.seen.add(name)
        return self.doc[name]

    def scalar(self, name: str, typ: type) -> object:
        """Field ``name``, which must be a ``typ`` (never a bool)."""
        value = self.get(name)
        if isinstance(value, bool) or not isinstance(value, typ):
            raise self.error(
                f"{self.what} field {name!r} is {type(value).__name__}, not {typ.__name__}",
                where=self.where,
            )
        return value

    def integer(self, name: str) -> int:
        value = self.scalar(name, int)
        assert isinstance(value, int)
        return value

    def version(self, name: str, readable: AbstractSet[int], *, label: str = "") -> int:
        """Field ``name``, a format version this tieredstore reads (one of ``readable``).

        A newer version than any of ``readable`` raises
        :class:`~tieredstore.errors.UnsupportedFormatError` (written by a newer
        tieredstore: upgrade); any other unreadable one raises ``error``. The message
        reads ``unsupported <label><name> <v> (this tieredstore reads <readable>)``.
        """
        version = self.integer(name)
        if version not in readable:
            error = UnsupportedFormatError if version > max(readable) else self.error
            reads = sorted(readable) if len(readable) > 1 else max(readable)
            raise error(
                f"unsupported {label}{name} {version} (this tieredstore reads {reads})",
                where=self.where,
            )
        return version

    def nested(self, name: str) -> Fields:
        """Field ``name`` as a JSON object of its own."""
        return Fields(
            self.get(name), error=self.error, what=f"{self.what} field {name!r}", where=self.where
        )

    def no_extra(self) -> None:
        """Raise if the object has a field nobody asked for."""
        extra = sorted(set(self.doc) - self.seen)
        if extra:
            raise self.error(f"{self.what} has unknown field {extra[0]!r}", where=self.where)
