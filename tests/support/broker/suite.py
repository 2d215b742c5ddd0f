"""The conformance suite, run against a live store, a stopped one and the golden one.

A test module subclasses :class:`ConformanceSuite` (as ``Test...``) and provides a
``view`` fixture returning a :class:`StoreView`; pytest then runs every check below
against that store. The class itself is not collected (its name lacks ``Test``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.broker.conformance import (
    StoreIndex,
    check_checkpoint,
    check_commitlog,
    check_consume_queue_files,
    check_messages,
    check_offsets,
    check_records,
    check_topics,
)
from tests.support.broker.manifest import Manifest
from tests.support.broker.traffic import LONG_TOPIC, QUEUES_PER_TOPIC, USER_TOPICS
from tieredstore.formats.record import MagicCode, TransactionType
from tieredstore.hot.store import HotStore

__all__ = ["ConformanceSuite", "StoreView"]


@dataclass(frozen=True, slots=True)
class StoreView:
    """A store to check and what it must agree with.

    ``clean``: the broker stopped cleanly, so the checkpoint is fully written.
    ``min_messages``, ``min_commitlog_files``, ``min_cq_files``: how much traffic and
    file rolling the store must show.
    """

    store: HotStore
    manifest: Manifest
    index: StoreIndex
    clean: bool
    min_messages: int
    min_commitlog_files: int = 3
    min_cq_files: int = 2


class ConformanceSuite:
    """Every check of :mod:`tests.support.broker.conformance`, one test each."""

    def test_traffic_covers_the_edge_cases(self, view: StoreView) -> None:
        """Guards the traffic plan: each format feature is really in the store."""
        records = [loc.record for loc in view.index.records]
        assert len(view.manifest.messages) >= view.min_messages
        assert any(r.magic is MagicCode.V2 for r in records), "no v2 record"
        assert any(r.compressed for r in records), "no compressed body"
        assert any(r.transaction_type is TransactionType.COMMIT for r in records)
        assert any(r.topic == LONG_TOPIC for r in records), "no 127-character topic"
        assert any(len(r.body) == 1 for r in records), "no 1-byte body"
        for topic in USER_TOPICS:
            used = {loc.queue.queue_id for loc in view.index.records if loc.queue.topic == topic}
            assert used == set(range(QUEUES_PER_TOPIC)), f"{topic} uses queues {used}"

    def test_records_match_their_units(self, view: StoreView) -> None:
        check_records(view.index)

    def test_every_message_where_the_broker_put_it(self, view: StoreView) -> None:
        check_messages(view.index, view.manifest)

    def test_hot_offsets_equal_the_brokers(self, view: StoreView) -> None:
        check_offsets(view.store, view.manifest)

    def test_commitlog_scan_and_file_ends(self, view: StoreView) -> None:
        check_commitlog(
            view.store, view.index, view.manifest, min_data_files=view.min_commitlog_files
        )

    def test_consume_queue_files(self, view: StoreView) -> None:
        check_consume_queue_files(view.store, view.manifest, min_files=view.min_cq_files)

    def test_topics_json(self, view: StoreView) -> None:
        check_topics(view.store)

    def test_checkpoint(self, view: StoreView) -> None:
        check_checkpoint(view.store.checkpoint(), view.index, view.manifest, clean=view.clean)
