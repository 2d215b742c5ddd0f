"""Random sequences of catalogue operations never break its invariants.

The machine performs queues.ensure / segments.commit (valid, gapped, overlapping,
repeated) / mark_deleting / drop / set_state / truncate in any order, checks each
operation is accepted exactly when the rules allow it, and after every step checks, per
queue: ``cq_base == init * 20``, ``init <= cold_min <= cold_commit``, segments contiguous
in queue offsets and in the cold commitlog, ``cold_min`` / ``cold_commit`` /
``cold_cl_end`` matching the first and last segment, DELETING segments a prefix.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.clock import VirtualClock
from tieredstore.cold.layout import object_name
from tieredstore.cold.manifest import Manifest, ObjectRef
from tieredstore.errors import CatalogueError
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueRow, QueueState, SegmentStatus, is_valid_transition

QUEUES = [("A", 0), ("%DLQ%g", 1)]
queues = st.sampled_from(QUEUES)


def _manifest(topic: str, qid: int, start: int, count: int, cl_base: int, avg: int) -> Manifest:
    size = count * avg
    return Manifest(
        format_version=1,
        cluster=CLUSTER,
        broker=BROKER,
        topic=topic,
        queue_id=qid,
        start_offset=start,
        end_offset=start + count,
        cl_base=cl_base,
        cl_end=cl_base + size,
        commit_log=ObjectRef(object_name(cl_base), size, "c" * 64),
        consume_queue=ObjectRef(object_name(start * 20), 20 * count, "d" * 64),
        digest_algorithm="sha256",
        min_store_timestamp=1,
        max_store_timestamp=2,
        message_count=count,
        writer_id="w",
        lease_epoch=1,
        created_at_ms=0,
    )


def _fast_tmp() -> Path:
    # fsync on every commit (synchronous=FULL) is free on tmpfs
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(dir=shm if shm.is_dir() else None))


class CatalogueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = _fast_tmp()
        self.cat = Catalogue.open(self.dir, cluster=CLUSTER, broker=BROKER, clock=VirtualClock())
        self.last: dict[tuple[str, int], Manifest] = {}

    def teardown(self) -> None:
        self.cat.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _row(self, key: tuple[str, int]) -> QueueRow | None:
        return self.cat.queues.get(*key)

    @initialize(key=queues, init=st.integers(0, 50))
    def first_queue(self, key: tuple[str, int], init: int) -> None:
        self.ensure(key, init)

    @rule(key=queues, init=st.integers(0, 50))
    def ensure(self, key: tuple[str, int], init: int) -> None:
        before = self._row(key)
        row = self.cat.queues.ensure(*key, init)
        assert row == (before or row)
        if before is None:
            assert (row.init_offset, row.cold_min, row.cold_commit) == (init, init, init)

    @rule(
        key=queues,
        count=st.integers(1, 5),
        avg=st.integers(92, 300),
        shift=st.sampled_from([0] * 8 + [-1, 1]),
        cl_shift=st.sampled_from([0] * 9 + [7]),
    )
    def commit(self, key: tuple[str, int], count: int, avg: int, shift: int, cl_shift: int) -> None:
        row = self._row(key)
        if row is None or row.cold_commit + shift < 0:
            return
        m = _manifest(*key, row.cold_commit + shift, count, row.cold_cl_end + cl_shift, avg)
        allowed = row.state is QueueState.ACTIVE and shift == 0 and cl_shift == 0
        try:
            self.cat.segments.commit(m)
        except CatalogueError:
            assert not allowed
            assert self._row(key) == row
            return
        assert allowed
        event("commit accepted")
        self.last[key] = m

    @precondition(lambda self: bool(self.last))
    @rule(data=st.data())
    def recommit(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.last)))
        m = self.last[key]
        row = self._row(key)
        if not any(s.manifest == m for s in self.cat.segments.of(*key)):
            return  # expired or truncated since
        assert self.cat.segments.commit(m).manifest == m
        assert self._row(key) == row

    @rule(key=queues, data=st.data())
    def mark_deleting(self, key: tuple[str, int], data: st.DataObject) -> None:
        segs = self.cat.segments.of(*key)
        if not segs:
            return
        i = data.draw(st.integers(0, len(segs) - 1))
        allowed = all(s.status is SegmentStatus.DELETING for s in segs[:i])
        try:
            self.cat.segments.mark_deleting(*key, segs[i].start_offset)
        except CatalogueError:
            assert not allowed
            return
        assert allowed

    @rule(key=queues, data=st.data())
    def drop(self, key: tuple[str, int], data: st.DataObject) -> None:
        segs = self.cat.segments.of(*key)
        if not segs:
            return
        i = data.draw(st.integers(0, len(segs) - 1))
        allowed = i == 0 and segs[0].status is SegmentStatus.DELETING
        try:
            self.cat.segments.drop(*key, segs[i].start_offset)
        except CatalogueError:
            assert not allowed
            return
        assert allowed
        event("drop with segments left" if len(segs) > 1 else "drop of the last segment")

    @rule(key=queues, state=st.sampled_from([QueueState.ACTIVE] * 3 + list(QueueState)))
    def set_state(self, key: tuple[str, int], state: QueueState) -> None:
        row = self._row(key)
        if row is None:
            return
        if not is_valid_transition(row.state, state):
            with pytest.raises(CatalogueError, match="not a transition of the queue state"):
                self.cat.queues.set_state(*key, state)
            assert self._row(key) == row
            return
        assert self.cat.queues.set_state(*key, state).state is state

    @rule(key=queues, data=st.data())
    def truncate(self, key: tuple[str, int], data: st.DataObject) -> None:
        row = self._row(key)
        if row is None:
            return
        to = data.draw(st.integers(row.init_offset, row.cold_commit))
        segs = self.cat.segments.of(*key)
        tail = [s for s in segs if s.start_offset >= to]
        allowed = not any(s.start_offset < to < s.end_offset for s in segs) and not any(
            s.status is SegmentStatus.DELETING for s in tail
        )
        try:
            dropped = self.cat.segments.truncate(*key, to)
        except CatalogueError:
            assert not allowed
            return
        assert allowed
        assert dropped == tail
        event("truncate below cold min" if to < row.cold_min else "truncate")

    @invariant()
    def queues_are_consistent(self) -> None:
        for row in self.cat.queues.all():
            segs = self.cat.segments.of(row.topic, row.queue_id)
            assert row.cq_base == row.init_offset * 20
            assert row.init_offset <= row.cold_min <= row.cold_commit
            for a, b in itertools.pairwise(segs):
                assert a.end_offset == b.start_offset
                assert a.cl_end == b.cl_base
            if segs:
                assert row.cold_min == segs[0].start_offset
                assert row.cold_commit == segs[-1].end_offset
                assert row.cold_cl_end == segs[-1].cl_end
            else:
                assert row.cold_min == row.cold_commit
            statuses = [s.status for s in segs]
            deleting = statuses.count(SegmentStatus.DELETING)
            assert all(s is SegmentStatus.DELETING for s in statuses[:deleting])


CatalogueMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None
)
TestCatalogueInvariants = pytest.mark.slow(CatalogueMachine.TestCase)
