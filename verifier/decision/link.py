"""One link's objects decided once, sans IO: ``missing_object``, ``size_mismatch``,
``digest_mismatch``, and which of the link's records and content are judged.

Both verifiers gather the same facts over their own I/O — whether each object the link
names is listed and at what size, how many bytes a read of the link's span returned,
the digest those bytes hash to — as an :class:`ObjectRead` per object, and drive
:func:`object_findings` and :func:`judged` with them:

* ``missing_object`` — the object is not listed, or a read of the span returned fewer
  bytes than the link says (it vanished after the listing);
* ``size_mismatch`` — the listed size differs from the size the link records (the
  object is not read);
* ``digest_mismatch`` — the span was read whole and hashes to another digest than the
  link's, or a compressed object's stored bytes hash to another CRC-32C than its
  ``stored_digest`` (its bytes are still judged: they are what cold would serve).

:func:`span_read` turns the bytes a job's read returned into that fact, the same for
both: a compressed object is read whole, its stored digest checked and decoded here (its
damage is the ``digest_mismatch`` a flipped byte in a plain object gives, also when the
flip decodes to the very same payload).

The one rule for what follows (``record_mismatch``, ``manifest_mismatch``,
``content_mismatch``): a link's records and content are judged only when **every**
object the run reads for it was read whole (:func:`judged`); a link one of whose
objects is missing, of the wrong size or cut short says only that. Its content is
compared with hot only where its units tile its commit log (:func:`content_judged`):
units that do not are a ``record_mismatch`` and point at no records to compare.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from tieredstore.cold.batch import decoded_batch
from tieredstore.cold.compressed.framed import STORED_DIGEST
from tieredstore.cold.compressed.frames import decode_whole
from tieredstore.cold.digests import DigestAlgorithm, digest
from tieredstore.errors import CorruptBatchError, CorruptFrameError
from tieredstore.findings import FindingKind
from tieredstore.verifier.decision.queue import QueueFinding

__all__ = [
    "ObjectRead",
    "content_judged",
    "judged",
    "object_findings",
    "reads_whole",
    "span_read",
]


@dataclass(frozen=True, slots=True)
class ObjectRead:
    """What one run found of one object a link names.

    ``listed``: its size in the listing (None: not listed). ``recorded``: the object's
    size the link records. ``read``: how many bytes a read of the link's span returned
    (None: not read, as an object of the wrong size is not). ``span``: the span's size.
    ``actual``/``expected``: the digest of the bytes read and the link's.
    ``stored_actual``/``stored_expected``: a compressed object's stored-bytes CRC-32C and
    the one its link records (None: plain, not read whole, or none recorded).
    """

    key: str
    listed: int | None
    recorded: int
    span: int
    read: int | None = None
    actual: str | None = None
    expected: str | None = None
    #: Who records the size and digest, for messages ("its manifest", "its batch index").
    says: str = "its manifest"
    stored_actual: str | None = None
    stored_expected: str | None = None

    @property
    def whole(self) -> bool:
        """Whether the link's span of this object was read whole."""
        return self.read is not None and self.read == self.span


def reads_whole(at: int, span: int, recorded: int, *, framed: bool) -> bool:
    """Whether a job reads the whole object rather than the span's range: a compressed
    object always (it is decoded whole), a plain one when the span is all of it."""
    return framed or (at == 0 and span == recorded)


def span_read(
    fact: ObjectRead,
    data: bytes,
    *,
    expected: str,
    framed: bool,
    stored_digest: str | None = None,
    at: int = 0,
    batch: bool = False,
) -> tuple[ObjectRead, bytes | None]:
    """``fact`` completed by a read of its span that returned ``data`` (``b""``: the
    object is gone; a compressed object: its stored bytes, read whole, decoded here), and
    the span's bytes when read whole. ``expected``: the digest the link records;
    ``stored_digest``: a compressed object's stored-bytes CRC-32C it records (None: none).

    A compressed object that does not decode is a span read whole whose digest is
    ``undecodable (...)``; one shorter than recorded is not decoded (it vanished after
    the listing, as a plain one cut short). A compressed object whose stored bytes do not
    match ``stored_digest`` is a ``digest_mismatch`` even when it decodes to the bytes
    recorded (a flip in bits zstd never reads). A compressed batch (``batch``: the span is
    bytes ``[at, at + span)`` of it, in uncompressed coordinates) is decoded as
    :func:`~tieredstore.cold.batch.decoded_batch` says: its stored data digest checked
    first, so a flipped byte that decodes to the same data is ``undecodable`` too."""
    if framed and len(data) == fact.recorded:
        if stored_digest is not None:
            actual_stored = digest(data, STORED_DIGEST)
            fact = dataclasses.replace(
                fact, stored_actual=actual_stored, stored_expected=stored_digest
            )
        try:
            if batch:
                data = decoded_batch(data, key=fact.key)[at : at + fact.span]
            else:
                data = decode_whole(data, where=fact.key)
        except (CorruptFrameError, CorruptBatchError) as exc:
            undecodable = f"undecodable ({exc.message})"  # says more than the stored digest
            return dataclasses.replace(
                fact, read=fact.span, actual=undecodable, expected=expected,
                stored_actual=None, stored_expected=None,
            ), None  # fmt: skip
    if len(data) != fact.span:
        return dataclasses.replace(fact, read=len(data)), None
    actual = digest(data, DigestAlgorithm.for_hex(expected))
    return dataclasses.replace(fact, read=fact.span, actual=actual, expected=expected), data


def object_findings(
    link: str, start: int, end: int, reads: Iterable[ObjectRead]
) -> Iterator[QueueFinding]:
    """The object-level findings of the link named ``link`` over ``[start, end)``. An
    object named twice (a slice's batch holds both its spans) is missing or of another
    size once; each span's digest is its own."""
    told: set[str] = set()
    for r in reads:
        if r.key in told and (r.listed is None or r.listed != r.recorded):
            continue
        told.add(r.key)
        if r.listed is None:
            yield QueueFinding(
                FindingKind.MISSING_OBJECT, start, end, r.key,
                f"object named by {link} does not exist",
            )  # fmt: skip
        elif r.listed != r.recorded:
            yield QueueFinding(
                FindingKind.SIZE_MISMATCH, start, end, r.key,
                f"object is {r.listed} bytes, {r.says} says {r.recorded}",
            )  # fmt: skip
        elif r.read is not None and not r.whole:
            yield QueueFinding(
                FindingKind.MISSING_OBJECT, start, end, r.key,
                f"object vanished after the listing (read {r.read} of {r.span} bytes)",
            )  # fmt: skip
        elif r.whole and r.stored_actual != r.stored_expected:
            yield QueueFinding(
                FindingKind.DIGEST_MISMATCH, start, end, r.key,
                f"stored digest is {r.stored_actual}, {r.says} says {r.stored_expected}",
            )  # fmt: skip
        elif r.whole and r.actual is not None and r.actual != r.expected:
            yield QueueFinding(
                FindingKind.DIGEST_MISMATCH, start, end, r.key,
                f"digest is {r.actual}, {r.says} says {r.expected}",
            )  # fmt: skip


def judged(reads: Iterable[ObjectRead]) -> bool:
    """Whether the link's records are judged: every object read for it was read whole
    (a digest that differs does not stop it)."""
    return all(r.whole for r in reads)


def content_judged(units_tile: bool) -> bool:
    """Whether a judged link's content is compared with hot: only where its units tile
    its commit log (otherwise they are a ``record_mismatch`` and nothing more)."""
    return units_tile
