"""Loss records: queue offsets the broker deleted before they were tiered, on record.

When the broker's retention deletes a queue's data before the sidecar tiered it, the
queue goes PAUSED and nothing is skipped silently. ``tieredstore resume --accept-loss``
then writes one :class:`LossRecord` into the cold store itself, beside the manifests
(``<queue root>/LOSS/<name(start)>.json``, :func:`~tieredstore.cold.layout.loss_key`), and
tiering continues after it. The record says which offsets ``[start, end)`` were lost,
when the loss was accepted, by which writer and under which lease epoch. It is part of
the cold store's history: GC never deletes it, a catalogue rebuilt from the bucket adopts
it, the verifier reports it (``lost_before_tiering``) and the reader names it when a read
falls into it.

The encoding is canonical JSON (sorted keys, no whitespace), parsed strictly: unknown,
missing or duplicate fields, wrong types and violated invariants raise
:class:`~tieredstore.errors.CorruptLossRecordError` naming the object.

Writing is create-if-absent: :func:`write_loss_record` never replaces a different record
already at the key (the same record again is a no-op, so an interrupted ``resume`` can
simply be run again). It is the backend's atomic create (S3 ``If-None-Match: *``, POSIX
``link()``), done under the writer lease, which the caller must hold.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final, get_type_hints

from tieredstore.canonical_json import canonical, parse_object
from tieredstore.cold.layout import (
    MAX_OFFSET,
    QueuePath,
    QueueRecord,
    loss_key,
    loss_prefix,
    parse_loss_key,
)
from tieredstore.errors import (
    ConditionFailedError,
    CorruptLossRecordError,
    InvalidNameError,
    ObjectNotFoundError,
)

if TYPE_CHECKING:  # the backends package imports every backend (s3fs, aiohttp: 0.2 s);
    # readers of loss records (the verifier's driver and tasks) need none of them
    from tieredstore.backends.base import Backend

__all__ = [
    "LOSS_FORMAT_VERSION",
    "LossRecord",
    "list_loss_records",
    "read_loss_record",
    "write_loss_record",
]

LOSS_FORMAT_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class LossRecord(QueueRecord):
    """Queue offsets ``[start_offset, end_offset)`` of one queue were lost before tiering.

    Invariants (checked on construction; :class:`CorruptLossRecordError` otherwise):
    valid names, ``0 <= start < end``, ``accepted_at_ms >= 0``, a non-empty writer id,
    ``lease_epoch >= 1``.
    """

    start_offset: int
    end_offset: int
    accepted_at_ms: int
    writer_id: str
    lease_epoch: int

    def __post_init__(self) -> None:
        if problem := self._problem():
            where = f"loss record of {self.topic}/{self.queue_id} at offset {self.start_offset}"
            raise CorruptLossRecordError(problem, where=where)

    def _problem(self) -> str:
        if self.format_version != LOSS_FORMAT_VERSION:
            return (
                f"unsupported format_version {self.format_version} "
                f"(this tieredstore reads {LOSS_FORMAT_VERSION})"
            )
        return (
            QueuePath.problem(self.cluster, self.broker, self.topic, self.queue_id)
            or self._span_problem()
        )

    def _span_problem(self) -> str:
        if not 0 <= self.start_offset < self.end_offset <= MAX_OFFSET:
            return f"offsets [{self.start_offset}, {self.end_offset}) are not a non-empty range"
        if self.accepted_at_ms < 0:
            return f"accepted_at_ms {self.accepted_at_ms} < 0"
        if not self.writer_id:
            return "writer_id is empty"
        if self.lease_epoch < 1:
            return f"lease_epoch {self.lease_epoch} < 1 (epochs start at 1)"
        return ""

    @classmethod
    def new(
        cls,
        queue: QueuePath,
        start: int,
        end: int,
        *,
        accepted_at_ms: int,
        writer_id: str,
        lease_epoch: int,
    ) -> LossRecord:
        """A record of the current format for ``queue``."""
        return cls(
            LOSS_FORMAT_VERSION, queue.cluster, queue.broker, queue.topic, queue.queue_id,
            start, end, accepted_at_ms, writer_id, lease_epoch,
        )  # fmt: skip

    @property
    def count(self) -> int:
        """How many messages were lost."""
        return self.end_offset - self.start_offset

    @property
    def key(self) -> str:
        """The record's own object key."""
        return loss_key(self.queue, self.start_offset)

    def describe(self) -> str:
        return (
            f"queue offsets [{self.start_offset}, {self.end_offset}) of "
            f"{self.topic}/{self.queue_id} ({self.count} messages) were deleted by the broker "
            f"before they were tiered; loss accepted at {self.accepted_at_ms} ms by writer "
            f"{self.writer_id} (lease epoch {self.lease_epoch})"
        )

    def to_json(self) -> bytes:
        """Canonical JSON: sorted keys, no whitespace, ASCII. ``from_json`` inverts it."""
        return canonical(asdict(self))

    @classmethod
    def from_json(cls, data: bytes, *, where: str) -> LossRecord:
        """Parse and fully validate loss-record JSON; ``where`` names the object."""
        fields = parse_object(data, error=CorruptLossRecordError, what="loss record", where=where)
        values: dict[str, Any] = {name: fields.scalar(name, typ) for name, typ in _FIELDS.items()}
        fields.no_extra()
        try:
            return cls(**values)
        except CorruptLossRecordError as exc:
            raise CorruptLossRecordError(exc.message, where=where) from exc


#: Each field of a loss record and its type (all scalars), as the JSON holds them.
_FIELDS: Final[dict[str, type]] = get_type_hints(LossRecord)


def read_loss_record(data: bytes, key: str) -> LossRecord:
    """Parse the loss record stored at ``key`` and check it describes that very key.

    Raises:
        CorruptLossRecordError: invalid JSON or fields, a key that is not a loss-record
            key, or a record whose queue or start offset differs from what its key says.
    """
    try:
        parse_loss_key(key)
    except InvalidNameError as exc:
        raise CorruptLossRecordError(f"not a loss-record key: {exc.message}", where=key) from exc
    record = LossRecord.from_json(data, where=key)
    if record.key != key:
        raise CorruptLossRecordError(
            f"loss record describes {record.key}, not the key it is stored at", where=key
        )
    return record


async def list_loss_records(backend: Backend, queue: QueuePath) -> list[LossRecord]:
    """The queue's loss records, sorted by start offset.

    Raises CorruptLossRecordError for one that does not parse (its loss is then not
    acknowledged, so nothing may treat it as such), and whatever the backend raises.
    """
    out: list[LossRecord] = []
    for info in await backend.list(loss_prefix(queue) + "/"):
        try:
            data = await backend.read(info.key)
        except ObjectNotFoundError:
            continue  # moved away (repair) since the listing
        out.append(read_loss_record(data, info.key))
    out.sort(key=lambda r: r.start_offset)
    return out


async def write_loss_record(backend: Backend, record: LossRecord) -> LossRecord:
    """Store ``record`` unless a record is already at its key; return the stored one.

    Create-if-absent (:meth:`Backend.create`, atomic on every backend that fences): the
    same record already stored (an interrupted run repeated) or another record at the
    same start (written by an earlier attempt, maybe with an older end) is returned as
    it is and never replaced; the caller decides what a different one means. The caller
    holds the writer lease.
    """
    key = record.key
    try:
        await backend.create(key, record.to_json())
    except ConditionFailedError:
        return read_loss_record(await backend.read(key), key)
    return record
