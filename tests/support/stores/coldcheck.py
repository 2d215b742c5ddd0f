"""Test helper: read a cold prefix back and prove it covers a hot store exactly.

Independent of the catalogue and of the verifier: reads the committed history as every
reader does (:func:`~tieredstore.cold.history.load_history`), fully verifies every link
(sizes, digests, record pointers over its spans' bytes) and compares each cold record
with the hot one outside bytes [28, 36).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from tieredstore.backends.base import Backend
from tieredstore.cold.history import Committed, EntryKind, load_history, span_bytes
from tieredstore.cold.segment import verify_segment
from tieredstore.formats.record import PHYSICAL_OFFSET_SLICE
from tieredstore.hot.store import HotStore, QueueKey


@dataclass(frozen=True)
class ColdQueue:
    """One queue's committed cold range and its history's links (``manifests``: a
    segment's or a batch slice's), in order."""

    start: int
    end: int
    manifests: list[Committed]


async def read_cold(backend: Backend, cluster: str, broker: str) -> dict[QueueKey, ColdQueue]:
    """Every queue's committed history under the broker prefix; gaps and overlapping
    segments raise."""
    history = await load_history(backend, cluster, broker)
    out: dict[QueueKey, ColdQueue] = {}
    for queue, h in history.queues.items():
        q = QueueKey(queue.topic, queue.queue_id)
        stray = [o.describe() for o in h.overlaps if o.kind is EntryKind.SEGMENT]
        assert not stray, f"{q}: overlapping segments {stray}"
        manifests = list(h.links)
        for a, b in itertools.pairwise(manifests):
            assert a.end_offset == b.start_offset, (
                f"{q}: gap/overlap {a.end_offset}..{b.start_offset}"
            )
            assert a.cl_end == b.cl_base, f"{q}: cold commitlog not contiguous at {a.cl_end}"
        out[q] = ColdQueue(manifests[0].start_offset, manifests[-1].end_offset, manifests)
    return out


async def assert_cold_matches_hot(
    backend: Backend, hot: HotStore, cluster: str, broker: str, *, expect_full: bool = True
) -> dict[QueueKey, ColdQueue]:
    """Assert every cold record equals its hot record outside [28, 36).

    Records below hot min (the broker deleted its head, by its own expiry or because its
    disk filled) are checked against their own links only. With ``expect_full``, every
    hot queue must be covered from hot min (or below) to hot max.
    Returns the cold view for further checks.
    """
    cold = await read_cold(backend, cluster, broker)
    s = PHYSICAL_OFFSET_SLICE
    hot_queues = set(hot.queues())
    for q, cq in cold.items():
        hot_min = hot.queue_range(q.topic, q.queue_id).min if q in hot_queues else 0
        for m in cq.manifests:
            cl = await span_bytes(backend, m.commit_log)
            cqb = await span_bytes(backend, m.consume_queue)
            units = verify_segment(m, cl, cqb)
            lo = max(m.start_offset, hot_min)  # the broker may have deleted its head
            if lo >= m.end_offset:
                continue
            units = units[lo - m.start_offset :]
            hot_units = hot.read_units(q.topic, q.queue_id, lo, m.end_offset)
            hot_records = hot.read_records_bytes(hot_units["commitlog_offset"], hot_units["size"])
            assert (units["size"] == hot_units["size"]).all()
            assert (units["tags_code"] == hot_units["tags_code"]).all()
            pos = int(units["commitlog_offset"][0]) - m.cl_base
            for record in hot_records:
                cold_rec = cl[pos : pos + len(record)]
                assert cold_rec[: s.start] == record[: s.start]
                assert cold_rec[s.stop :] == record[s.stop :]
                pos += len(record)
    if expect_full:
        for q in hot.queues():
            rng = hot.queue_range(q.topic, q.queue_id)
            if rng.count == 0:
                continue
            assert q in cold, f"{q} not tiered at all"
            # Cold may begin below hot min (the broker expired what cold holds), never above.
            assert cold[q].start <= rng.min and cold[q].end == rng.max, (
                f"{q}: {cold[q].start}..{cold[q].end} vs hot {rng}"
            )
    return cold
