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
    SysFlag,
)
from tieredstore.formats.vector import gather_be, values_at

__all__ = ["RecordOwners", "TopicTable"]

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

_QUEUE_ID_AT: Final = int(HEAD_DTYPE.fields["queue_id"][1])  # type: ignore[index]
_V6_EXTRA: Final = HOST_V6_SIZE - HOST_V4_SIZE


@dataclass(frozen=True, slots=True)
class TopicTable:
    """Topic names as fixed-width raw items, one array per distinct name length, built
    once per pass so that each window compares its records' topics with one numpy
    expression per distinct length."""

    names: tuple[bytes, ...]
    lengths: I64
    by_length: dict[int, npt.NDArray[np.void]]  # every name cut or padded to a length

    @classmethod
    def of(cls, topics: Sequence[str]) -> TopicTable:
        names = tuple(t.encode() for t in topics)
        by_length = {
            n: np.array([name[:n].ljust(n, b"\0") for name in names], dtype=np.dtype((np.void, n)))
            for n in {len(name) for name in names}
        }
        return cls(names, np.array([len(t) for t in names], dtype=np.int64), by_length)

    def names_of_length(self, length: int) -> npt.NDArray[np.void]:
        """Each name as ``length`` raw bytes (names of that length are whole)."""
        return self.by_length[length]


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
        head = values_at(arr, safe, HEAD_DTYPE)  # one gather for the fixed fields
        fields = (
            ("queueId", head["queue_id"].astype(np.int64), queue_ids),
            ("physicalOffset", head["physical_offset"].astype(np.int64), physical),
        )
        topic_ok = _topics_match(arr, safe, sizes, skip, head, topics, topic_of)
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
    head: npt.NDArray[np.void],
    topics: TopicTable,
    topic_of: I64,
) -> Mask:
    """Whether each record's topic field is its expected one (True when skipped);
    ``head``: the records' fixed heads (:data:`HEAD_DTYPE`)."""
    if bool(skip.all()):
        return np.ones(starts.shape[0], dtype=bool)
    sys_flag = head["sys_flag"].astype(np.int64)
    extra = np.where(sys_flag & int(SysFlag.BORNHOST_V6), _V6_EXTRA, 0) + np.where(
        sys_flag & int(SysFlag.STOREHOST_V6), _V6_EXTRA, 0
    )
    body_len_at = starts + BODY_LENGTH_AT_V4 + extra
    end = starts + sizes
    inside = ~skip & (body_len_at + 4 <= end)
    body_len = gather_be(arr, np.where(inside, body_len_at, 0), 4)
    v2 = head["magic"] == MAGIC_CODE_V2
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
    lengths = want_len[rows]
    for length in np.unique(lengths).tolist():  # a step per distinct topic length
        at = rows[lengths == length]
        kind = np.dtype((np.void, length))
        found = values_at(arr, topic_at[at], kind)
        ok[at] = found == topics.names_of_length(length)[topic_of[at]]
    return ok
