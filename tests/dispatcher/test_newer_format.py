"""A manifest of a newer format at a queue's frontier stops that queue cleanly.

A newer sidecar (a rolling upgrade) committed a ``format_version`` 3 manifest at the
offset this sidecar would tier next. This one makes one attempt (its upload, then the
create that finds the key taken), deletes that attempt's own objects, and stops the
queue: state STOPPED in ``tieredstore_queue_state``, an error count, one log line
naming the key. Further ticks upload nothing for it; the other queue tiers on. On the
old code every tick uploaded the segment again and left its objects behind.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER, settings_for
from tieredstore.cli.main import main
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.cold.layout import QueuePath, SegmentKind, object_key
from tieredstore.dispatcher import stopped_file
from tieredstore.dispatcher.status_report import collect, mark_stopped
from tieredstore.errors import ConfigError
from tieredstore.hot.synth import SynthSpec, synthesize

SPEC = SynthSpec(topics=1, queues=2, messages=300, body_min=100, body_max=400, seed=8)
TOPIC = "SynthTopic0"


def _data_objects(cold: Path, queue_id: int) -> list[Path]:
    root = [p for p in cold.rglob(f"{TOPIC}/{queue_id}") if p.is_dir()]
    return [
        p
        for r in root
        for kind in ("COMMIT_LOG", "CONSUME_QUEUE")
        for p in (r / kind).glob("*")
        if p.is_file()
    ]


async def test_a_newer_format_manifest_stops_the_queue_and_nothing_leaks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = synthesize(tmp_path / "store", SPEC).root
    cold = tmp_path / "cold"
    settings = settings_for(
        store, str(cold), tmp_path / "state", tiering__segment_max_bytes="16K",
        tiering__guard="none",
    )  # fmt: skip
    key = object_key(QueuePath(CLUSTER, BROKER, TOPIC, 0), SegmentKind.MANIFEST, 0)
    newer = {"format_version": 4, "segment": {"start": 0, "end": 90}, "writer_id": "v0.9"}
    (cold / key).parent.mkdir(parents=True)
    (cold / key).write_bytes(json.dumps(newer).encode())
    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        with caplog.at_level(logging.ERROR, logger="tieredstore.dispatcher"):
            await rt.dispatcher.catch_up()
            await rt.dispatcher.catch_up()
        stopped = [r.getMessage() for r in caplog.records if "STOPPED" in r.getMessage()]
        assert len(stopped) == 1 and key in stopped[0] and "newer format" in stopped[0]
        gauge = rt.dispatcher.metrics.queue_state
        assert gauge.labels(TOPIC, "0", "STOPPED")._value.get() == 1
        assert gauge.labels(TOPIC, "0", "ACTIVE")._value.get() == 0
        stopped_row, other = rt.catalogue.queues.get(TOPIC, 0), rt.catalogue.queues.get(TOPIC, 1)
        assert other is not None and other.cold_commit > 0  # the other queue tiers on
        assert stopped_row is not None and stopped_row.cold_commit == 0
        rows = rt.catalogue.queues.all()
        statuses = mark_stopped(collect(rt.hot, rows, 0), rt.dispatcher.states.stopped)
        assert [(s.queue, s.state.value) for s in statuses] == [(0, "STOPPED"), (1, "ACTIVE")]
        assert key in statuses[0].note  # the HTTP API's /queues
        creates = rt.dispatcher.metrics.errors.labels("UnsupportedFormatError")._value.get()
        assert creates == 1  # one attempt, not one per tick
    assert _data_objects(cold, 0) == []  # the attempt's own objects were deleted
    assert (cold / key).read_bytes() == json.dumps(newer).encode()  # never touched


async def test_status_shows_a_stopped_queue_until_the_next_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tieredstore status`` reads the state dir, not the sidecar: the stopped queue is
    written there when it stops, and a restart empties it (it tries the queue once more)."""
    store = synthesize(tmp_path / "store", SPEC).root
    cold, state = tmp_path / "cold", tmp_path / "state"
    # 16K: queue 1's first segment is cut by size, so it is a per-queue segment whose
    # manifest create meets the newer one even with batching on (TS_TEST_BATCHING), where a
    # segment cut by age would go into a batch object and never try that key.
    settings = settings_for(
        store, str(cold), state, tiering__guard="none", tiering__segment_max_bytes="16K"
    )
    key = object_key(QueuePath(CLUSTER, BROKER, TOPIC, 1), SegmentKind.MANIFEST, 0)
    (cold / key).parent.mkdir(parents=True)
    (cold / key).write_text(json.dumps({"format_version": 4, "segment": {"start": 0}}))
    flags = ["--store", str(store), "--state-dir", str(state), "--cluster", CLUSTER,
             "--broker", BROKER]  # fmt: skip

    def status() -> dict[int, tuple[str, str]]:
        capsys.readouterr()
        assert main(["status", "--json", *flags]) == 0
        queues = json.loads(capsys.readouterr().out)["queues"]
        return {q["queue"]: (q["state"], q["note"]) for q in queues}

    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.catch_up()
        assert status()[1] == ("STOPPED", f"newer-format manifest at {key}")
    assert {q: s[0] for q, s in status().items()} == {0: "ACTIVE", 1: "STOPPED"}  # sidecar gone
    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)  # one more try from here
        # ... while reconcile's finding of the manifest shows (report_damage: DEGRADED)
        shown = status()
        assert (shown[0][0], shown[1][0]) == ("ACTIVE", "DEGRADED")
        assert key in shown[1][1] and "unsupported format_version" in shown[1][1]


def test_a_damaged_stopped_queues_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / stopped_file.FILE_NAME
    path.write_text('{"queues": [{"topic": "T"}]}')
    with pytest.raises(ConfigError, match=r"^not a stopped-queues file \(.*stopped-queues.json\)"):
        stopped_file.load(path)
    assert stopped_file.load(tmp_path / "absent.json") == {}
