"""Message properties of many records at once, as Arrow columns.

The columnar twin of :func:`~tieredstore.formats.record.decode_properties` and of
:func:`~tieredstore.formats.record.keys_of`, :func:`~tieredstore.formats.record.tags_of`
and :func:`~tieredstore.formats.record.msg_id_of`, with the same results: raw
properties are ``name\\x01value\\x02`` pairs, decoded as UTF-8 with invalid bytes
replaced; a pair without ``\\x01`` is ignored; a name given twice keeps its first place
and its last value (a dict's ``[name] = value``). Pairs are split with Arrow compute
kernels, so no Python object is made per record. The rare batch that needs what the
kernels cannot give (invalid UTF-8, a repeated name) is decoded with the per-record
functions above instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from tieredstore.formats.arrownp import flat_binary, gather_ranges
from tieredstore.formats.record import (
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    decode_properties,
    keys_of,
    msg_id_of,
    tags_of,
)

__all__ = ["PropertyColumns", "property_columns"]

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class PropertyColumns:
    """Per record: every property (map), keys (list, never null), tags and the client
    message id (strings, null when unset)."""

    properties: pa.MapArray
    keys: pa.ListArray
    tags: pa.StringArray
    msg_id: pa.StringArray


def property_columns(raw: pa.BinaryArray) -> PropertyColumns:
    """Decode every record's raw property bytes (see the module docstring)."""
    try:
        raw.cast(pa.string())  # only to validate: every record's bytes valid UTF-8?
    except pa.ArrowInvalid:
        return _per_record(raw)
    n = len(raw)
    rows, names, values = _pairs(raw)
    coded = pc.dictionary_encode(names)
    codes = coded.indices.to_numpy().astype(np.int64)
    dictionary = coded.dictionary.to_pylist()
    if _repeats_a_name(rows, codes, len(dictionary)):
        return _per_record(raw)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=offsets[1:])

    def value_of(name: str) -> pa.StringArray:
        code = dictionary.index(name) if name in dictionary else -1
        return _value_of(code, n, rows, codes, values)

    return PropertyColumns(
        properties=pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), names, values),
        keys=_split_keys(value_of(PROPERTY_KEYS)),
        tags=value_of(PROPERTY_TAGS),
        msg_id=value_of(PROPERTY_UNIQ_KEY),
    )


_PAIR_END: Final = ord(PROPERTY_SEPARATOR)
_NAME_END: Final = ord(NAME_VALUE_SEPARATOR)


def _pairs(raw: pa.BinaryArray) -> tuple[I64, pa.StringArray, pa.StringArray]:
    """Every ``name\x01value`` pair of every record, in order: its record's index,
    its name and its value (valid UTF-8 ``raw`` assumed: the separators are ASCII, so
    the pieces are valid too). Found with numpy over the concatenated bytes: a piece
    ends at each ``\x02`` and at each record's end, and is a pair if it holds a
    ``\x01`` (the first one ends the name)."""
    n = len(raw)
    data, offsets = flat_binary(raw)
    seps = np.flatnonzero(data == _PAIR_END)
    # Piece ends in byte order; at one position a record's end comes before the empty
    # piece a "\x02" opening the next record ends (a stable sort keeps that order).
    ends = np.concatenate((offsets[1:], seps))
    order = np.argsort(ends, kind="stable")
    ends = ends[order]
    at_sep = order >= n
    starts = np.empty_like(ends)
    if len(ends):
        starts[0] = 0
        starts[1:] = ends[:-1] + at_sep[:-1]
    record_end = ~at_sep
    rows: I64 = np.cumsum(record_end) - record_end
    ones = np.flatnonzero(data == _NAME_END)
    first = np.searchsorted(ones, starts)
    split = ones[np.minimum(first, max(len(ones) - 1, 0))] if len(ones) else starts
    pair = (first < len(ones)) & (split < ends)
    starts, split, ends, rows = starts[pair], split[pair], ends[pair], rows[pair]
    return (
        rows.astype(np.int64),
        _strings(data, starts, split - starts),
        _strings(data, split + 1, ends - split - 1),
    )


def _strings(data: npt.NDArray[np.uint8], starts: I64, lengths: I64) -> pa.StringArray:
    """The ranges of ``data`` (ascending, valid UTF-8; fewer bytes than the binary
    array they come from, so int32 offsets hold them) as a string array."""
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(
        pa.string(), len(lengths),
        [None, pa.py_buffer(offsets), gather_ranges(data, starts, lengths)],
    )  # fmt: skip


def _repeats_a_name(rows: I64, codes: I64, distinct: int) -> bool:
    """Whether some record gives one name twice (``codes``: the names, dictionary
    encoded with ``distinct`` entries)."""
    if len(rows) < 2:
        return False
    pairs = rows * distinct + codes
    if distinct * (int(rows.max()) + 1) <= 16 * len(rows) + 65536:  # small: count them
        return bool(np.bincount(pairs).max() > 1)
    return bool(np.unique(pairs).size != len(pairs))


def _value_of(code: int, n: int, rows: I64, codes: I64, values: pa.StringArray) -> pa.StringArray:
    """Per record, the value of the property whose name has dictionary code ``code``
    (null when the record has none; -1: no record has it); each record gives a name at
    most once."""
    at = np.flatnonzero(codes == code)
    index = np.full(n, -1, np.int64)
    index[rows[at]] = at
    picked: pa.StringArray = pc.take(values, pa.array(index, pa.int64(), mask=index < 0))
    return picked


def _split_keys(keys: pa.StringArray) -> pa.ListArray:
    """``KEYS`` split on spaces, empty parts dropped; no KEYS is an empty list."""
    n = len(keys)
    parts = pc.split_pattern(keys, KEY_SEPARATOR)
    parent = pc.list_parent_indices(parts).to_numpy().astype(np.int64)
    flat = parts.flatten()
    nonempty = pc.not_equal(pc.utf8_length(flat), 0)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(
        np.bincount(parent[nonempty.to_numpy(zero_copy_only=False)], minlength=n),
        out=offsets[1:],
    )
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), flat.filter(nonempty))


def _per_record(raw: pa.BinaryArray) -> PropertyColumns:
    """The same columns, decoded record by record with the reference functions."""
    props = [decode_properties(v or b"") for v in raw.to_pylist()]
    offsets = np.zeros(len(props) + 1, np.int64)
    np.cumsum([len(p) for p in props], out=offsets[1:])
    names = [k for p in props for k in p]
    values = [v for p in props for v in p.values()]
    return PropertyColumns(
        properties=pa.MapArray.from_arrays(
            pa.array(offsets, pa.int32()),
            pa.array(names, pa.string()),
            pa.array(values, pa.string()),
        ),
        keys=pa.array([keys_of(p) for p in props], pa.list_(pa.string())),
        tags=pa.array([tags_of(p) for p in props], pa.string()),
        msg_id=pa.array([msg_id_of(p) for p in props], pa.string()),
    )
