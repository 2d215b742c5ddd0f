"""The status table's order, filters and fitting (:mod:`tieredstore.cli.commands.status_view`)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace

from tieredstore.cli.commands.status import View, frame, health
from tieredstore.cli.commands.status_view import Layout, fit, render_table, select, worst_first
from tieredstore.dispatcher.status_report import QueueStatus, as_json
from tieredstore.metadata.rows import QueueState

T0 = 1_700_000_000_000


def _q(
    topic: str, queue: int = 0, state: QueueState = QueueState.ACTIVE, **kw: object
) -> QueueStatus:
    base = QueueStatus(topic, queue, state, 0, 100, 0, 100, 0, 0, 0.0, "")
    return replace(base, **kw)  # type: ignore[arg-type]


QUEUES = [
    _q("Calm", lag_seconds=1.0),
    _q("Behind", lag_seconds=900.0, lag_messages=10),
    _q("Paused", state=QueueState.PAUSED),
    _q("Noted", note="cannot read queue"),
    _q("Diverged", state=QueueState.DIVERGED),
    _q("Lost", lost_unacknowledged=3),
    _q("AlsoBehind", lag_seconds=900.0, lag_messages=50),
]


def test_worst_queues_come_first() -> None:
    order = [s.topic for s in worst_first(QUEUES)]
    assert order == ["Diverged", "Lost", "Paused", "Noted", "AlsoBehind", "Behind", "Calm"]


def test_problems_and_topic_filters() -> None:
    assert [s.topic for s in select(QUEUES, topic=None, problems=True)] == [
        "Diverged", "Lost", "Paused", "Noted",
    ]  # fmt: skip
    assert [s.topic for s in select(QUEUES, topic="*Behind", problems=False)] == [
        "AlsoBehind", "Behind",
    ]  # fmt: skip
    assert select(QUEUES, topic="calm", problems=False) == []  # topic names are case-sensitive


def test_health_is_the_overall_verdict() -> None:
    assert health([]) == "NO QUEUES"
    assert health(QUEUES[:2]) == "OK"
    assert health(QUEUES[:3]) == "WARNING"
    assert health(QUEUES) == "CRITICAL"


def test_cut_text_says_so() -> None:
    assert fit("SynthTopic", 20) == "SynthTopic"
    assert fit("SynthTopicLongxxxx", 10) == "SynthTopi…"
    assert len(fit("x" * 200, 40)) == 40


def test_rows_fit_the_width_and_the_height_keeps_the_header() -> None:
    many = [_q("T" + "x" * 150 + "end", i, lag_seconds=float(i)) for i in range(50)]
    lines = frame(many, T0, View(layout=Layout(80, 24))).splitlines()
    assert len(lines) == 24 and all(len(line) <= 80 for line in lines)
    name = lines[3].split()[0]  # shortened in the middle: its end is still there
    assert (
        lines[2].startswith("topic")
        and name.startswith("Txx")
        and name.endswith("xend")
        and "…" in name
    )
    assert lines[-1] == "… 30 more queues (narrow with --topic GLOB or --problems)"
    assert lines[3].split()[1] == "49"  # the oldest lag first
    wide = render_table(many[:1], Layout())  # piped: every column, the name whole
    assert wide[1].startswith("T" + "x" * 150 + "end ") and "room MiB" in wide[0]


def test_a_filter_that_leaves_nothing_says_so_instead_of_a_bare_header() -> None:
    healthy = QUEUES[:2]
    lines = frame(healthy, T0, View(problems=True)).splitlines()
    assert lines[1:] == [
        "",
        "no problems: none of the 2 queues is DIVERGED, PAUSED, losing messages or unreadable",
    ]
    lines = frame(healthy, T0, View(topic="Nothing*")).splitlines()
    assert lines[2:] == ["no queue matching --topic 'Nothing*' (of 2)"]
    narrow = frame(healthy, T0, View(problems=True, layout=Layout(40, 10))).splitlines()
    assert len(narrow[2]) == 40 and narrow[2].endswith("…")


def test_json_names_the_state_where_the_field_is() -> None:
    """``status --json`` and ``/v1/queues``: every field in order, the state by name."""
    doc = as_json(_q("Stopped", state=QueueState.STOPPED, note="why"))
    assert list(doc) == [f.name for f in dataclasses.fields(QueueStatus)]
    assert json.dumps(doc).startswith('{"topic": "Stopped", "queue": 0, "state": "STOPPED", ')
