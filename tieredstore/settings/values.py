"""The value syntax of settings: one parser per kind of value, each raising ValueError.

A parser takes what TOML, an environment variable or a flag gave (a string, number,
boolean, list or table) and returns the typed value or raises ``ValueError`` with a
short reason (the loader, :func:`tieredstore.settings.loader.load_settings`, adds the key and
where the value came from). Sizes and durations refuse ``nan``, ``inf`` and booleans.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Final, TypeVar

__all__ = [
    "LOG_FORMATS",
    "LOG_LEVELS",
    "GuardMode",
    "InitPolicy",
    "InitStart",
    "parse_between",
    "parse_bool",
    "parse_choice",
    "parse_duration",
    "parse_enum",
    "parse_int",
    "parse_name",
    "parse_non_negative",
    "parse_optional_name",
    "parse_path",
    "parse_port",
    "parse_positive",
    "parse_retention_map",
    "parse_size",
    "parse_str",
    "parse_str_list",
    "parse_url",
]

_SIZE_UNITS: Final = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_DURATION_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

#: ``log.format``'s choices (also the ``--log-format`` flag's).
LOG_FORMATS: Final = ("text", "json")
#: ``log.level``'s choices (also the ``--log-level`` flag's).
LOG_LEVELS: Final = ("debug", "info", "warning", "error")

_N = TypeVar("_N", int, float)
_E = TypeVar("_E", bound=Enum)


def parse_size(value: object) -> int:
    """Parse a byte size: an int, or ``"64M"``/``"64MiB"``/``"1G"``/``"512K"``."""
    if isinstance(value, bool):
        raise ValueError("a size, not a boolean")
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", str(value), re.IGNORECASE)
    if not m:
        raise ValueError(f"not a size: {value!r} (e.g. 67108864, 64M, 1G)")
    size = float(m.group(1)) * _SIZE_UNITS[m.group(2).upper()]
    if not math.isfinite(size):  # a few hundred digits overflow a float
        raise ValueError(f"not a finite size: {value!r}")
    return int(size)


def parse_duration(value: object) -> float:
    """Parse seconds: a number, or ``"500ms"``/``"60s"``/``"5m"``/``"72h"``/``"7d"``.

    TOML's ``nan`` and ``inf`` are refused: an infinite tick interval would tick once
    and then never again, silently, and ``nan`` compares false with every bound check.
    """
    if isinstance(value, bool):
        raise ValueError("a duration, not a boolean")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", str(value))
        if not m:
            raise ValueError(f"not a duration: {value!r} (e.g. 60, 60s, 5m, 72h)")
        seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2) or "s"]
    if not math.isfinite(seconds):
        raise ValueError(f"not a finite duration: {value!r}")
    return seconds


def parse_bool(value: object) -> bool:
    """``true/false/1/0/yes/no/on/off`` (any case) or a TOML boolean."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def parse_int(value: object) -> int:
    """A whole number (a TOML integer or its decimal text), never a boolean."""
    if isinstance(value, bool):
        raise ValueError("an integer, not a boolean")
    return int(str(value)) if not isinstance(value, int) else value


def parse_str(value: object) -> str:
    """Text; a number is taken as its text (an environment variable's ``9780``)."""
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ValueError(f"not a string: {value!r}")
    return str(value)


def parse_path(value: object) -> Path:
    """A filesystem path: non-empty text (or a path object, from a flag)."""
    text = os.fspath(value) if isinstance(value, os.PathLike) else parse_str(value)
    if not str(text).strip():
        raise ValueError("an empty path")
    return Path(text)


def parse_str_list(value: object) -> tuple[str, ...]:
    """A TOML list of strings, or comma-separated text (an environment variable)."""
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(f"not a list of strings: {value!r}")


def parse_choice(*choices: str) -> Callable[[object], str]:
    """A parser for one of ``choices`` (their list is the error's)."""

    def parse(value: object) -> str:
        text = parse_str(value)
        if text not in choices:
            raise ValueError(f"{text!r} is not one of {', '.join(choices)}")
        return text

    return parse


def parse_enum(kind: type[_E]) -> Callable[[object], _E]:
    """A parser for a member of ``kind``, written as its value (the error lists them)."""
    names = [m.value for m in kind]
    choose = parse_choice(*names)

    def parse(value: object) -> _E:
        return kind(choose(value))

    return parse


def parse_url(value: object) -> str:
    """A cold store URL or path; an ``s3://`` URL must name a valid bucket."""
    text = parse_str(value).strip()
    if not text:
        raise ValueError("empty URL")
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)$", text)
    bucket = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/|$)"
    if m and m.group(1) == "s3" and not re.match(bucket, m.group(2)):
        raise ValueError(f"{text!r} has no valid bucket name (s3://bucket/prefix)")
    if m and not m.group(2):
        raise ValueError(f"{text!r} has nothing after {m.group(1)}://")
    return text


def parse_name(value: object) -> str:
    """A cluster or broker name: letters, digits, ``_ - . % |``, at most 127."""
    text = parse_str(value)
    if not re.fullmatch(r"[A-Za-z0-9_.%|-]{1,127}", text) or text in (".", ".."):
        raise ValueError(f"{text!r} is not a valid name (letters, digits, _ - . % |; max 127)")
    return text


def parse_optional_name(value: object) -> str:
    """Empty, or a name as :func:`parse_name` takes it."""
    text = parse_str(value)
    return parse_name(text) if text else text


def parse_positive(parse: Callable[[object], _N]) -> Callable[[object], _N]:
    """``parse``, then refuse zero and below."""

    def check(value: object) -> _N:
        out = parse(value)
        if out <= 0:
            raise ValueError(f"must be positive, got {value!r}")
        return out

    return check


def parse_non_negative(parse: Callable[[object], _N]) -> Callable[[object], _N]:
    """``parse``, then refuse below zero."""

    def check(value: object) -> _N:
        out = parse(value)
        if out < 0:
            raise ValueError(f"must not be negative, got {value!r}")
        return out

    return check


def parse_between(parse: Callable[[object], int], low: int, high: int) -> Callable[[object], int]:
    """``parse``, then refuse what is outside ``[low, high]``."""

    def check(value: object) -> int:
        out = parse(value)
        if not low <= out <= high:
            raise ValueError(f"must be between {low} and {high}, got {value!r}")
        return out

    return check


def parse_port(value: object) -> int:
    """A TCP port, 0..65535 (0: any free port)."""
    port = parse_int(value)
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is not in 0..65535")
    return port


def parse_retention_map(value: object) -> dict[str, float]:
    """A TOML table ``topic = duration``."""
    if not isinstance(value, Mapping):
        raise ValueError("a table of topic = duration")
    return {str(k): parse_duration(v) for k, v in value.items()}


class GuardMode(Enum):
    """``tiering.guard``: the durability guard (see
    :mod:`tieredstore.dispatcher.tiering.durability`)."""

    SYNC = "sync"
    CHECKPOINT = "checkpoint"
    NONE = "none"


class InitStart(Enum):
    """Where a queue seen for the first time starts tiering."""

    EARLIEST = "earliest"  #: the hot store's first offset
    LATEST = "latest"  #: the hot store's next offset: only new messages
    TIMESTAMP = "timestamp"  #: the first message stored at or after a time


@dataclass(frozen=True, slots=True, repr=False)
class InitPolicy:
    """``tiering.init_policy``: ``earliest``, ``latest`` or ``timestamp:<epoch ms>``.

    ``str()`` gives the setting's text back (what logs and provenance records say).
    """

    start: InitStart
    timestamp_ms: int = 0

    @classmethod
    def parse(cls, value: object) -> InitPolicy:
        text = parse_str(value)
        if m := re.fullmatch(r"timestamp:(\d+)", text):
            return cls(InitStart.TIMESTAMP, int(m.group(1)))
        if text in (InitStart.EARLIEST.value, InitStart.LATEST.value):
            return cls(InitStart(text))
        raise ValueError(f"{text!r} is not earliest, latest or timestamp:<epoch ms>")

    def __str__(self) -> str:
        if self.start is InitStart.TIMESTAMP:
            return f"timestamp:{self.timestamp_ms}"
        return str(self.start.value)

    def __repr__(self) -> str:
        return repr(str(self))
