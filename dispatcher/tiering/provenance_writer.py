"""The sidecar's side of the provenance records (:mod:`tieredstore.cold.provenance`).

* :meth:`ProvenanceWriter.publish_rules` — the broker's tiering record, current with
  the topic filter and the init policy: on start and after every reload that changes
  either (compare-and-swap; a no-op when unchanged). A record created while the
  catalogue already holds tiered queues (an older sidecar's store, or the record
  deleted) starts with the policy unknown.
* :meth:`ProvenanceWriter.ensure_inits` — an init record for every ACTIVE queue before
  it is tiered, so before its first manifest: the records of the queues one call
  settles go into one object (:class:`~tieredstore.cold.provenance.InitRecords`, up to
  :data:`INITS_PER_OBJECT` each; its key names its content, so a repeat is a no-op),
  their hot ranges read in one thread hop. A crash before that object is written
  leaves the queues without one: the next process writes it (it lists which queues
  have one, old per-queue objects too, before its first tick). A queue this process
  has not seen a record for gets one when hot still proves its start (hot min ≤ the
  catalogue's init offset, and retention has not removed its head): with the policy in
  force when nothing of it is tiered yet, else as ``adopted`` (a store an older sidecar
  wrote). Where hot no longer proves it, none is invented (the verifier says
  ``unproven_start``).
* :meth:`ProvenanceWriter.record_stops` — a stop record for every catalogue queue
  whose topic the current rules exclude after an earlier entry tiered it: where its
  tiering stopped (its cold commit), for that exclusion (its ``since_ms``), created
  once (create-if-absent) on the first tick after the rules were published — on start
  too, so a store excluded by an older sidecar gets its records. A segment still in
  flight may commit past it: cold then holds more than required, never less.
* :func:`record_head_removal` — the retention record, created before retention deletes
  a head segment's manifest, so a crash in between never leaves a head nothing explains.

Every write checks the lease first (:meth:`~tieredstore.dispatcher.lease.lease.Lease.check`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Final

from tieredstore.backends.base import Backend
from tieredstore.cold.layout import (
    QueuePath,
    QueueRecordKind,
    broker_prefix,
    parse_inits_key,
    parse_queue_record_key,
    queue_records_prefix,
)
from tieredstore.cold.provenance import (
    PROVENANCE_FORMAT_VERSION,
    InitRecords,
    QueueInit,
    RetentionMark,
    StopMark,
    TieringRecord,
    create_init_records,
    create_record,
    publish_tiering_rules,
    read_init_records,
)
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.dispatcher.tiering.cold_writer import ColdWriter
from tieredstore.dispatcher.topic_filter import TopicFilter
from tieredstore.errors import CorruptProvenanceError, InvalidNameError, StoreError
from tieredstore.hot.store import HotRange, HotStore, QueueKey
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueRow, QueueState, SegmentRow
from tieredstore.settings.loader import TieringSettings
from tieredstore.topic_rules import TopicRules

__all__ = ["INITS_PER_OBJECT", "ProvenanceWriter", "record_head_removal"]

#: Init records per object at most (about 100 bytes each): a discovery of more queues
#: writes several objects.
INITS_PER_OBJECT: Final = 10_000

log = logging.getLogger(__name__)


class ProvenanceWriter:
    """Keeps one broker's tiering record and init records (module docstring)."""

    def __init__(
        self,
        backend: Backend,
        lease: Lease,
        hot: HotStore,
        *,
        cluster: str,
        broker: str,
        catalogue: Catalogue | None = None,
    ) -> None:
        self.backend, self.lease, self.hot = backend, lease, hot
        self.cluster, self.broker = cluster, broker
        self.catalogue = catalogue  # the queues stop records are due for (None: none)
        self._rules: tuple[TopicRules, str] | None = None  # as last published here
        self._settled: set[QueueKey] | None = None  # queues with an init record (or none due)
        self._record: TieringRecord | None = None  # stop records not yet written for it

    @classmethod
    def for_writer(
        cls,
        backend: Backend,
        lease: Lease,
        hot: HotStore,
        writer: ColdWriter,
        catalogue: Catalogue | None = None,
    ) -> ProvenanceWriter:
        """The records of the broker ``writer`` writes segments of."""
        return cls(backend, lease, hot, cluster=writer.cluster, broker=writer.broker,
                   catalogue=catalogue)  # fmt: skip

    async def before_tiering(
        self,
        rows: list[QueueRow],
        tiering: TieringSettings,
        ranges: Mapping[QueueKey, HotRange] | None = None,
    ) -> None:
        """What must be in cold, in cold, before any of it is: the rules (after a reload
        too), where tiering stopped for the queues they exclude now, and each of
        ``rows``' init record, ahead of its first manifest (``ranges``: as
        :meth:`ensure_inits`)."""
        await self.publish_rules(TopicFilter.of(tiering).rules(), str(tiering.init_policy))
        await self.record_stops()
        await self.ensure_inits(rows, str(tiering.init_policy), ranges)

    async def publish_rules(self, rules: TopicRules, init_policy: str) -> None:
        """Make ``rules`` and ``init_policy`` the tiering record's current rules and
        policy (once per change)."""
        if (rules, init_policy) == self._rules:
            return
        self.lease.check()
        self._record = await publish_tiering_rules(
            self.backend, self.cluster, self.broker, rules,
            now_ms=self.lease.clock.now_ms(), writer_id=self.lease.owner,
            lease_epoch=self.lease.epoch, init_policy=init_policy,
            tiered_before=self._tiered_before(),
        )  # fmt: skip
        self._rules = (rules, init_policy)

    def _tiered_before(self) -> bool:
        """Whether the catalogue holds a queue tiered past its init offset (a record
        created now cannot say which policy initialised it)."""
        if self.catalogue is None:
            return False
        return any(row.cold_commit > row.init_offset for row in self.catalogue.queues.all())

    async def record_stops(self) -> None:
        """A stop record for each catalogue queue the published rules stopped tiering
        (module docstring); once per publication."""
        record, self._record = self._record, None
        if record is None or self.catalogue is None:
            return
        now = self.lease.clock.now_ms()
        for row in self.catalogue.queues.all():
            since = record.excluded_since(row.topic)
            if since is None or row.state is QueueState.DELETED:
                continue
            self.lease.check()
            await create_record(
                self.backend,
                StopMark.new(
                    QueuePath(self.cluster, self.broker, row.topic, row.queue_id),
                    excluded_since_ms=since, stop_offset=row.cold_commit,
                    stopped_at_ms=max(now, since), writer_id=self.lease.owner,
                    lease_epoch=self.lease.epoch,
                ),
            )  # fmt: skip

    async def _known(self) -> set[QueueKey]:
        """The queues whose init record is in cold (listed once per process): per-queue
        objects by their keys, objects of many by their content. One that does not read
        settles nothing (its queues get a new record; the verifier reports the object)."""
        if self._settled is None:
            prefix = broker_prefix(self.cluster, self.broker) + "/"
            records = queue_records_prefix(self.cluster, self.broker) + "/"
            found: set[QueueKey] = set()
            for info in await self.backend.list(records):
                found |= await self._settles(info.key, prefix)
            self._settled = found
        return self._settled

    async def _settles(self, key: str, prefix: str) -> set[QueueKey]:
        """The queues the listed ``key`` holds an init record of."""
        try:
            if parse_inits_key(key, prefix) is not None:
                many = read_init_records(await self.backend.read(key), key)
                return {QueueKey(r.topic, r.queue_id) for r in many.inits}
            parsed = parse_queue_record_key(key, prefix)
        except (InvalidNameError, CorruptProvenanceError) as exc:
            log.warning("%s: not read as init records (%s)", key, exc)
            return set()
        if parsed is not None and parsed.kind is QueueRecordKind.INIT:
            return {QueueKey(parsed.queue.topic, parsed.queue.queue_id)}
        return set()

    async def ensure_inits(
        self,
        rows: list[QueueRow],
        policy: str,
        ranges: Mapping[QueueKey, HotRange] | None = None,
    ) -> None:
        """An init record for each of ``rows`` this process has not settled yet, all of
        them in one object (module docstring). ``ranges``: hot ranges already read (by
        discovery, which chose the new queues' init offsets in them); the other rows'
        are read here, in one thread hop."""
        known = await self._known()
        due = [row for row in rows if _key(row) not in known]
        if not due:
            return
        known_ranges: dict[QueueKey, HotRange | None] = dict(ranges or {})
        unread = [row for row in due if _key(row) not in known_ranges]
        if unread:
            found = await asyncio.to_thread(self._hot_ranges, unread)
            known_ranges.update(zip(map(_key, unread), found, strict=True))
        ranges_of = [known_ranges[_key(row)] for row in due]
        now = self.lease.clock.now_ms()
        inits = [
            rec
            for row, rng in zip(due, ranges_of, strict=True)
            if (rec := self._init_for(row, rng, policy, now)) is not None
        ]
        for at in range(0, len(inits), INITS_PER_OBJECT):
            self.lease.check()
            await create_init_records(
                self.backend, InitRecords.of(inits[at : at + INITS_PER_OBJECT])
            )
        # Written, or not provable: either way not asked again.
        known.update(map(_key, due))

    def _hot_ranges(self, rows: list[QueueRow]) -> list[HotRange | None]:
        """Each row's hot range, None where the hot store cannot say (blocking)."""
        out: list[HotRange | None] = []
        for row in rows:
            try:
                out.append(self.hot.queue_range(row.topic, row.queue_id))
            except StoreError:
                out.append(None)
        return out

    def _init_for(
        self, row: QueueRow, rng: HotRange | None, policy: str, now_ms: int
    ) -> QueueInit | None:
        if rng is None:
            return None
        if rng.min > row.init_offset or row.cold_min != row.init_offset:
            log.warning(
                "queue %s/%d has no init record and hot no longer proves its start "
                "(init offset %d, cold min %d, hot min %d): none is written; the verifier "
                "reports it as unproven_start",
                row.topic, row.queue_id, row.init_offset, row.cold_min, rng.min,
            )  # fmt: skip
            return None
        # An offset the policy in force did not choose (tiered already, or an earliest
        # policy now for an offset above hot min: set under another policy) is adopted;
        # the verifier holds an earliest init to hot min.
        chosen = row.cold_commit == row.init_offset and not (
            policy == "earliest" and row.init_offset != rng.min
        )
        return QueueInit.new(
            QueuePath(self.cluster, self.broker, row.topic, row.queue_id),
            row.init_offset,
            policy if chosen else "adopted",
            created_at_ms=now_ms,
            writer_id=self.lease.owner,
            lease_epoch=self.lease.epoch,
        )


def _key(row: QueueRow) -> QueueKey:
    return QueueKey(row.topic, row.queue_id)


async def record_head_removal(backend: Backend, lease: Lease, segment: SegmentRow) -> None:
    """Create the retention record of deleting ``segment`` (the queue's head): its new
    first offset is the segment's end. Before the manifest goes; idempotent."""
    m = segment.manifest
    lease.check()
    await create_record(
        backend,
        RetentionMark(
            PROVENANCE_FORMAT_VERSION, m.cluster, m.broker, m.topic, m.queue_id,
            lease.owner, lease.epoch, m.end_offset, m.key, m.max_store_timestamp,
            lease.clock.now_ms(),
        ),
    )  # fmt: skip
