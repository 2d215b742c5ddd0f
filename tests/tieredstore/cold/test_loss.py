"""Loss records: their key, their strict canonical JSON, and the catalogue's side of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.clock import VirtualClock
from tieredstore.cold.layout import (
    LossKey,
    QueuePath,
    is_loss_key,
    loss_key,
    parse_loss_key,
    parse_object_key,
    quarantine_loss_key,
)
from tieredstore.cold.loss import LossRecord, read_loss_record
from tieredstore.errors import CatalogueError, CorruptLossRecordError, InvalidNameError
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueState

Q = QueuePath(CLUSTER, BROKER, "TopicA", 3)


def _record(start: int = 300, end: int = 596, **changes: object) -> LossRecord:
    values: dict[str, object] = {
        "accepted_at_ms": 1_700_000_000_123,
        "writer_id": "host-1:42:abcd",
        "lease_epoch": 7,
    }
    values.update(changes)
    return LossRecord.new(Q, start, end, **values)  # type: ignore[arg-type]


def test_the_key_sits_beside_the_manifests_and_round_trips() -> None:
    key = loss_key(Q, 300)
    assert key == f"{Q.root}/LOSS/94f6d7e000000000000000000300.json"
    assert parse_loss_key(key) == LossKey(Q, 300)
    assert LossKey(Q, 300).key == key
    assert is_loss_key(key)
    assert not is_loss_key(f"{Q.root}/MANIFEST/94f6d7e000000000000000000300.json")
    with pytest.raises(InvalidNameError, match="unknown object kind 'LOSS'"):
        parse_object_key(key)  # never mistaken for a segment object
    with pytest.raises(InvalidNameError, match="hash prefix"):
        parse_loss_key(key.replace("94f6d7e0", "00000000"))
    with pytest.raises(InvalidNameError, match="not a loss record"):
        parse_loss_key(f"{Q.root}/MANIFEST/94f6d7e000000000000000000300.json")
    stamp = quarantine_loss_key(LossKey(Q, 300), stamp_ms=1_700_000_000_000)
    assert stamp.endswith(
        "/_quarantine/TopicA/3/1700000000000/LOSS/94f6d7e000000000000000000300.json"
    )


def test_canonical_json_round_trips() -> None:
    record = _record()
    data = record.to_json()
    assert data == json.dumps(json.loads(data), sort_keys=True, separators=(",", ":")).encode()
    assert read_loss_record(data, record.key) == record
    assert record.count == 296
    assert "[300, 596)" in record.describe() and "lease epoch 7" in record.describe()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("writer_id"), "lacks field 'writer_id'"),
        (lambda d: d.update(extra=1), "unknown field 'extra'"),
        (lambda d: d.update(end_offset=True), "is bool, not int"),
        (lambda d: d.update(end_offset=300), r"\[300, 300\) are not a non-empty range"),
        (lambda d: d.update(lease_epoch=0), "lease_epoch 0 < 1"),
        (lambda d: d.update(format_version=2), "unsupported format_version 2"),
        (lambda d: d.update(topic="_x"), "reserved"),
        (lambda d: d.update(start_offset=301), "describes .* not the key it is stored at"),
    ],
)
def test_a_bad_record_is_refused_naming_the_object(mutate: object, message: str) -> None:
    record = _record()
    doc = json.loads(record.to_json())
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(CorruptLossRecordError, match=message) as info:
        read_loss_record(json.dumps(doc).encode(), record.key)
    assert info.value.where == record.key


def test_not_json_and_duplicate_fields_are_refused() -> None:
    key = _record().key
    with pytest.raises(CorruptLossRecordError, match="not valid JSON"):
        read_loss_record(b"{", key)
    with pytest.raises(CorruptLossRecordError, match="duplicate field"):
        read_loss_record(b'{"topic":"a","topic":"b"}', key)
    with pytest.raises(CorruptLossRecordError, match="not a loss-record key"):
        read_loss_record(_record().to_json(), "nope")


# -- the catalogue ------------------------------------------------------------------------
def _catalogue(tmp_path: Path) -> Catalogue:
    return Catalogue.open(tmp_path / "state", cluster=CLUSTER, broker=BROKER, clock=VirtualClock())


def test_accepting_a_loss_moves_the_queue_past_it(tmp_path: Path) -> None:
    with _catalogue(tmp_path) as cat:
        cat.queues.ensure("TopicA", 3, 300)
        cat.queues.set_state("TopicA", 3, QueueState.PAUSED)
        row = cat.queues.accept_loss(_record())
        assert (row.cold_min, row.cold_commit, row.state) == (596, 596, QueueState.ACTIVE)
        assert cat.queues.losses() == [_record()] == cat.queues.losses("TopicA", 3)
        assert cat.queues.accept_loss(_record()) == row  # the same record again: a no-op
        with pytest.raises(CatalogueError, match="a different loss"):
            cat.queues.accept_loss(_record(accepted_at_ms=5))
        with pytest.raises(CatalogueError, match="does not start at the cold commit offset 596"):
            cat.queues.accept_loss(_record(600, 700))
        cat.queues.set_state("TopicA", 3, QueueState.DIVERGED)
        with pytest.raises(CatalogueError, match="DIVERGED; a loss cannot be accepted"):
            cat.queues.accept_loss(_record(596, 700))


def test_truncation_forgets_losses_at_and_after_the_cut_and_never_splits_one(
    tmp_path: Path,
) -> None:
    with _catalogue(tmp_path) as cat:
        cat.queues.ensure("TopicA", 3, 300)
        cat.queues.accept_loss(_record(300, 400))
        cat.queues.accept_loss(_record(400, 500))
        with pytest.raises(CatalogueError, match=r"inside the accepted loss \[400, 500\)"):
            cat.segments.truncate("TopicA", 3, 450)
        cat.segments.truncate("TopicA", 3, 400)
        assert cat.queues.losses() == [_record(300, 400)]
        row = cat.queues.get("TopicA", 3)
        assert row is not None and row.cold_commit == 400
