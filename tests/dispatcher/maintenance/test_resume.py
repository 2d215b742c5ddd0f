"""PAUSED queues: ``run --once`` fails, ``resume --accept-loss`` records the loss in cold and
tiering goes on from hot min (memory://, POSIX and S3 cold stores).

The store is the issue's reproduction: tier it, let the broker delete untiered head
files, append more; the queue goes PAUSED with the exact lost range.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from tests.support.moto import S3Bucket
from tests.support.sidecar.settings import BROKER, CLUSTER, location_args, settings_for
from tests.support.stores.lost_head import SPEC, TOPIC, lose_untiered_head
from tieredstore.backends import open_backend
from tieredstore.backends.memory import reset_memory_stores
from tieredstore.backends.options import BackendOptions
from tieredstore.cli.main import main
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.cold.layout import QueuePath, loss_key
from tieredstore.cold.loss import LossRecord, list_loss_records, write_loss_record
from tieredstore.cold.reader import ColdReader
from tieredstore.dispatcher.maintenance.gc import scan_garbage
from tieredstore.errors import OffsetOutOfRangeError
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import synthesize
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.reconcile import ReconcileReport, rebuild
from tieredstore.metadata.rows import QueueState
from tieredstore.settings.loader import Settings

QUEUE = QueuePath(CLUSTER, BROKER, TOPIC, 0)


@dataclass(frozen=True)
class Lost:
    """A store whose queue lost ``[start, end)`` before it was tiered, and its cold URL."""

    store: Path
    state: Path
    cold: str
    options: BackendOptions
    start: int
    end: int

    def settings(self) -> Settings:
        endpoint = self.options.endpoint_url or ""
        return settings_for(self.store, self.cold, self.state, cold__endpoint_url=endpoint)

    def args(self) -> list[str]:
        return location_args(self.store, self.cold, self.state)


@pytest.fixture(params=["memory", "posix", pytest.param("s3", marks=pytest.mark.s3)])
def lost(request: pytest.FixtureRequest, tmp_path: Path) -> Lost:
    store, state = tmp_path / "store", tmp_path / "state"
    synthesize(store, SPEC)
    options = BackendOptions()
    if request.param == "memory":
        reset_memory_stores()
        cold = "memory://resume"
    elif request.param == "posix":
        cold = str(tmp_path / "cold")
    else:
        bucket: S3Bucket = request.getfixturevalue("s3_bucket")
        cold = f"{bucket.url}/tiered"
        options = bucket.options()
        mp = request.getfixturevalue("monkeypatch")
        mp.setenv("TIEREDSTORE_COLD_ENDPOINT_URL", bucket.endpoint_url)
    assert main(["run", "--once", *location_args(store, cold, state)]) == 0
    start, end = lose_untiered_head(store)
    return Lost(store, state, cold, options, start, end)


def _status(lost: Lost, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    capsys.readouterr()
    assert main(["status", "--json", *lost.args()]) == 0
    (queue,) = json.loads(capsys.readouterr().out)["queues"]
    assert isinstance(queue, dict)
    return queue


async def _records(lost: Lost) -> list[LossRecord]:
    async with open_backend(lost.cold, options=lost.options) as backend:
        return await list_loss_records(backend, QUEUE)


@pytest.mark.slow
def test_a_paused_queue_fails_run_once_until_resume_records_the_loss(
    lost: Lost, capsys: pytest.CaptureFixture[str]
) -> None:
    # The pass that finds the loss, and every later one, exits non-zero.
    capsys.readouterr()
    assert main(["run", "--once", *lost.args()]) == 1
    assert f"deleted offsets [{lost.start}, {lost.end})" in capsys.readouterr().err
    assert main(["run", "--once", *lost.args()]) == 1
    assert "is PAUSED and not tiered" in capsys.readouterr().err
    status = _status(lost, capsys)
    assert status["state"] == "PAUSED"
    assert status["lost_unacknowledged"] == lost.end - lost.start
    assert (status["lost_accepted"], status["retention_headroom_bytes"]) == (0, 0)

    # Without --accept-loss: refused, the range named, nothing written.
    assert main(["resume", "--topic", TOPIC, "--queue", "0", *lost.args()]) == 3
    err = capsys.readouterr().err
    assert f"skips offsets [{lost.start}, {lost.end})" in err and "--accept-loss" in err
    assert asyncio.run(_records(lost)) == []
    assert _status(lost, capsys)["state"] == "PAUSED"

    # --dry-run shows the plan and changes nothing either.
    assert main(["resume", "--topic", TOPIC, "--queue", "0", "--dry-run", *lost.args()]) == 0
    assert f"offsets [{lost.start}, {lost.end})" in capsys.readouterr().out
    assert asyncio.run(_records(lost)) == []

    assert main(["resume", "--topic", TOPIC, "--queue", "0", "--accept-loss", *lost.args()]) == 0
    (record,) = asyncio.run(_records(lost))
    assert (record.start_offset, record.end_offset) == (lost.start, lost.end)
    assert record.key == loss_key(QUEUE, lost.start)
    assert record.writer_id and record.lease_epoch >= 1 and record.accepted_at_ms > 0
    assert f"resumed: queue offsets [{lost.start}, {lost.end})" in capsys.readouterr().err
    status = _status(lost, capsys)
    assert (status["state"], status["cold_commit"]) == ("ACTIVE", lost.end)
    assert (status["lost_unacknowledged"], status["lost_accepted"]) == (0, lost.end - lost.start)
    assert status["losses"] == [
        {"start": lost.start, "end": lost.end, "accepted_at_ms": record.accepted_at_ms,
         "writer_id": record.writer_id}
    ]  # fmt: skip

    # Tiering goes on from hot min; everything after the loss reaches cold.
    assert main(["run", "--once", *lost.args()]) == 0
    hot_max = HotStore(lost.store).queue_range(TOPIC, 0).max
    status = _status(lost, capsys)
    assert (status["cold_commit"], status["lag_messages"]) == (hot_max, 0)
    assert status["retention_headroom_bytes"] is None  # nothing untiered
    asyncio.run(_read_around_the_loss(lost, hot_max))


async def _read_around_the_loss(lost: Lost, hot_max: int) -> None:
    async with open_backend(lost.cold, options=lost.options) as backend:
        reader = ColdReader(backend, CLUSTER, BROKER)
        after = await reader.read(TOPIC, 0, lost.end, hot_max)
        assert [m.queue_offset for m in after] == list(range(lost.end, hot_max))
        before = await reader.read(TOPIC, 0, 0, lost.start + 10)
        assert [m.queue_offset for m in before] == list(range(lost.start))  # ends at the loss
        with pytest.raises(OffsetOutOfRangeError, match="deleted by the broker before"):
            await reader.read(TOPIC, 0, lost.start + 1, 1)
        # GC never takes a loss record for garbage, however old.
        gc = await scan_garbage(backend, cluster=CLUSTER, broker=BROKER, now_ms=2**62, grace_s=0)
        assert not gc.findings and loss_key(QUEUE, lost.start) not in {g.key for g in gc.garbage}


async def _gauges(lost: Lost) -> dict[str, float]:
    """One catch-up pass in process; the queue's loss gauges afterwards."""
    async with open_runtime(lost.settings()) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        report = await rt.dispatcher.catch_up()
        labels = (TOPIC, "0")
        m = rt.metrics
        return {
            "lost_reported": sum(x.end - x.start for x in report.lost),
            "unacknowledged": m.lost_unacknowledged.labels(*labels)._value.get(),
            "accepted": m.lost_accepted.labels(*labels)._value.get(),
            "paused": m.queue_state.labels(*labels, "PAUSED")._value.get(),
            "headroom": m.retention_headroom_bytes.labels(*labels)._value.get(),
        }


@pytest.mark.slow
def test_the_loss_gauges_and_a_second_resume(lost: Lost) -> None:
    n = lost.end - lost.start
    assert asyncio.run(_gauges(lost)) == {
        "lost_reported": n, "unacknowledged": n, "accepted": 0, "paused": 1, "headroom": 0
    }  # fmt: skip
    # A later pass (the queue stays PAUSED) keeps showing it.
    again = asyncio.run(_gauges(lost))
    assert (again["lost_reported"], again["unacknowledged"], again["paused"]) == (0, n, 1)
    assert main(["resume", "--topic", TOPIC, "--queue", "0", "--accept-loss", *lost.args()]) == 0
    # Resume again: the queue is ACTIVE, nothing to do (exit 3, one line).
    assert main(["resume", "--topic", TOPIC, "--queue", "0", "--accept-loss", *lost.args()]) == 3
    after = asyncio.run(_gauges(lost))
    assert (after["unacknowledged"], after["accepted"], after["paused"]) == (0, n, 0)
    assert after["headroom"] == float("inf")  # all tiered


async def _write_twice(lost: Lost, record: LossRecord, other: LossRecord) -> None:
    async with open_backend(lost.cold, options=lost.options) as backend:
        assert await write_loss_record(backend, record) == record
        # create-if-absent: a second write never replaces it
        assert await write_loss_record(backend, other) == record


@pytest.mark.slow
def test_a_resume_interrupted_after_the_record_is_finished_on_start(lost: Lost) -> None:
    assert main(["run", "--once", *lost.args()]) == 1  # PAUSED
    record = LossRecord.new(
        QUEUE, lost.start, lost.end, accepted_at_ms=1, writer_id="crashed", lease_epoch=1
    )
    other = LossRecord.new(
        QUEUE, lost.start, lost.end, accepted_at_ms=2, writer_id="x", lease_epoch=2
    )
    asyncio.run(_write_twice(lost, record, other))
    # The sidecar's start-up reconciliation adopts the record: the queue resumes.
    assert main(["run", "--once", *lost.args()]) == 0
    with Catalogue.open(lost.state, cluster=CLUSTER, broker=BROKER, read_only=True) as cat:
        assert cat.queues.losses() == [record]
        row = cat.queues.get(TOPIC, 0)
        assert row is not None and row.state is QueueState.ACTIVE


@pytest.mark.slow
def test_a_rebuilt_catalogue_keeps_the_accepted_loss(lost: Lost, tmp_path: Path) -> None:
    assert main(["run", "--once", *lost.args()]) == 1
    assert main(["resume", "--topic", TOPIC, "--queue", "0", "--accept-loss", *lost.args()]) == 0
    assert main(["run", "--once", *lost.args()]) == 0
    with Catalogue.open(lost.state, cluster=CLUSTER, broker=BROKER, read_only=True) as cat:
        before = (cat.queues.get(TOPIC, 0), cat.queues.losses(), cat.segments.of(TOPIC, 0))
    report = asyncio.run(_rebuild(lost, tmp_path / "rebuilt"))
    assert report.clean, report.findings
    assert [(x.start_offset, x.end_offset) for x in report.accepted] == [(lost.start, lost.end)]
    with Catalogue.open(tmp_path / "rebuilt", cluster=CLUSTER, broker=BROKER) as cat:
        row = cat.queues.get(TOPIC, 0)
        assert row is not None and before[0] is not None
        assert (row.cold_commit, row.cold_cl_end, row.state) == (
            before[0].cold_commit, before[0].cold_cl_end, QueueState.ACTIVE,
        )  # fmt: skip
        assert cat.queues.losses() == before[1]
        assert cat.segments.of(TOPIC, 0) == before[2]


async def _rebuild(lost: Lost, state: Path) -> ReconcileReport:
    async with open_backend(lost.cold, options=lost.options) as backend:
        return await rebuild(backend, state, cluster=CLUSTER, broker=BROKER)


def test_repair_quarantines_a_loss_record_at_or_after_its_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, cold, state = tmp_path / "store", tmp_path / "cold", tmp_path / "state"
    synthesize(store, SPEC)
    assert main(["run", "--once", *location_args(store, str(cold), state)]) == 0
    start, end = lose_untiered_head(store)
    where = location_args(store, str(cold), state)
    assert main(["run", "--once", *where]) == 1
    assert main(["resume", "--topic", TOPIC, "--queue", "0", "--accept-loss", *where]) == 0
    assert main(["run", "--once", *where]) == 0
    # The broker's store is replaced by another history: every tiered record differs.
    shutil.rmtree(store)
    other = synthesize(store, replace(SPEC, seed=99))
    other.append(2000)
    assert main(["run", "--once", *where]) == 1  # DIVERGED now ...
    assert main(["run", "--once", *where]) == 1  # ... and on every later pass
    assert "run `tieredstore repair --topic" in capsys.readouterr().err
    assert main(["repair", "--topic", TOPIC, "--queue", "0", *where]) == 0
    out = capsys.readouterr().out
    assert f"quarantine loss record {loss_key(QUEUE, start)}" in out
    assert not (cold / loss_key(QUEUE, start)).exists()
    moved = list(cold.rglob("_quarantine/*/*/*/LOSS/*.json"))
    assert [LossRecord.from_json(p.read_bytes(), where=str(p)).end_offset for p in moved] == [end]
    with Catalogue.open(state, cluster=CLUSTER, broker=BROKER, read_only=True) as cat:
        assert cat.queues.losses() == []
    assert main(["run", "--once", *where]) == 0  # re-tiered from the cut, no loss left
