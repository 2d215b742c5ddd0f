"""The queue state table: ``set_state`` makes the moves of ``TRANSITIONS`` and refuses
every other, in one line, leaving the row as it was (:mod:`tieredstore.metadata.rows`)."""

from __future__ import annotations

import itertools
import re
import sqlite3
from pathlib import Path

import pytest

from tieredstore.clock import VirtualClock
from tieredstore.errors import CatalogueError
from tieredstore.metadata.catalogue import DB_NAME, Catalogue
from tieredstore.metadata.rows import (
    PERSISTED_STATES,
    TRANSITIONS,
    QueueRow,
    QueueState,
    is_valid_transition,
)

TOPIC = "TopicTest"

#: How a new (ACTIVE) queue reaches each persisted state along the table.
_PATH = {
    QueueState.ACTIVE: (),
    QueueState.PAUSED: (QueueState.PAUSED,),
    QueueState.DIVERGED: (QueueState.DIVERGED,),
    QueueState.DELETED: (QueueState.DELETED,),
}


def _queue_in(catalogue: Catalogue, queue_id: int, state: QueueState) -> QueueRow:
    row = catalogue.queues.ensure(TOPIC, queue_id, 10)
    for step in _PATH[state]:
        row = catalogue.queues.set_state(TOPIC, queue_id, step)
    assert row.state is state
    return row


def test_the_persisted_states_are_the_catalogue_s_and_the_others_are_not() -> None:
    assert {s for s in QueueState if s.persisted} == PERSISTED_STATES
    assert {s for s in QueueState if not s.persisted} == {QueueState.STOPPED, QueueState.DEGRADED}
    for source, target in TRANSITIONS:
        assert source.persisted and target.persisted and source is not target


def test_the_schema_stores_exactly_the_persisted_states(
    catalogue: Catalogue, state_dir: Path
) -> None:
    catalogue.queues.ensure(TOPIC, 0, 0)
    catalogue.close()
    raw = sqlite3.connect(state_dir / DB_NAME)
    try:
        for state in QueueState:
            update = "UPDATE queues SET state = ?"
            if state.persisted:
                raw.execute(update, (state.value,))
            else:
                with pytest.raises(sqlite3.IntegrityError, match="state IN"):
                    raw.execute(update, (state.value,))
    finally:
        raw.close()


def _by_name(pair: tuple[QueueState, QueueState]) -> tuple[str, str]:
    return pair[0].value, pair[1].value


_MOVES = sorted(TRANSITIONS, key=_by_name)


@pytest.mark.parametrize(("source", "target"), _MOVES)
def test_every_move_of_the_table_is_made(
    catalogue: Catalogue, clock: VirtualClock, source: QueueState, target: QueueState
) -> None:
    before = _queue_in(catalogue, 0, source)
    clock.set_ms(clock.now_ms() + 1)
    row = catalogue.queues.set_state(TOPIC, 0, target)
    assert row.state is target and catalogue.queues.get(TOPIC, 0) == row
    assert row.updated_at_ms == clock.now_ms() > before.updated_at_ms


@pytest.mark.parametrize("state", [s for s in QueueState if s.persisted])
def test_a_state_set_to_itself_is_a_no_op(
    catalogue: Catalogue, clock: VirtualClock, state: QueueState
) -> None:
    before = _queue_in(catalogue, 0, state)
    clock.set_ms(clock.now_ms() + 1)
    assert is_valid_transition(state, state)
    assert catalogue.queues.set_state(TOPIC, 0, state) == before == catalogue.queues.get(TOPIC, 0)


REFUSED = [
    (QueueState.DELETED, QueueState.ACTIVE),  # a deleted topic's queue never comes back
    (QueueState.DELETED, QueueState.PAUSED),
    (QueueState.DELETED, QueueState.DIVERGED),
    (QueueState.PAUSED, QueueState.DIVERGED),
    (QueueState.DIVERGED, QueueState.PAUSED),
    (QueueState.ACTIVE, QueueState.STOPPED),  # per-process states are never stored
    (QueueState.ACTIVE, QueueState.DEGRADED),
    (QueueState.PAUSED, QueueState.STOPPED),
]


@pytest.mark.parametrize(("source", "target"), REFUSED)
def test_a_move_outside_the_table_is_refused_in_one_line_and_changes_nothing(
    catalogue: Catalogue, clock: VirtualClock, source: QueueState, target: QueueState
) -> None:
    before = _queue_in(catalogue, 3, source)
    clock.set_ms(clock.now_ms() + 1)
    assert not is_valid_transition(source, target)
    with pytest.raises(CatalogueError) as caught:
        catalogue.queues.set_state(TOPIC, 3, target)
    message = str(caught.value)
    assert "\n" not in message
    assert re.search(
        rf"cannot move the queue from {source.value} to {target.value}: not a transition "
        rf"of the queue state table \(.*{DB_NAME} queue {TOPIC}/3\)$",
        message,
    ), message
    assert catalogue.queues.get(TOPIC, 3) == before


def test_the_table_is_the_only_way_between_two_different_states() -> None:
    """Every ordered pair of different states is valid exactly when the table lists it."""
    for source, target in itertools.permutations(QueueState, 2):
        assert is_valid_transition(source, target) == ((source, target) in TRANSITIONS)
    assert not is_valid_transition(QueueState.STOPPED, QueueState.STOPPED)
    assert not is_valid_transition(QueueState.DEGRADED, QueueState.DEGRADED)
