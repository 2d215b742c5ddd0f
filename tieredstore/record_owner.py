"""Whose record a consume-queue unit points at: topic, queue id and physical offset.

:class:`~tieredstore.segment.RecordHeads` proves a record is a record of the size and
queue offset its unit says. That is not enough: a unit of queue ``T/0`` pointing at a
record of topic ``U`` with the same queue offset and size passes it, and a segment
built from it has a consume queue and a commit log that disagree. :class:`RecordOwners`
closes that gap for **hot** records, vectorised over a buffer of many records:

* ``queueId`` (bytes [12, 16)) must be the unit's queue id;
* ``physicalOffset`` (bytes [28, 36)) must be the hot commitlog offset the unit points
  at (the broker writes each record's own position there);
* the topic (after the body: a 1-byte length for magic v1, 2 bytes for v2, then the
  name) must be the unit's topic, byte for byte, and lie inside the record.

Where the topic sits depends on the born and store host kinds (sysFlag bits
BORNHOST_V6, STOREHOST_V6) and the body length, so it is computed per record with
numpy, never a Python step per record. Records :class:`RecordHeads` already found bad
are not read (their fields may point anywhere).

Worked example (v1, both hosts IPv4): bodyLength at 84, body at 88, so a body of 10
bytes puts the topic length byte at 98 and the topic at 99.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from tieredstore.formats.record import (
    BODY_LENGTH_AT_V4,
    HEAD_DTYPE,
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    MAGIC_CODE_V2,
    PHYSICAL_OFFSET_AT,
    SYS_FLAG_AT,
    SysFlag,
)
from tieredstore.formats.vector import gather_be

__all__ = ["RecordOwners", "TopicTable"]

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

_QUEUE_ID_AT: Final = int(HEAD_DTYPE.fields["queue_id"][1])  # type: ignore[index]
_V6_EXTRA: Final = HOST_V6_SIZE - HOST_V4_SIZE


@dataclass(frozen=True, slots=True)
class TopicTable:
    """Topic names as a zero-padded byte matrix (one row per name), built once per pass
    so that each window compares its records' topics with one numpy expression."""

    names: tuple[bytes, ...]
    matrix: npt.NDArray[np.uint8]
    lengths: I64

    @classmethod
    def of(cls, topics: Sequence[str]) -> TopicTable:
        names = tuple(t.encode() for t in topics)
        matrix = np.zeros((len(names), max((len(t) for t in names), default=0) + 1), np.uint8)
        for k, name in enumerate(names):
            matrix[k, : len(name)] = np.frombuffer(name, dtype=np.uint8)
        return cls(names, matrix, np.array([len(t) for t in names], dtype=np.int64))


@dataclass(frozen=True, slots=True)
class RecordOwners:
    """The owner check of many hot records (module docstring); ``bad`` marks the
    records whose topic, queue id or physical offset disagrees with their unit."""

    fields: tuple[tuple[str, I64, I64], ...]  # (field, found, expected) of the int fields
    topic_ok: Mask
    topics: TopicTable
    topic_of: I64  # row of each record's expected topic in ``topics``
    bad: Mask

    @classmethod
    def check(
        cls,
        arr: npt.NDArray[np.uint8],
        starts: I64,
        sizes: I64,
        skip: Mask,
        *,
        queue_ids: I64,
        physical: I64,
        topics: TopicTable,
        topic_of: I64,
    ) -> RecordOwners:
        """Check the records starting at ``starts`` in ``arr`` (``sizes`` bytes each,
        the units' sizes, already proven by :class:`RecordHeads` unless ``skip``).

        Record ``i`` belongs to topic ``topics.names[topic_of[i]]`` and queue
        ``queue_ids[i]``, and its unit points at hot commitlog offset ``physical[i]``.
        Skipped records are never read and never bad here.
        """
        safe = np.where(skip, 0, starts)
        fields = (
            ("queueId", gather_be(arr, safe + _QUEUE_ID_AT, 4), queue_ids),
            ("physicalOffset", gather_be(arr, safe + PHYSICAL_OFFSET_AT, 8), physical),
        )
        topic_ok = _topics_match(arr, safe, sizes, skip, topics, topic_of)
        bad = ~topic_ok
        for _name, found, expected in fields:
            bad |= found != expected
        bad &= ~skip
        return cls(fields, topic_ok, topics, topic_of, bad)

    def fault(self, i: int) -> str:
        """What is wrong with record ``i`` (the first check it fails)."""
        for name, found, expected in self.fields:
            if found[i] != expected[i]:
                return f"{name} field {int(found[i])}, expected {int(expected[i])}"
        if not self.topic_ok[i]:
            want = self.topics.names[int(self.topic_of[i])].decode("utf-8", "replace")
            return f"the record is not of topic {want!r}"
        raise ValueError(f"record {i} has the right owner")


def _topics_match(
    arr: npt.NDArray[np.uint8],
    starts: I64,
    sizes: I64,
    skip: Mask,
    topics: TopicTable,
    topic_of: I64,
) -> Mask:
    """Whether each record's topic field is its expected one (True when skipped)."""
    if bool(skip.all()):
        return np.ones(starts.shape[0], dtype=bool)
    sys_flag = gather_be(arr, starts + SYS_FLAG_AT, 4)
    extra = np.where(sys_flag & int(SysFlag.BORNHOST_V6), _V6_EXTRA, 0) + np.where(
        sys_flag & int(SysFlag.STOREHOST_V6), _V6_EXTRA, 0
    )
    body_len_at = starts + BODY_LENGTH_AT_V4 + extra
    end = starts + sizes
    inside = ~skip & (body_len_at + 4 <= end)
    body_len = gather_be(arr, np.where(inside, body_len_at, 0), 4)
    v2 = gather_be(arr, starts + 4, 4) == MAGIC_CODE_V2
    width = np.where(v2, 2, 1)
    len_at = body_len_at + 4 + body_len
    inside &= (body_len >= 0) & (len_at + width <= end) & (len_at + 4 <= arr.shape[0])
    len_at = np.where(inside, len_at, 0)
    raw = gather_be(arr, len_at, 4)  # the length is the top 1 or 2 of these bytes
    topic_len = np.where(v2, (raw >> 16) & 0xFFFF, (raw >> 24) & 0xFF)
    want_len = topics.lengths[topic_of]
    topic_at = len_at + width
    inside &= (topic_len == want_len) & (topic_at + want_len <= end)
    ok: Mask = skip.copy()
    rows = np.flatnonzero(inside)
    if rows.size:
        width_max = int(want_len[rows].max())
        cols = np.arange(width_max, dtype=np.int64)
        idx = np.minimum(topic_at[rows, None] + cols, arr.shape[0] - 1)
        used = cols < want_len[rows, None]
        same = (arr[idx] == topics.matrix[topic_of[rows]][:, :width_max]) | ~used
        ok[rows] = same.all(axis=1)
    return ok
