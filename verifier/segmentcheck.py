"""Verify one cold segment against itself and against the hot store: pure numpy, no I/O.

The Spark tasks in :mod:`tieredstore.verifier.readers` fetch the bytes; this module decides. Every
check is vectorised over the segment's units (docs/format.md,
"Verification invariants"):

=================  ===========================================================  ===========
fact kind          finding                                                      class
=================  ===========================================================  ===========
``cq_offsets``     cold CQ commitlog offsets do not tile ``[cl_base, cl_end)``  record
                   (first ≠ cl_base, a unit not where the previous record       mismatch
                   ended, the last not ending at cl_end, size ≤ 0)
``record_fields``  the cold record at a unit's offset has totalSize ≠ size,     record
                   queueOffset ≠ the queue offset, or physicalOffset ≠ its      mismatch
                   cold offset (content level)
``cq_vs_hot``      cold unit size or tagsCode ≠ the hot unit                    content
                                                                                mismatch
``record_bytes``   cold record ≠ hot record outside bytes [28, 36)              content
                   (content level)                                              mismatch
``manifest_fields`` the manifest's min/max store time or message count ≠ what   manifest
                   the records say (content level; every record readable)       mismatch
=================  ===========================================================  ===========

Only offsets in ``[max(start, hot_min), min(end, hot_max))`` are compared with hot: below
the hot min the broker has deleted the data ("cold only"), at or above the hot max the
offsets are reported by the cold_ahead_of_hot check instead.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from tieredstore.formats.consumequeue import Units
from tieredstore.formats.record import (
    PHYSICAL_OFFSET_AT,
    PHYSICAL_OFFSET_SLICE,
    QUEUE_OFFSET_AT,
    STORE_TIMESTAMP_AT_V4,
    STORE_TIMESTAMP_AT_V6,
    SYS_FLAG_AT,
    TOTAL_SIZE_AT,
    SysFlag,
)
from tieredstore.formats.vector import differing_bytes, gather_be
from tieredstore.hot.commitlog import gather
from tieredstore.verifier.ranges import OffsetRange, mask_to_ranges

__all__ = [
    "FactKind",
    "HotSide",
    "ManifestClaims",
    "SegmentFact",
    "SegmentFacts",
    "SegmentGeometry",
    "check_segment",
]

Int64s = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

# Smallest record that has every field we read (totalSize .. physicalOffset).
_MIN_FIELDS: Final = PHYSICAL_OFFSET_SLICE.stop


class FactKind(enum.Enum):
    """What a finding inside one segment is about (see the module table)."""

    CQ_OFFSETS = "cq_offsets"
    RECORD_FIELDS = "record_fields"
    CQ_VS_HOT = "cq_vs_hot"
    RECORD_BYTES = "record_bytes"
    MANIFEST_FIELDS = "manifest_fields"
    #: The link's objects, as :func:`tieredstore.verifier.decision.object_findings` decides them
    #: (``missing_object``, ``size_mismatch``, ``digest_mismatch``).
    OBJECT_UNREADABLE = "object_unreadable"
    OBJECT_SIZE = "object_size"
    OBJECT_DIGEST = "object_digest"


@dataclass(frozen=True, slots=True)
class ManifestClaims:
    """What a manifest says of its records: retention, ``restore --since`` and offset by
    time trust these, so the content level checks them against the records."""

    min_store_timestamp: int
    max_store_timestamp: int
    message_count: int


@dataclass(frozen=True, slots=True)
class SegmentGeometry:
    """What a manifest says about where a segment lives."""

    start: int
    end: int
    cl_base: int
    cl_end: int


@dataclass(frozen=True, slots=True)
class HotSide:
    """Hot units for queue offsets ``[start, start + len(units))``, and, for the content
    level, the matching hot records back to back in queue-offset order (``records``)."""

    start: int
    units: Units
    records: bytes | bytearray | None = None


@dataclass(frozen=True, slots=True)
class SegmentFact:
    """One finding: a kind, the affected offsets, and a one-line detail."""

    kind: FactKind
    range: OffsetRange
    detail: str


@dataclass(frozen=True, slots=True)
class SegmentFacts:
    """Everything :func:`check_segment` found, plus what it compared."""

    units_compared: int = 0
    bytes_compared: int = 0
    facts: list[SegmentFact] = field(default_factory=list)


def _facts(kind: FactKind, mask: Bools, base: int, detail: str) -> list[SegmentFact]:
    return [SegmentFact(kind, r, detail) for r in mask_to_ranges(mask, base)]


def _first(mask: Bools) -> int:
    return int(np.flatnonzero(mask)[0])


def _check_offsets(geo: SegmentGeometry, offs: Int64s, sizes: Int64s) -> list[SegmentFact]:
    n = offs.size
    expected = np.empty(n, dtype=np.int64)
    expected[0] = geo.cl_base
    expected[1:] = offs[:-1] + sizes[:-1]
    bad = (offs != expected) | (sizes <= 0)
    if int(offs[-1] + sizes[-1]) != geo.cl_end:
        bad[-1] = True
    if not bad.any():
        return []
    i = _first(bad)
    detail = (
        f"cold CQ unit at offset {geo.start + i} points at cold offset {int(offs[i])} size "
        f"{int(sizes[i])}; expected cold offset {int(expected[i])} (segment cold commitlog "
        f"[{geo.cl_base}, {geo.cl_end}))"
    )
    return _facts(FactKind.CQ_OFFSETS, bad, geo.start, detail)


def _check_fields(
    geo: SegmentGeometry, cl: npt.NDArray[np.uint8], offs: Int64s, sizes: Int64s
) -> tuple[list[SegmentFact], Bools]:
    """Check each record's header against its unit; return facts and the readable mask."""
    pos = offs - geo.cl_base
    readable = (pos >= 0) & (sizes >= _MIN_FIELDS) & (pos + sizes <= cl.size)
    bad = ~readable
    at = pos[readable]
    qoffs = np.arange(geo.start, geo.end, dtype=np.int64)
    total = gather_be(cl, at + TOTAL_SIZE_AT, 4)
    qoff = gather_be(cl, at + QUEUE_OFFSET_AT, 8)
    phys = gather_be(cl, at + PHYSICAL_OFFSET_AT, 8)
    bad[readable] = (
        (total != sizes[readable]) | (qoff != qoffs[readable]) | (phys != offs[readable])
    )
    if not bad.any():
        return [], readable
    i = _first(bad)
    if not readable[i]:
        detail = (
            f"record of offset {geo.start + i} at cold offset {int(offs[i])} size "
            f"{int(sizes[i])} is outside the commitlog object of {cl.size} bytes"
        )
    else:
        j = int(np.count_nonzero(readable[:i]))
        detail = (
            f"record at offset {geo.start + i} (cold offset {int(offs[i])}): totalSize "
            f"{int(total[j])} vs unit size {int(sizes[i])}, queueOffset {int(qoff[j])}, "
            f"physicalOffset {int(phys[j])}"
        )
    return _facts(FactKind.RECORD_FIELDS, bad, geo.start, detail), readable


def _check_bytes(
    cl: bytes | memoryview,
    cold_pos: Int64s,
    hot: bytes | bytearray,
    hot_pos: Int64s,
    sizes: Int64s,
) -> tuple[Bools, str]:
    """Compare records pairwise outside bytes [28, 36); return the bad mask and a detail."""
    c = np.frombuffer(gather(cl, cold_pos, sizes), dtype=np.uint8)
    h = np.frombuffer(gather(hot, hot_pos, sizes), dtype=np.uint8)
    rec_starts = np.zeros(sizes.size, dtype=np.int64)
    np.cumsum(sizes[:-1], out=rec_starts[1:])
    where = differing_bytes(c, h, rec_starts)
    bad = np.zeros(sizes.size, dtype=np.bool_)
    if where.size == 0:
        return bad, ""
    rec = np.searchsorted(rec_starts, where, side="right") - 1
    bad[rec] = True
    k = int(where[0])
    r = int(rec[0])
    detail = (
        f"byte {k - int(rec_starts[r])} of the record differs "
        f"(cold 0x{int(c[k]):02x}, hot 0x{int(h[k]):02x})"
    )
    return bad, detail


def _check_hot(
    geo: SegmentGeometry,
    units: Units,
    hot: HotSide,
    cl: bytes | memoryview | None,
    readable: Bools | None,
) -> tuple[list[SegmentFact], int]:
    lo = hot.start - geo.start
    n = hot.units.shape[0]
    cold = units[lo : lo + n]
    c_size = cold["size"].astype(np.int64)
    h_size = hot.units["size"].astype(np.int64)
    bad_unit = (c_size != h_size) | (cold["tags_code"] != hot.units["tags_code"])
    facts: list[SegmentFact] = []
    if bad_unit.any():
        i = _first(bad_unit)
        detail = (
            f"cold CQ unit at offset {hot.start + i} (size {int(c_size[i])}, tagsCode "
            f"{int(cold['tags_code'][i])}) differs from hot (size {int(h_size[i])}, "
            f"tagsCode {int(hot.units['tags_code'][i])})"
        )
        facts += _facts(FactKind.CQ_VS_HOT, bad_unit, hot.start, detail)
    if cl is None or hot.records is None or readable is None:
        return facts, 0
    hot_pos = np.zeros(n, dtype=np.int64)
    np.cumsum(h_size[:-1], out=hot_pos[1:])
    comparable = ~bad_unit & readable[lo : lo + n]
    cold_pos = cold["commitlog_offset"].astype(np.int64) - geo.cl_base
    sel = np.flatnonzero(comparable)
    if sel.size == 0:
        return facts, 0
    bad_sel, detail = _check_bytes(cl, cold_pos[sel], hot.records, hot_pos[sel], c_size[sel])
    if bad_sel.any():
        bad = np.zeros(n, dtype=np.bool_)
        bad[sel[bad_sel]] = True
        first = hot.start + int(sel[_first(bad_sel)])
        facts += _facts(FactKind.RECORD_BYTES, bad, hot.start, f"offset {first}: {detail}")
    return facts, int(c_size[sel].sum())


def _check_claims(
    geo: SegmentGeometry,
    cl: npt.NDArray[np.uint8],
    offs: Int64s,
    readable: Bools,
    claims: ManifestClaims,
) -> list[SegmentFact]:
    """The manifest's store-time range and message count against the records (only when
    every record is readable: otherwise record_mismatch already says so)."""
    if not readable.all():
        return []
    at = offs - geo.cl_base
    # The store time follows the born host, IPv4 or IPv6 (sysFlag BORNHOST_V6).
    v6 = (gather_be(cl, at + SYS_FLAG_AT, 4) & int(SysFlag.BORNHOST_V6)) != 0
    ts_at = at + np.where(v6, STORE_TIMESTAMP_AT_V6, STORE_TIMESTAMP_AT_V4)
    ts = gather_be(cl, ts_at, 8)
    found = (int(ts.min()), int(ts.max()), int(offs.shape[0])) if ts.size else (0, 0, 0)
    claimed = (claims.min_store_timestamp, claims.max_store_timestamp, claims.message_count)
    if found == claimed:
        return []
    detail = (
        f"manifest says store times [{claimed[0]}, {claimed[1]}] and {claimed[2]} messages; "
        f"the records say [{found[0]}, {found[1]}] and {found[2]}"
    )
    whole = np.ones(geo.end - geo.start, dtype=np.bool_)
    return _facts(FactKind.MANIFEST_FIELDS, whole, geo.start, detail)


def check_segment(
    geo: SegmentGeometry,
    units: Units,
    *,
    cl: bytes | memoryview | None = None,
    hot: HotSide | None = None,
    claims: ManifestClaims | None = None,
) -> SegmentFacts:
    """Check one segment's cold CQ ``units`` (and, given, its commitlog object ``cl``)
    against its manifest geometry and against the ``hot`` side.

    ``units`` must hold exactly ``end - start`` units (the caller checks the object size
    against the manifest first); ``hot.units`` must lie inside ``[start, end)``.
    """
    n = geo.end - geo.start
    if units.shape[0] != n:
        raise ValueError(f"segment [{geo.start}, {geo.end}) needs {n} units, got {units.shape[0]}")
    if hot is not None and not (
        geo.start <= hot.start <= hot.start + hot.units.shape[0] <= geo.end
    ):
        raise ValueError("hot units must lie inside the segment")
    if n == 0:
        return SegmentFacts()
    offs = units["commitlog_offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    facts = _check_offsets(geo, offs, sizes)
    readable: Bools | None = None
    if cl is not None:
        arr = np.frombuffer(cl, dtype=np.uint8)
        field_facts, readable = _check_fields(geo, arr, offs, sizes)
        facts += field_facts
        if claims is not None:
            facts += _check_claims(geo, arr, offs, readable, claims)
    compared = bytes_compared = 0
    if hot is not None and hot.units.shape[0]:
        hot_facts, bytes_compared = _check_hot(geo, units, hot, cl, readable)
        facts += hot_facts
        compared = hot.units.shape[0]
    return SegmentFacts(compared, bytes_compared, facts)
