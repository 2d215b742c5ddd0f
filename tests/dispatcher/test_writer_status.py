"""``status``'s judgement of the writer from the catalogue's lease mirror."""

from __future__ import annotations

from tieredstore.dispatcher.status_report import WriterState, writer_status
from tieredstore.metadata.rows import LeaseRow, QueueRow, QueueState

NOW = 1_700_000_000_000
OWNER = "4f1c…@host-a"


def _lease(expires_at_ms: int) -> LeaseRow:
    return LeaseRow("broker-a", OWNER, 3, expires_at_ms, expires_at_ms - 30_000)


def _row(updated_at_ms: int) -> QueueRow:
    return QueueRow("Orders", 0, 0, 0, 10, 0, 0, QueueState.ACTIVE, updated_at_ms)


def test_a_held_lease_with_recent_progress_is_fine() -> None:
    seen = writer_status(_lease(NOW + 20_000), [_row(NOW - 10_000)], lag_messages=50,
                         now_ms=NOW, stall_after_s=300)  # fmt: skip
    assert (seen.state, seen.holder, seen.warning) == (WriterState.HELD, OWNER, None)


def test_a_holder_that_moves_no_queue_while_messages_wait_is_stalled() -> None:
    rows = [_row(NOW - 400_000), _row(NOW - 600_000)]
    seen = writer_status(_lease(NOW + 20_000), rows, lag_messages=50, now_ms=NOW,
                         stall_after_s=300)  # fmt: skip
    assert seen.state is WriterState.STALLED and seen.since_ms == NOW - 400_000
    assert (
        seen.warning
        == "the lease holder made no progress for 6 m 40 s (since 2023-11-14T22:06:40Z)"
    )
    assert seen.detail == f"lease holder {OWNER}"
    idle = writer_status(_lease(NOW + 20_000), rows, lag_messages=0, now_ms=NOW,
                         stall_after_s=300)  # fmt: skip
    assert idle.state is WriterState.HELD  # nothing to tier: no progress is expected


def test_a_hold_that_ended_names_the_last_holder_and_when() -> None:
    seen = writer_status(_lease(NOW - 5_000), [_row(NOW - 9_000)], lag_messages=3000,
                         now_ms=NOW, stall_after_s=300)  # fmt: skip
    assert seen.state is WriterState.NOT_HELD and seen.since_ms == NOW - 5_000
    assert seen.warning == "no sidecar holds the writer lease since 2023-11-14T22:13:15Z"
    assert seen.detail == f"last holder {OWNER}"
    quiet = writer_status(_lease(NOW - 5_000), [], lag_messages=0, now_ms=NOW, stall_after_s=1)
    assert quiet.state is WriterState.NOT_HELD and quiet.warning is None  # nothing waits


def test_no_lease_ever_recorded() -> None:
    seen = writer_status(None, [], lag_messages=1, now_ms=NOW, stall_after_s=300)
    assert seen.state is WriterState.NOT_HELD and seen.holder == "" and seen.since_ms is None
    assert seen.warning == "no sidecar holds the writer lease (none recorded in this state dir)"
