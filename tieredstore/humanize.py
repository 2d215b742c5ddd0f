"""Numbers and times as people read them: ISO-8601 UTC, binary sizes, short durations.

Used by the verification report and history pages, ``status``, ``read``, ``expire``,
``lease show``, the progress lines and the JSON log lines: one unit family everywhere
(binary sizes: KiB, MiB, GiB; never MB next to MiB).
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

__all__ = ["human_bytes", "human_rate", "human_seconds", "iso_time", "shorten_middle"]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def iso_time(
    ms: int | None,
    *,
    timespec: Literal["seconds", "milliseconds", "auto"] = "seconds",
    zulu: bool = True,
) -> str:
    """The one ISO-8601 UTC formatter of epoch milliseconds; ``""`` for None.

    ``2025-01-02T03:04:05Z`` by default; ``timespec="milliseconds"`` gives
    ``2025-01-02T03:04:05.678Z``, ``"auto"`` a fraction only when there is one (in
    microseconds, as :meth:`datetime.isoformat`); ``zulu=False`` ends in ``+00:00``.
    Exact: integer milliseconds, never a float.
    """
    if ms is None:
        return ""
    text = (_EPOCH + dt.timedelta(milliseconds=ms)).isoformat(timespec=timespec)
    return text.replace("+00:00", "Z") if zulu else text


def human_bytes(n: int) -> str:
    """``0 B``, ``1023 B``, ``1.0 KiB``, ``1.5 MiB`` ... (binary units, up to TiB)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def human_seconds(seconds: float | None) -> str:
    """``850 ms``, ``12.3 s``, ``4 m 05 s``, ``2 h 03 m``, ``3 d 04 h``; ``""`` for None."""
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole >= 86400:
        return f"{whole // 86400} d {whole % 86400 // 3600:02d} h"
    if whole >= 3600:
        return f"{whole // 3600} h {whole % 3600 // 60:02d} m"
    return f"{whole // 60} m {whole % 60:02d} s"


def human_rate(bytes_per_second: float) -> str:
    """``human_bytes`` per second: ``12.5 MiB/s``."""
    return f"{human_bytes(int(bytes_per_second))}/s"


def shorten_middle(text: str, width: int) -> str:
    """``text`` if it has at most ``width`` characters, else its head and tail around
    ``…`` in exactly ``width`` characters (the tail a third of them).

    Long names (topics) often share a prefix and differ at the end (``…Service1`` and
    ``…Service2``): cutting the end would make them look the same. ``width`` below 1
    gives ``""``.
    """
    if len(text) <= width:
        return text
    if width < 1:
        return ""
    tail = width // 3
    return f"{text[: width - tail - 1]}…{text[len(text) - tail :] if tail else ''}"
