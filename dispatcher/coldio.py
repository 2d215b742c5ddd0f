"""The dispatcher's cold-side writes: segment objects, manifests, continuity checks.

Segment uploads are retried as a whole on RetryableError (a streamed upload cannot be
replayed chunk by chunk, so the backend's own retry wrapper does not retry it), with the
injected :class:`RetryPolicy` and clock: names are deterministic, so a retry rewrites the
same objects. Single-object calls (manifest, reads) rely on the backend's retry wrapper.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from dispatcher.planner import SegmentPlan
from dispatcher.uploader import upload_objects
from metadata.catalogue import Catalogue
from metadata.rows import QueueRow
from tieredstore.backends.base import Backend
from tieredstore.backends.retry import RetryPolicy
from tieredstore.clock import Clock
from tieredstore.errors import ObjectNotFoundError, RetryableError
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.formats.record import PHYSICAL_OFFSET_SLICE
from tieredstore.hotstore import HotStore
from tieredstore.layout import QueuePath, SegmentKind, object_key, object_name
from tieredstore.segment import DIGEST_ALGORITHM, FORMAT_VERSION, Manifest, ObjectRef

__all__ = ["ColdWriter"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class ColdWriter:
    """Writes one broker's segments under its cold prefix."""

    def __init__(
        self,
        backend: Backend,
        hot: HotStore,
        catalogue: Catalogue,
        *,
        cluster: str,
        broker: str,
        writer_id: str,
        clock: Clock,
        batch_bytes: int,
        retry: RetryPolicy,
        on_retry: Callable[[str], None] | None = None,
    ) -> None:
        self.backend = backend
        self.hot = hot
        self.catalogue = catalogue
        self.cluster = cluster
        self.broker = broker
        self.writer_id = writer_id
        self.clock = clock
        self.batch_bytes = batch_bytes
        self.retry = retry
        self.on_retry = on_retry

    def queue_path(self, topic: str, queue_id: int) -> QueuePath:
        return QueuePath(self.cluster, self.broker, topic, queue_id)

    async def _retrying(self, op: str, call: Callable[[], Awaitable[T]]) -> T:
        attempt = 1
        while True:
            try:
                return await call()
            except RetryableError as exc:
                if attempt >= self.retry.max_attempts:
                    raise
                log.warning("%s failed (attempt %d), retrying: %s", op, attempt, exc)
                if self.on_retry:
                    self.on_retry(op)
                await self.clock.sleep(self.retry.delay(attempt, random.random()))
                attempt += 1

    async def write_segment(self, plan: SegmentPlan, row: QueueRow, epoch: int) -> Manifest:
        """Upload the plan's COMMIT_LOG and CONSUME_QUEUE objects; return its manifest.

        The manifest is *not* written: the caller checks its lease first.
        """
        queue = self.queue_path(row.topic, row.queue_id)
        cl_base = row.cold_cl_end
        cq_base = plan.start * CQ_UNIT_SIZE
        uploaded = await self._retrying(
            "segment upload",
            lambda: upload_objects(
                plan,
                hot=self.hot,
                backend=self.backend,
                cl_key=object_key(queue, SegmentKind.COMMIT_LOG, cl_base),
                cq_key=object_key(queue, SegmentKind.CONSUME_QUEUE, cq_base),
                cl_base=cl_base,
                batch_bytes=self.batch_bytes,
            ),
        )
        return Manifest(
            format_version=FORMAT_VERSION,
            cluster=self.cluster,
            broker=self.broker,
            topic=row.topic,
            queue_id=row.queue_id,
            start_offset=plan.start,
            end_offset=plan.end,
            cl_base=cl_base,
            cl_end=cl_base + uploaded.cl_size,
            commit_log=ObjectRef(object_name(cl_base), uploaded.cl_size, uploaded.cl_digest),
            consume_queue=ObjectRef(object_name(cq_base), uploaded.cq_size, uploaded.cq_digest),
            digest_algorithm=DIGEST_ALGORITHM,
            min_store_timestamp=uploaded.min_store_timestamp,
            max_store_timestamp=uploaded.max_store_timestamp,
            message_count=plan.count,
            writer_id=self.writer_id,
            lease_epoch=epoch,
            created_at_ms=self.clock.now_ms(),
        )

    async def manifest_exists(self, topic: str, queue_id: int, start: int) -> bool:
        """Whether a segment starting at queue offset ``start`` is already committed."""
        key = object_key(self.queue_path(topic, queue_id), SegmentKind.MANIFEST, start)
        return await self.backend.exists(key)

    async def write_manifest(self, manifest: Manifest) -> None:
        """Write the commit point of a segment whose objects are already written."""
        await self._retrying(
            "manifest write", lambda: self.backend.write(manifest.key, manifest.to_json())
        )

    async def continuity_ok(self, row: QueueRow) -> bool:
        """Whether the hot record just below the cold commit offset still equals cold's.

        A broker that lost unflushed data and re-wrote offsets has different bytes at an
        offset cold already holds. Compared outside bytes [28, 36). True when nothing is
        tiered yet or the hot record is gone (deleted by retention: nothing to compare).
        """
        last = row.cold_commit - 1
        if last < row.cold_min:
            return True  # nothing committed (or all of it expired)
        seg = self.catalogue.segment_at(row.topic, row.queue_id, last)
        hot = self.hot
        rng = await asyncio.to_thread(hot.queue_range, row.topic, row.queue_id)
        if not rng.min <= last < rng.max:
            return True
        unit = (await asyncio.to_thread(hot.read_units, row.topic, row.queue_id, last, last + 1))[0]
        size = int(unit["size"])
        hot_bytes = await asyncio.to_thread(
            hot.read_record_bytes, int(unit["commitlog_offset"]), size
        )
        queue = self.queue_path(row.topic, row.queue_id)
        key = object_key(queue, SegmentKind.COMMIT_LOG, seg.cl_base)
        rel_end = seg.cl_end - seg.cl_base
        try:
            cold_bytes = await self.backend.read_exact(key, rel_end - size, rel_end)
        except ObjectNotFoundError:
            return False
        return _same_outside_offset(hot_bytes, cold_bytes)

    async def recover(self) -> None:
        """Adopt manifests committed to cold but not yet to the catalogue (a crash)."""
        report = await self.catalogue.reconcile(self.backend)
        log.info("reconciled catalogue with cold store: %s", report)


def _same_outside_offset(hot: bytes, cold: bytes) -> bool:
    s = PHYSICAL_OFFSET_SLICE
    return (
        len(hot) == len(cold)
        and hot[: s.start] == cold[: s.start]
        and hot[s.stop :] == cold[s.stop :]
    )
