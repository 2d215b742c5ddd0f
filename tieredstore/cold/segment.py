"""Cold segments: what a COMMIT_LOG / CONSUME_QUEUE object pair is, and its verification.

A *segment* covers the queue offsets ``[start, end)`` of one queue (never empty). Its
three objects (names from :mod:`tieredstore.cold.layout`):

* **COMMIT_LOG** at cold commitlog offset ``cl_base``: the hot records in queue-offset
  order, concatenated, each byte-identical to the hot record except bytes [28, 36)
  (physicalOffset), rewritten to the record's cold offset ``cl_base + position``.
* **CONSUME_QUEUE** at ``start * 20``: one 20-byte big-endian unit per offset
  (cold commitlog offset i64, size i32, tagsCode i64); size and tagsCode are the hot ones.
* **MANIFEST** at ``start``: the commit point (:mod:`tieredstore.cold.manifest`). Objects
  without a manifest are uncommitted and never read.

So ``cl_end - cl_base`` is the COMMIT_LOG size, the CONSUME_QUEUE is ``20 * count``
bytes, and the next segment of the queue starts at ``(end, cl_end)``.

The sidecar builds segments in :mod:`tieredstore.dispatcher.tiering.commitlog_pass` (the records,
gathered in commitlog order) and :mod:`tieredstore.dispatcher.tiering.cold_writer` (the units and
the manifest); the test oracle they are compared with is :mod:`tests.support.stores.oracle`.

:class:`RecordHeads` is the one record-head check (magic, totalSize, queueOffset, and for
cold records physicalOffset) that building and verifying share; :class:`RecordOwners`
adds, for hot records, whose record it is (topic, queueId, physicalOffset). Verification never
trusts the manifest alone: :func:`verify_objects` checks sizes and digests;
:func:`verify_segment` also checks every CQ unit against the record it points at. Both
take a segment's manifest or any link of the committed history
(:class:`~tieredstore.cold.history.Committed`: a segment, or a batch slice whose bytes
are ranges of its batch object) and check exactly the bytes of its spans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

from tieredstore.cold.compressed.framed import read_whole
from tieredstore.cold.digests import digest
from tieredstore.cold.history import Committed, EntryKind, Span, as_link
from tieredstore.cold.manifest import Manifest, read_manifest
from tieredstore.errors import (
    CorruptRecordError,
    CorruptUnitError,
    DigestMismatchError,
    SizeMismatchError,
)
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE, Units, decode_units
from tieredstore.formats.record import (
    BODY_LENGTH_AT_V4,
    HEAD_DTYPE,
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    MAGIC_AT,
    MAGIC_CODE_V1,
    MAGIC_CODE_V2,
    PHYSICAL_OFFSET_AT,
    QUEUE_OFFSET_AT,
    SYS_FLAG_AT,
    TOTAL_SIZE_AT,
    SysFlag,
)
from tieredstore.formats.vector import gather_be, values_at

if TYPE_CHECKING:  # the backends package pulls in s3fs; the codec must stay light
    from tieredstore.backends.base import Backend

__all__ = [
    "MIN_RECORD_SIZE",
    "RecordHeads",
    "RecordOwners",
    "Segment",
    "TopicTable",
    "check_record_heads",
    "parse_cq_object",
    "read_segment",
    "span_fault",
    "verify_objects",
    "verify_record_pointers",
    "verify_segment",
]

#: Fixed part of a v1 IPv4 record (docs/format.md); no real record is smaller.
MIN_RECORD_SIZE: Final = 91

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


def _at(where: str, key: str, pos: int | None = None) -> str:
    """Name an object (``where`` is an optional location prefix, e.g. the backend URL)."""
    full = f"{where.rstrip('/')}/{key}" if where else key
    return full if pos is None else f"{full}@{pos}"


@dataclass(frozen=True, slots=True)
class Segment:
    """A sealed segment: its manifest and the exact bytes of its two data objects.

    Commit order: write ``commit_log`` to ``manifest.commit_log_key``, then
    ``consume_queue`` to ``manifest.consume_queue_key``, then ``manifest.to_json()`` to
    ``manifest.key`` (create-if-absent), then advance the catalogue.
    """

    manifest: Manifest
    commit_log: bytes
    consume_queue: bytes


@dataclass(frozen=True, slots=True)
class RecordHeads:
    """The one record-head check: each record in a buffer against its CQ unit (vectorised).

    Record ``i`` starts at ``starts[i]`` in the buffer; its unit says ``sizes[i]`` bytes,
    it has queue offset ``queue_offsets[i]`` and, for a cold record (``cold`` given), cold
    commitlog offset ``cold[i]``. It is bad when the size is below
    :data:`MIN_RECORD_SIZE` (its head is then not read), its magic code is unknown, or its
    totalSize, queueOffset or (cold) physicalOffset field disagrees. Used by the
    commitlog pass (hot records), the restore stream and segment verification (cold
    records), and the test oracle.
    """

    sizes: I64
    magic: I64
    fields: tuple[tuple[str, I64, I64], ...]  # (field, found, expected)
    bad: Mask

    @classmethod
    def check(
        cls,
        arr: npt.NDArray[np.uint8],
        starts: I64,
        sizes: I64,
        queue_offsets: I64,
        cold: I64 | None = None,
    ) -> RecordHeads:
        short = sizes < MIN_RECORD_SIZE
        safe = np.where(short, 0, starts)  # never read past a too-short record's bytes
        magic = gather_be(arr, safe + MAGIC_AT, 4)
        fields = [
            ("totalSize", gather_be(arr, safe + TOTAL_SIZE_AT, 4), sizes),
            ("queueOffset", gather_be(arr, safe + QUEUE_OFFSET_AT, 8), queue_offsets),
        ]
        if cold is not None:
            fields.append(("physicalOffset", gather_be(arr, safe + PHYSICAL_OFFSET_AT, 8), cold))
        bad = short | ((magic != MAGIC_CODE_V1) & (magic != MAGIC_CODE_V2))
        for _field, found, expected in fields:
            bad |= found != expected
        return cls(sizes, magic, tuple(fields), bad)

    def first_bad(self) -> int | None:
        """The index of the first bad record, or None when every one is good."""
        bad = np.flatnonzero(self.bad)
        return int(bad[0]) if bad.size else None

    def fault(self, i: int) -> str:
        """What is wrong with record ``i`` (the first check it fails)."""
        size, magic = int(self.sizes[i]), int(self.magic[i])
        if size < MIN_RECORD_SIZE:
            return f"CQ unit says {size} bytes (minimum {MIN_RECORD_SIZE})"
        if magic not in (MAGIC_CODE_V1, MAGIC_CODE_V2):
            return f"bad magic code 0x{magic & 0xFFFFFFFF:08X}"
        for field, found, expected in self.fields:
            if found[i] != expected[i]:
                return f"{field} field {int(found[i])}, expected {int(expected[i])}"
        raise ValueError(f"record {i} has a good head")


# -- record owners -------------------------------------------------------------------

_QUEUE_ID_AT: Final = int(HEAD_DTYPE.fields["queue_id"][1])  # type: ignore[index]
_V6_EXTRA: Final = HOST_V6_SIZE - HOST_V4_SIZE


@dataclass(frozen=True, slots=True)
class TopicTable:
    """Topic names as big-endian 8-byte words, built once per pass so that each window
    compares its records' topics with a few integer gathers per distinct name length.

    A name of length ``n >= 8`` is the words at ``0, 8, 16, ...`` below ``n - 7`` and,
    unless ``n`` is a multiple of 8, the word ending at ``n`` (it overlaps the one
    before: every byte is compared, none past the name). A shorter name is the word
    *ending* at ``n`` with its low ``n`` bytes kept (the bytes before a topic are the
    record's own: the topic length and the body's end).
    """

    names: tuple[bytes, ...]
    lengths: I64
    words: dict[int, npt.NDArray[np.uint64]]  # per length: (names, words) of the names

    @classmethod
    def of(cls, topics: Sequence[str]) -> TopicTable:
        names = tuple(t.encode() for t in topics)
        words = {
            n: np.array(
                [[_word(name, at, n) for at in word_starts(n)] for name in names], np.uint64
            ).reshape(len(names), len(word_starts(n)))
            for n in {len(name) for name in names}
        }
        return cls(names, np.array([len(t) for t in names], dtype=np.int64), words)


def word_starts(n: int) -> list[int]:
    """Where the 8-byte words of a name of length ``n`` start (:class:`TopicTable`)."""
    if n < 8:
        return [n - 8]
    return [*range(0, n - 7, 8), *([n - 8] if n % 8 else [])]


def _low_mask(n: int) -> int:
    return (1 << (8 * n)) - 1 if n < 8 else (1 << 64) - 1


def _word(name: bytes, at: int, n: int) -> int:
    """The word of ``name`` at ``at`` as a name of length ``n`` (0 if it is not one)."""
    if len(name) != n:
        return 0
    if at < 0:
        return int.from_bytes(name, "big")
    return int.from_bytes(name[at : at + 8], "big")


@dataclass(frozen=True, slots=True)
class RecordOwners:
    """Whose record a consume-queue unit points at, for many **hot** records at once.

    :class:`RecordHeads` proves a record has the size and queue offset its unit says.
    That is not enough: a unit of queue ``T/0`` pointing at a record of topic ``U`` with
    the same queue offset and size passes it, and a segment built from it has a consume
    queue and a commit log that disagree. Here, besides:

    * ``queueId`` (bytes [12, 16)) must be the unit's queue id;
    * ``physicalOffset`` (bytes [28, 36)) must be the hot commitlog offset the unit
      points at (the broker writes each record's own position there);
    * the topic (after the body: a 1-byte length for magic v1, 2 bytes for v2, then the
      name) must be the unit's, byte for byte, and lie inside the record.

    Where the topic sits depends on the host kinds (sysFlag BORNHOST_V6, STOREHOST_V6)
    and the body length: computed per record with numpy, never a Python step per
    record. E.g. v1 with IPv4 hosts: bodyLength at 84, so a 10-byte body puts the topic
    length at 98 and the topic at 99. ``bad`` marks the records that disagree; records
    :class:`RecordHeads` found bad are skipped (their fields may point anywhere).
    """

    bad: Mask
    fields: tuple[tuple[str, I64, I64], ...]  # (field, found, expected) of the int fields
    topic_ok: Mask
    topics: TopicTable
    topic_of: I64  # row of each record's expected topic in ``topics``

    @classmethod
    def check(
        cls,
        arr: npt.NDArray[np.uint8],
        *,
        skip: Mask,
        starts: I64,
        sizes: I64,
        queue_ids: I64,
        physical: I64,
        topics: TopicTable,
        topic_of: I64,
    ) -> RecordOwners:
        """Check the records starting at ``starts`` in ``arr`` (``sizes`` bytes each,
        the units' sizes, already proven by :class:`RecordHeads` unless ``skip``).
        Every array is passed by name: they share one type and one length, so a swap
        would type-check.

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
        return cls(bad, fields, topic_ok, topics, topic_of)

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
    v2 = gather_be(arr, starts + MAGIC_AT, 4) == MAGIC_CODE_V2
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
        expected = topics.words[length][topic_of[at]]
        same = np.ones(at.shape[0], dtype=bool)
        for k, start in enumerate(word_starts(length)):
            found = values_at(arr, topic_at[at] + start, ">u8").astype(np.uint64)
            same &= (found & np.uint64(_low_mask(length))) == expected[:, k]
        ok[at] = same
    return ok


# -- verification ---------------------------------------------------------------------


def verify_objects(
    link: Committed | Manifest,
    commit_log: bytes | bytearray | memoryview,
    consume_queue: bytes | bytearray | memoryview,
    *,
    where: str,
) -> None:
    """Check both spans' sizes, then digests, against ``link`` (a manifest: its two
    whole objects). ``commit_log`` and ``consume_queue`` are the bytes of its spans.

    ``where`` (e.g. the backend URL) is put before object keys in error messages.

    Raises:
        SizeMismatchError / DigestMismatchError: naming the object (``key@at`` for a span
            inside a larger object).
    """
    m = as_link(link)
    algorithm = m.algorithm
    for span, data in ((m.commit_log, commit_log), (m.consume_queue, consume_queue)):
        if len(data) != span.size:
            message, at = span_fault(m, span, f"is {len(data)} bytes", span.size, where=where)
            raise SizeMismatchError(message, where=at)
        actual = digest(data, algorithm)
        if actual != span.digest:
            message, at = span_fault(m, span, f"{algorithm} is {actual}", span.digest, where=where)
            raise DigestMismatchError(message, where=at)


def span_fault(
    link: Committed, span: Span, found: str, recorded: object, *, where: str = ""
) -> tuple[str, str]:
    """The message and location of a span whose bytes are not what ``link``'s commit
    point records (``found``, e.g. ``"crc32c is 0a1b2c3d"``; ``recorded``, its value).

    A whole object is named as one ("object ..., its manifest says ..." at its key); a
    span inside a larger object by its byte range, at ``key@at``.
    """
    says = "its manifest says" if link.kind is EntryKind.SEGMENT else "its batch says"
    if span.whole:
        return f"object {found}, {says} {recorded}", _at(where, span.key)
    return (
        f"bytes [{span.at}, {span.end}) {found}, {says} {recorded}",
        _at(where, span.key, span.at),
    )


def parse_cq_object(data: bytes | bytearray | memoryview, *, where: str) -> Units:
    """View a CONSUME_QUEUE object as units (zero-copy; read-only for ``bytes``).

    Raises TruncatedDataError (a CorruptDataError) when its length is not a multiple of
    20, naming ``where`` and the byte offset of the partial unit.
    """
    return decode_units(data, where=where)


def verify_record_pointers(
    link: Committed | Manifest,
    units: Units,
    commit_log: bytes | bytearray | memoryview,
    *,
    where: str = "",
) -> None:
    """Check every CQ unit against the COMMIT_LOG record it points at (vectorised).

    Unit ``i`` (queue offset ``start + i``) must point at ``cl_base`` plus the sizes of
    the units before it (records are contiguous, none missing or overlapping), the sizes
    must add up to the COMMIT_LOG size, and the record there must have totalSize ==
    the unit's size, a known magic, queueOffset field == ``start + i`` and
    physicalOffset field == its cold offset.

    Raises:
        CorruptUnitError: a unit that points wrong (named by CQ key and byte offset).
        CorruptRecordError: a record that disagrees with its unit (CL key and offset).
    """
    manifest = as_link(link)
    cq_key = manifest.consume_queue_key
    n = len(units)
    if n != manifest.message_count:
        raise CorruptUnitError(
            f"{n} units, manifest says {manifest.message_count}", where=_at(where, cq_key)
        )
    sizes: I64 = units["size"].astype(np.int64)
    cold: I64 = units["commitlog_offset"].astype(np.int64)
    rel = _check_units_contiguous(manifest, sizes, cold, len(commit_log), where)
    arr = np.frombuffer(commit_log, dtype=np.uint8)
    check_record_heads(manifest, manifest.start_offset, arr, rel, sizes, cold, where)


def _check_units_contiguous(
    manifest: Committed, sizes: I64, cold: I64, cl_size: int, where: str
) -> I64:
    """Each unit's offset inside the COMMIT_LOG object; CorruptUnitError unless they are
    back to back from ``cl_base`` and cover the object exactly."""
    cq_key = manifest.consume_queue_key
    rel: I64 = np.concatenate((np.zeros(1, np.int64), np.cumsum(sizes)[:-1]))
    bad = np.flatnonzero((sizes < MIN_RECORD_SIZE) | (cold != manifest.cl_base + rel))
    if bad.size:
        i = int(bad[0])
        raise CorruptUnitError(
            f"unit of queue offset {manifest.start_offset + i} points at cold offset "
            f"{int(cold[i])} size {int(sizes[i])}; contiguous records need offset "
            f"{manifest.cl_base + int(rel[i])} and size >= {MIN_RECORD_SIZE}",
            where=_at(where, cq_key, manifest.consume_queue.at + i * CQ_UNIT_SIZE),
        )
    total = int(sizes.sum())
    if total != cl_size:
        raise CorruptUnitError(
            f"units cover {total} bytes, the commit-log object has {cl_size}",
            where=_at(where, cq_key),
        )
    return rel


def check_record_heads(
    link: Committed | Manifest,
    first: int,
    arr: npt.NDArray[np.uint8],
    starts: I64,
    sizes: I64,
    cold: I64,
    where: str = "",
) -> None:
    """CorruptRecordError unless every record agrees with its unit (:class:`RecordHeads`):
    the records of queue offsets ``first``, ``first + 1``, ... start at ``starts`` in
    ``arr``, and their units say ``sizes`` and cold offsets ``cold``. Errors name
    ``object@offset`` within the COMMIT_LOG object (``where``: an optional location
    prefix; the offset is in the object, so it counts from the span's start)."""
    manifest = as_link(link)
    offsets = first + np.arange(len(starts), dtype=np.int64)
    heads = RecordHeads.check(arr, starts, sizes, offsets, cold)
    i = heads.first_bad()
    if i is not None:
        raise CorruptRecordError(
            f"record of queue offset {first + i}: {heads.fault(i)}",
            where=_at(
                where,
                manifest.commit_log_key,
                manifest.commit_log.at + int(cold[i]) - manifest.cl_base,
            ),
        )


def verify_segment(
    link: Committed | Manifest,
    commit_log: bytes | bytearray | memoryview,
    consume_queue: bytes | bytearray | memoryview,
    *,
    where: str = "",
) -> Units:
    """Fully check a link's bytes (a segment's objects, or a slice's spans) against its
    commit point and each other.

    Runs :func:`verify_objects`, :func:`parse_cq_object` and
    :func:`verify_record_pointers`; returns the CQ units on success.
    """
    verify_objects(link, commit_log, consume_queue, where=where)
    units = parse_cq_object(consume_queue, where=_at(where, link.consume_queue_key))
    verify_record_pointers(link, units, commit_log, where=where)
    return units


async def read_segment(backend: Backend, manifest_key: str) -> Segment:
    """Read the committed segment whose manifest is ``manifest_key``, fully verified.

    Raises:
        ObjectNotFoundError: the manifest or one of its objects is missing (the
            backend names the key).
        CorruptManifestError: the manifest does not validate or is misplaced.
        SizeMismatchError / DigestMismatchError / CorruptDataError: the objects do not
            match the manifest or each other (see :func:`verify_segment`).
    """
    manifest = read_manifest(await backend.read(manifest_key), manifest_key)
    commit_log = await read_whole(backend, manifest.commit_log_key, manifest.commit_log.framed)
    consume_queue = await backend.read(manifest.consume_queue_key)
    verify_segment(manifest, commit_log, consume_queue, where=backend.url)
    return Segment(manifest, commit_log, consume_queue)
