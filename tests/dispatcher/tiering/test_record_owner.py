"""A consume-queue unit pointing at another queue's record stops its queue; nothing of it
is committed, the other queues tier on (issue 34, row 5).

The broken unit of ``SynthTopic0/0`` points at the record of ``SynthTopic1/0`` with the
same queue offset and the same size: magic, totalSize and queueOffset all agree, so the
record-head check alone let it through and ``run --once`` committed a segment whose
consume queue and commit log disagree. Now the owner check (topic, queue id, physical
offset) refuses it, the queue turns STOPPED naming the offset (``status``, the
``/v1/queues`` view, the state gauge), and no manifest covers that offset.
"""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path

import numpy as np
import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER, location_args, settings_for
from tieredstore.cli.main import main
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.cold.segment import RecordOwners, TopicTable
from tieredstore.dispatcher.status_report import collect, mark_stopped
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.metadata.rows import QueueState

SPEC = SynthSpec(
    topics=2, queues=2, messages=800, body_min=200, body_max=200, compress_over=0,
    keys=False, tags=False, properties=False, seed=4,
)  # fmt: skip
BROKEN, OTHER = "SynthTopic0", "SynthTopic1"


def _point_at_other_topic(store: Path) -> int:
    """Make the unit of ``BROKEN/0`` at the first queue offset where both topics' queue 0
    records are the same size point at ``OTHER/0``'s record; return that offset."""
    hot = HotStore(store)
    n = min(hot.queue_range(t, 0).max for t in (BROKEN, OTHER))
    mine, theirs = hot.read_units(BROKEN, 0, 0, n), hot.read_units(OTHER, 0, 0, n)
    offset = int(np.flatnonzero(mine["size"] == theirs["size"])[n // 4 :][0])
    unit = struct.pack(">qiq", int(theirs["commitlog_offset"][offset]),
                       int(theirs["size"][offset]), int(mine["tags_code"][offset]))  # fmt: skip
    cq = sorted((store / "consumequeue" / BROKEN / "0").iterdir())[0]
    with cq.open("r+b") as f:
        f.seek(offset * 20)
        f.write(unit)
    return offset


async def test_a_unit_pointing_at_another_topics_record_stops_only_its_queue(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    store = synthesize(tmp_path / "store", SPEC).root
    offset = _point_at_other_topic(store)
    state = tmp_path / "state"
    settings = settings_for(
        store, str(tmp_path / "cold"), state, tiering__segment_max_bytes="16K",
        tiering__guard="none",
    )  # fmt: skip
    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        with caplog.at_level(logging.ERROR, logger="tieredstore.dispatcher"):
            await rt.dispatcher.catch_up()
            await rt.dispatcher.catch_up()  # stays stopped: no second attempt, no second line
        lines = [r.getMessage() for r in caplog.records if "STOPPED" in r.getMessage()]
        assert len(lines) == 1 and f"queue offset {offset}" in lines[0], lines
        broken = rt.catalogue.queues.get(BROKEN, 0)
        assert broken is not None and broken.cold_commit <= offset  # nothing past it
        for seg in rt.catalogue.segments.of(BROKEN, 0):
            assert seg.end_offset <= offset
        for topic, queue in ((BROKEN, 1), (OTHER, 0), (OTHER, 1)):  # the others go on
            row = rt.catalogue.queues.get(topic, queue)
            assert row is not None
            assert row.cold_commit == rt.hot.queue_range(topic, queue).max
        gauge = rt.dispatcher.metrics.queue_state
        assert gauge.labels(BROKEN, "0", "STOPPED")._value.get() == 1
        views = mark_stopped(
            collect(rt.hot, rt.catalogue.queues.all(), 0), rt.dispatcher.states.stopped
        )
        stopped = [v for v in views if v.state is QueueState.STOPPED]
        assert [(v.topic, v.queue) for v in stopped] == [(BROKEN, 0)]
        assert f"queue offset {offset}" in stopped[0].note  # the HTTP API's /v1/queues
        assert "not of topic" in stopped[0].note or "queueId" in stopped[0].note
        capsys.readouterr()
        flags = ["--store", str(store), "--state-dir", str(state), "--cluster", CLUSTER,
                 "--broker", BROKER]  # fmt: skip
        assert main(["status", "--json", *flags]) == 0
        queues = json.loads(capsys.readouterr().out)["queues"]
        shown = {(q["topic"], q["queue"]): q for q in queues}
        assert shown[(BROKEN, 0)]["state"] == "STOPPED"
        assert f"queue offset {offset}" in shown[(BROKEN, 0)]["note"]


def test_run_once_exits_1_naming_the_stopped_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = synthesize(tmp_path / "store", SPEC).root
    offset = _point_at_other_topic(store)
    args = location_args(store, tmp_path / "cold", tmp_path / "state")
    assert main(["run", "--once", "--progress", "off", *args]) == 1
    err = capsys.readouterr().err
    assert f"queue {BROKEN}/0 is STOPPED: inconsistent hot store" in err
    assert f"queue offset {offset}" in err


@pytest.mark.parametrize(
    "spec",
    [
        SynthSpec(topics=2, queues=1, messages=60, topic_prefix="T", seed=1),  # 2 bytes
        SynthSpec(topics=2, queues=1, messages=60, topic_prefix="SixteenByteName", seed=2),
        SynthSpec(topics=2, queues=1, messages=60, topic_prefix="EighteenByteTopic", seed=3),
        SynthSpec(topics=2, queues=1, messages=60, long_topic=True, ipv6=True, seed=4),  # v2
    ],
    ids=["short", "multiple-of-8", "long", "v2-ipv6"],
)
def test_the_owner_check_knows_each_topic_byte_for_byte(tmp_path: Path, spec: SynthSpec) -> None:
    """Every record passes as its own topic's and fails as the other's, whatever the
    name's length (shorter than a word, a multiple of 8, not, a v2 name over 127)."""
    hot = HotStore(synthesize(tmp_path / "store", spec).root)
    topics = spec.topic_names()
    table = TopicTable.of(topics)
    for mine, topic in enumerate(topics):
        n = hot.queue_range(topic, 0).max
        units = hot.read_units(topic, 0, 0, n)
        sizes = units["size"].astype(np.int64)
        records = hot.read_records_bytes(units["commitlog_offset"], sizes)
        data = np.frombuffer(b"".join(records), np.uint8)
        starts = np.cumsum(sizes) - sizes
        for claimed in range(len(topics)):
            owners = RecordOwners.check(
                data, starts=starts, sizes=sizes, skip=np.zeros(n, bool),
                queue_ids=np.zeros(n, np.int64),
                physical=units["commitlog_offset"].astype(np.int64),
                topics=table, topic_of=np.full(n, claimed, np.int64),
            )  # fmt: skip
            assert owners.bad.all() if claimed != mine else not owners.bad.any()
