"""The end-to-end check of one built segment, before anything of it is uploaded.

The commitlog pass checked every record as it gathered it; this check looks at the
result whole, as a reader of cold will: the spooled COMMIT_LOG bytes against the units
the CONSUME_QUEUE object will be made of (:func:`check_built`). It proves that

* the plan's counts agree: ``end - start`` units, as many as the manifest will say;
* the spool file is exactly the units' sizes long, records back to back from ``cl_base``
  (the cold offsets the CONSUME_QUEUE object will hold);
* each record there is the one its unit names (:class:`~tieredstore.segment.RecordHeads`:
  size, magic, queue offset ``start + i``, and physicalOffset rewritten to its cold
  offset);
* the store-time range the manifest will record is the records' own.

A failure is a :class:`~tieredstore.errors.CorruptRecordError` (or CorruptUnitError)
naming the queue offset; the caller stops the queue and commits nothing.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dispatcher.commitlog_pass import Spooled
from dispatcher.planner import SegmentPlan
from tieredstore.errors import CorruptRecordError, CorruptUnitError, StoreError
from tieredstore.formats.vector import store_timestamps
from tieredstore.segment import RecordHeads

__all__ = ["check_built"]

I64 = npt.NDArray[np.int64]


def check_built(plan: SegmentPlan, spooled: Spooled, cl_base: int) -> None:
    """Check the spooled segment of ``plan`` at cold commitlog ``cl_base`` (module doc).

    Blocking (reads the spool file; run it in a thread). Raises CorruptUnitError or
    CorruptRecordError, naming ``plan.queue`` and the first queue offset at fault.
    """
    where = f"built segment [{plan.start}, {plan.end}) of {plan.queue}"
    sizes = plan.units["size"].astype(np.int64)
    count = int(sizes.shape[0])
    if count != plan.count:
        raise CorruptUnitError(f"{count} units for {plan.count} offsets", where=where)
    total = int(sizes.sum())
    if total != spooled.size or total != plan.nbytes:
        raise CorruptUnitError(
            f"units cover {total} bytes, the spooled commit log has {spooled.size}",
            where=where,
        )
    try:
        low, high = _check_records(plan, spooled, cl_base, where)
    except OSError as exc:
        raise StoreError(f"cannot read the spooled segment: {exc}", where=where) from exc
    if (low, high) != (spooled.min_store_timestamp, spooled.max_store_timestamp):
        raise CorruptRecordError(
            f"store times [{low}, {high}] differ from the gathered range "
            f"[{spooled.min_store_timestamp}, {spooled.max_store_timestamp}]",
            where=where,
        )


def _check_records(
    plan: SegmentPlan, spooled: Spooled, cl_base: int, where: str
) -> tuple[int, int]:
    """Check each spooled record against its unit; return the store-time range."""
    sizes = plan.units["size"].astype(np.int64)
    rel = np.cumsum(sizes) - sizes
    with _mapped(spooled.path, spooled.size) as data:
        heads, stamps = _read_heads(data, plan.start, rel, sizes, cl_base)
    bad = heads.first_bad()
    if bad is not None:
        raise CorruptRecordError(
            f"record of queue offset {plan.start + bad}: {heads.fault(bad)}", where=where
        )
    return int(stamps.min()), int(stamps.max())


def _read_heads(
    data: mmap.mmap, start: int, rel: I64, sizes: I64, cl_base: int
) -> tuple[RecordHeads, I64]:
    """The records' head check and store times (copies: no view of ``data`` is kept,
    so the map can close)."""
    arr = np.frombuffer(data, dtype=np.uint8)
    offsets = start + np.arange(sizes.shape[0], dtype=np.int64)
    return RecordHeads.check(arr, rel, sizes, offsets, cl_base + rel), store_timestamps(arr, rel)


class _mapped:  # noqa: N801 - used like a function: ``with _mapped(path, size) as data``
    """A read-only map of the first ``size`` bytes of ``path``, closed on exit."""

    def __init__(self, path: Path, size: int) -> None:
        self._file = path.open("rb")
        self._map = mmap.mmap(self._file.fileno(), size, access=mmap.ACCESS_READ)

    def __enter__(self) -> mmap.mmap:
        return self._map

    def __exit__(self, *_exc: object) -> None:
        try:
            self._map.close()
        finally:
            self._file.close()
