"""Which segments a query needs: Spark's pushed filters, as bounds a segment is tested on.

Spark hands the data source the conjuncts of a query's ``WHERE`` it can express
(:mod:`pyspark.sql.datasource` filters). These columns prune:

================================  ==============================================  =========
column                            filters that prune                              tested on
================================  ==============================================  =========
``cluster``, ``broker``,          ``=``, ``IN``, ``LIKE 'prefix%'``               the key
``topic``
``queue_id``                      ``=``, ``IN``, ``<``, ``<=``, ``>``, ``>=``     the key
``queue_offset``                  ``=``, ``IN``, ``<``, ``<=``, ``>``, ``>=``     key, then
                                                                                  manifest
``store_timestamp``               ``=``, ``IN``, ``<``, ``<=``, ``>``, ``>=``     manifest
================================  ==============================================  =========

Pruning is conservative: a segment is skipped only when no row of it can pass, and
every filter is handed back to Spark, which still evaluates it on each row. So a filter
this module does not understand (``OR``, ``NOT``, a function of a column) costs speed,
never correctness. Timestamps are compared in microseconds, the unit of Spark's
``TimestampType``; the manifests' store times are milliseconds, so ``ms * 1000``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Final

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

from tieredstore.export.rows import TimeWindow

__all__ = ["US_PER_MS", "IntBounds", "NameBounds", "Pruning", "SegmentCut"]

US_PER_MS: Final = 1000
_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_INT_COLUMNS: Final = ("queue_id", "queue_offset")
_NAME_COLUMNS: Final = ("cluster", "broker", "topic")
_TIME_COLUMN: Final = "store_timestamp"


@dataclass(frozen=True, slots=True)
class IntBounds:
    """Integers ``v`` with ``lo <= v <= hi`` (None: unbounded) and, when ``values`` is
    set, ``v in values``."""

    lo: int | None = None
    hi: int | None = None
    values: frozenset[int] | None = None

    def admits(self, v: int) -> bool:
        return (
            (self.lo is None or v >= self.lo)
            and (self.hi is None or v <= self.hi)
            and (self.values is None or v in self.values)
        )

    def clip(self, first: int, last: int) -> tuple[int, int] | None:
        """The narrowest ``[a, b]`` inside ``[first, last]`` holding every admitted
        integer of it, or None when it holds none."""
        a = first if self.lo is None else max(first, self.lo)
        b = last if self.hi is None else min(last, self.hi)
        if self.values is not None:
            inside = [v for v in self.values if a <= v <= b]
            if not inside:
                return None
            a, b = min(inside), max(inside)
        return (a, b) if a <= b else None

    def overlaps(self, first: int, last: int) -> bool:
        return self.clip(first, last) is not None

    def tightened(self, op: type[Filter], value: int | tuple[int, ...]) -> IntBounds:
        """These bounds AND ``column <op> value``."""
        if op is In:
            assert isinstance(value, tuple)
            return self._with_values(frozenset(value))
        assert isinstance(value, int)
        if op in (EqualTo, EqualNullSafe):
            return self._with_values(frozenset((value,)))
        if op in (GreaterThan, GreaterThanOrEqual):
            lo = value + 1 if op is GreaterThan else value
            return replace(self, lo=lo if self.lo is None else max(self.lo, lo))
        hi = value - 1 if op is LessThan else value
        return replace(self, hi=hi if self.hi is None else min(self.hi, hi))

    def _with_values(self, values: frozenset[int]) -> IntBounds:
        return replace(self, values=values if self.values is None else self.values & values)


@dataclass(frozen=True, slots=True)
class NameBounds:
    """Names in ``values`` (None: any) that start with every one of ``prefixes``."""

    values: frozenset[str] | None = None
    prefixes: tuple[str, ...] = ()

    def admits(self, name: str) -> bool:
        return (self.values is None or name in self.values) and all(
            name.startswith(p) for p in self.prefixes
        )

    def tightened(self, op: type[Filter], value: str | tuple[str, ...]) -> NameBounds:
        """These bounds AND ``column <op> value``."""
        if op is StringStartsWith:
            assert isinstance(value, str)
            return replace(self, prefixes=(*self.prefixes, value))
        values = frozenset(value) if isinstance(value, tuple) else frozenset((value,))
        return replace(self, values=values if self.values is None else self.values & values)


_NAME_OPS: Final = (EqualTo, EqualNullSafe, In, StringStartsWith)
_INT_OPS: Final = (
    EqualTo,
    EqualNullSafe,
    In,
    GreaterThan,
    GreaterThanOrEqual,
    LessThan,
    LessThanOrEqual,
)


@dataclass(frozen=True, slots=True)
class Pruning:
    """The pushed filters as bounds per column; the default admits every segment."""

    cluster: NameBounds = field(default_factory=NameBounds)
    broker: NameBounds = field(default_factory=NameBounds)
    topic: NameBounds = field(default_factory=NameBounds)
    queue_id: IntBounds = field(default_factory=IntBounds)
    queue_offset: IntBounds = field(default_factory=IntBounds)
    store_time_us: IntBounds = field(default_factory=IntBounds)

    @classmethod
    def of(cls, filters: Iterable[Filter]) -> Pruning:
        """The bounds every row passing all of ``filters`` (an AND) lies within."""
        pruning = cls()
        for f in filters:
            pruning = pruning.with_filter(f)
        return pruning

    def with_filter(self, f: Filter) -> Pruning:
        """These bounds AND ``f``; a filter that cannot prune leaves them as they are."""
        column: tuple[str, ...] = getattr(f, "attribute", ())
        if len(column) != 1:
            return self
        name, value = column[0], getattr(f, "value", None)
        op = type(f)
        if name in _NAME_COLUMNS and op in _NAME_OPS:
            names = _names(value)
            if names is None:
                return self
            bounds: NameBounds = getattr(self, name)
            changes: dict[str, Any] = {name: bounds.tightened(op, names)}
            return replace(self, **changes)
        if op not in _INT_OPS:
            return self
        if name in _INT_COLUMNS:
            ints = _ints(value, _int)
            attr = name
        elif name == _TIME_COLUMN:
            ints = _ints(value, _micros)
            attr = "store_time_us"
        else:
            return self
        if ints is None:
            return self
        current: IntBounds = getattr(self, attr)
        tightened: dict[str, Any] = {attr: current.tightened(op, ints)}
        return replace(self, **tightened)

    def cut(self, start: int, end: int, min_ms: int, max_ms: int) -> SegmentCut | None:
        """What to read of a segment of queue offsets ``[start, end)`` and store times
        ``[min_ms, max_ms]``; None when no row of it can pass."""
        offsets = self.queue_offset.clip(start, end - 1)
        span = self.store_time_us.clip(min_ms * US_PER_MS, max_ms * US_PER_MS)
        if offsets is None or span is None:
            return None
        lo, hi = -(-span[0] // US_PER_MS), span[1] // US_PER_MS
        window = None if lo <= min_ms and hi >= max_ms else TimeWindow(lo, hi)
        return SegmentCut(offsets[0], offsets[1] + 1, window)


@dataclass(frozen=True, slots=True)
class SegmentCut:
    """The queue offsets ``[first, end)`` of a segment a query reads, and the store
    times worth decoding there (None: every one)."""

    first: int
    end: int
    window: TimeWindow | None


def _names(value: Any) -> str | tuple[str, ...] | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _micros(value: Any) -> int | None:
    """A timezone-aware datetime as microseconds since the epoch; None otherwise."""
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        return None
    return (value - _EPOCH) // dt.timedelta(microseconds=1)


def _ints(value: Any, convert: Any) -> int | tuple[int, ...] | None:
    if isinstance(value, list | tuple):
        converted = [convert(v) for v in value]
        return None if any(v is None for v in converted) else tuple(converted)
    result: int | None = convert(value)
    return result
