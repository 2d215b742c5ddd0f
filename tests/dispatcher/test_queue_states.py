"""The queue state the dispatcher's parts share
(:class:`tieredstore.dispatcher.shared_state.SharedState`):
its contract, method by method."""

from __future__ import annotations

from pathlib import Path

import pytest

from tieredstore.dispatcher import stopped_file
from tieredstore.dispatcher.shared_state import SharedState
from tieredstore.hot.store import QueueKey
from tieredstore.metadata.rows import QueueState

KEY = QueueKey("T", 0)


def test_the_stopped_queues_change_only_through_stop_queue(tmp_path: Path) -> None:
    path = tmp_path / stopped_file.FILE_NAME
    states = SharedState(stopped_path=path)
    with pytest.raises(TypeError):
        states.stopped[KEY] = "written around the owner"  # type: ignore[index]
    assert not states.is_stopped(KEY)
    states.stop_queue(KEY, "newer-format manifest at k")
    assert states.is_stopped(KEY)
    assert dict(states.stopped) == {KEY: "newer-format manifest at k"}
    assert stopped_file.load(path) == {KEY: "newer-format manifest at k"}


def test_save_writes_the_damaged_queues_beside_the_stopped_ones(tmp_path: Path) -> None:
    path = tmp_path / stopped_file.FILE_NAME
    states = SharedState(stopped_path=path)
    states.damaged[KEY] = "cold damage: a manifest is missing"
    states.save()
    assert stopped_file.load_degraded(path) == {KEY: "cold damage: a manifest is missing"}
    assert stopped_file.load(path) == {}


def test_without_a_path_nothing_is_written(tmp_path: Path) -> None:
    states = SharedState()
    states.stop_queue(KEY, "why")
    assert states.is_stopped(KEY)
    assert list(tmp_path.iterdir()) == []


def test_the_operator_is_reminded_once_per_queue_and_state() -> None:
    states = SharedState()
    assert states.first_reminder(KEY, QueueState.PAUSED)
    assert not states.first_reminder(KEY, QueueState.PAUSED)
    assert states.first_reminder(KEY, QueueState.DIVERGED)
    other = QueueKey("T", 1)
    states.mark_reminded(other, QueueState.DIVERGED)  # the committer said it already
    assert not states.first_reminder(other, QueueState.DIVERGED)


async def test_a_stop_request_is_seen_by_whoever_waits_on_it() -> None:
    states = SharedState()
    assert not states.stopping.is_set()
    states.request_stop()
    states.request_stop()  # idempotent
    await states.stopping.wait()
    assert states.stopping.is_set()
