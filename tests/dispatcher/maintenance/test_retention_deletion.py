"""Executing retention: the fixed deletion order, a crash at every step, topic deletion,
purge, and the ``tieredstore expire`` command (rule 4 of
dispatcher/maintenance/retention.py's docstring)."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import pytest

from tests.dispatcher.conftest import TierExpiring
from tests.support.sidecar.lease_time import advance
from tests.support.sidecar.settings import BROKER, CLUSTER, location_args
from tests.support.stores.coldcheck import assert_cold_matches_hot, read_cold
from tests.support.stores.retention import END, SPEC, H, retention_settings
from tieredstore.backends import open_backend
from tieredstore.cli.main import main
from tieredstore.cli.sidecar.runtime import Runtime, open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.cold.layout import broker_prefix
from tieredstore.cold.manifest import FenceMarker
from tieredstore.dispatcher.maintenance.retention import DeletionStep, ExpireSegment
from tieredstore.errors import OffsetOutOfRangeError
from tieredstore.formats.topics import TopicConfig, encode_topics
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.metadata.rows import QueueState, SegmentRow, SegmentStatus


class CrashError(Exception):
    """Stands for the process dying between two steps."""


def _segment_objects(cold: Path) -> set[str]:
    prefix = cold / broker_prefix(CLUSTER, BROKER)
    return {
        p.relative_to(cold).as_posix()
        for p in prefix.rglob("*")
        if p.is_file()
        and not p.name.startswith(".")
        and not p.relative_to(prefix).parts[0].startswith("_")  # ours: lease, records, ...
    }


def _refs(seg: SegmentRow) -> tuple[str, str, str]:
    m = seg.manifest
    return (m.key, m.consume_queue_key, m.commit_log_key)


async def _assert_readers_see_whole_segments(rt: Runtime) -> None:
    """A catalogue reader and a manifest reader both see only whole segments."""
    for row in rt.catalogue.queues.all():
        for seg in rt.catalogue.segments.of(row.topic, row.queue_id):
            if seg.status is SegmentStatus.DELETING:
                with pytest.raises(OffsetOutOfRangeError):
                    rt.catalogue.segments.at(row.topic, row.queue_id, seg.start_offset)
    # Every manifest in the bucket has both objects, verified byte for byte.
    await assert_cold_matches_hot(rt.backend, rt.hot, CLUSTER, BROKER, expect_full=False)


# -- the order --------------------------------------------------------------------------
async def test_each_segment_is_deleted_in_the_fixed_order(
    store: Path, tmp_path: Path, tier_expiring: TierExpiring
) -> None:
    clock = VirtualClock(start_ms=END)
    await tier_expiring(tmp_path, clock)
    cold = tmp_path / "cold"
    seen: list[tuple[str, DeletionStep, tuple[bool, ...], str]] = []

    def observe(seg: SegmentRow, step: DeletionStep) -> None:
        exists = tuple((cold / key).exists() for key in _refs(seg))
        with Catalogue.open(
            tmp_path / "state", cluster=CLUSTER, broker=BROKER, read_only=True
        ) as c:
            rows = {s.start_offset: s for s in c.segments.of(seg.topic, seg.queue_id)}
        status = rows[seg.start_offset].status.value if seg.start_offset in rows else "gone"
        seen.append((str(seg), step, exists, status))

    clock.set_ms(END + int(2 * H * 1000))
    async with open_runtime(
        retention_settings(tmp_path), clock=clock, on_deletion_step=observe
    ) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        report = await rt.retention.run_pass()
        expired = report.expired
        assert expired and not report.destroyed
        first = str(expired[0].segment)
        steps = [(step, exists, status) for seg, step, exists, status in seen if seg == first]
        assert steps == [
            (DeletionStep.MARKED, (True, True, True), "DELETING"),
            (DeletionStep.MANIFEST, (False, True, True), "DELETING"),
            (DeletionStep.CONSUME_QUEUE, (False, False, True), "DELETING"),
            (DeletionStep.COMMIT_LOG, (False, False, False), "DELETING"),
            (DeletionStep.DROPPED, (False, False, False), "gone"),
        ]
        assert len(seen) == 5 * len(expired)
        assert rt.metrics.expired_segments._value.get() == len(expired)
        # Rule 3: every queue keeps exactly its newest segment; cold_min follows.
        for row in rt.catalogue.queues.all():
            (kept,) = rt.catalogue.segments.of(row.topic, row.queue_id)
            assert row.cold_min == kept.start_offset and row.cold_commit == kept.end_offset
        await _assert_readers_see_whole_segments(rt)
        cold_view = await read_cold(rt.backend, CLUSTER, BROKER)
        assert all(len(q.manifests) == 1 for q in cold_view.values())
    # Nothing left behind: every remaining segment object belongs to a manifest.
    remaining = _segment_objects(cold)
    assert len(remaining) == 3 * len(cold_view)


@pytest.mark.parametrize("crash_after", list(DeletionStep))
async def test_a_crash_after_any_step_is_finished_on_restart(
    store: Path, tmp_path: Path, crash_after: DeletionStep, tier_expiring: TierExpiring
) -> None:
    clock = VirtualClock(start_ms=END)
    await tier_expiring(tmp_path, clock)
    cold = tmp_path / "cold"
    victim: list[SegmentRow] = []

    def crash(seg: SegmentRow, step: DeletionStep) -> None:
        if step is crash_after:
            victim.append(seg)
            raise CrashError(f"after {step.value}")

    clock.set_ms(END + int(2 * H * 1000))
    async with open_runtime(
        retention_settings(tmp_path), clock=clock, on_deletion_step=crash
    ) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        planned = await rt.retention.plan()
        with pytest.raises(CrashError):
            await rt.retention.run_pass()
        (seg,) = victim
        # Readers never see a half-deleted segment, whatever step the crash followed.
        await _assert_readers_see_whole_segments(rt)
        with pytest.raises(OffsetOutOfRangeError):
            rt.catalogue.segments.at(seg.topic, seg.queue_id, seg.start_offset)
    # Restart: start() finishes the interrupted deletion before anything else.
    async with open_runtime(retention_settings(tmp_path), clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        rows = rt.catalogue.segments.of(seg.topic, seg.queue_id)
        assert all(s.status is SegmentStatus.COMMITTED for s in rows)
        assert seg.start_offset not in {s.start_offset for s in rows}
        assert not any((cold / key).exists() for key in _refs(seg))
        await _assert_readers_see_whole_segments(rt)
        # The next pass does the rest of what was planned, and nothing more.
        report = await rt.retention.run_pass()
        done = {str(d.segment) for d in report.expired} | {str(seg)}
        assert done == {str(d.segment) for d in planned if isinstance(d, ExpireSegment)}
        for row in rt.catalogue.queues.all():
            assert len(rt.catalogue.segments.of(row.topic, row.queue_id)) == 1
    assert len(_segment_objects(cold)) == 3 * 4  # one whole segment per queue, no leftovers


async def test_a_fence_marker_put_after_an_interrupted_deletion_stays(
    store: Path, tmp_path: Path, tier_expiring: TierExpiring
) -> None:
    """Retention crashed after deleting a manifest; GC then fenced that start (its
    objects were orphans). Finishing the deletion must not delete the marker: that
    would let a stale writer of an older epoch create a manifest there again."""
    clock = VirtualClock(start_ms=END)
    await tier_expiring(tmp_path, clock)
    cold = tmp_path / "cold"
    victim: list[SegmentRow] = []

    def crash(seg: SegmentRow, step: DeletionStep) -> None:
        if step is DeletionStep.MANIFEST:
            victim.append(seg)
            raise CrashError("after the manifest")

    clock.set_ms(END + int(2 * H * 1000))
    async with open_runtime(
        retention_settings(tmp_path), clock=clock, on_deletion_step=crash
    ) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        with pytest.raises(CrashError):
            await rt.retention.run_pass()
    (seg,) = victim
    m = seg.manifest
    marker = FenceMarker(m.cluster, m.broker, m.topic, m.queue_id, m.start_offset,
                         lease_epoch=m.lease_epoch, writer_id="gc@h", created_at_ms=1)  # fmt: skip
    (cold / m.key).write_bytes(marker.to_json())
    async with open_runtime(retention_settings(tmp_path), clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)  # finishes the deletion
        rows = rt.catalogue.segments.of(seg.topic, seg.queue_id)
        assert seg.start_offset not in {s.start_offset for s in rows}
    assert (cold / m.key).read_bytes() == marker.to_json()
    assert not (cold / m.commit_log_key).exists()
    assert not (cold / m.consume_queue_key).exists()


async def test_a_failed_backend_delete_is_finished_by_the_next_pass(
    store: Path, tmp_path: Path, tier_expiring: TierExpiring
) -> None:
    clock = VirtualClock(start_ms=END)
    await tier_expiring(tmp_path, clock)
    calls = {"n": 0}

    def flaky(_seg: SegmentRow, step: DeletionStep) -> None:
        calls["n"] += 1
        if step is DeletionStep.CONSUME_QUEUE and calls["n"] < 5:
            raise OSError("stands for a backend error the retry wrapper gave up on")

    clock.set_ms(END + int(2 * H * 1000))
    async with open_runtime(
        retention_settings(tmp_path), clock=clock, on_deletion_step=flaky
    ) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        with pytest.raises(OSError, match="backend error"):
            await rt.retention.run_pass()
        second = await rt.retention.run_pass()
        assert len(second.resumed) == 1
        for row in rt.catalogue.queues.all():
            assert len(rt.catalogue.segments.of(row.topic, row.queue_id)) == 1


# -- the sidecar runs it ------------------------------------------------------------------
async def test_the_sidecar_runs_retention_every_interval_and_resumes_at_start(
    store: Path, tmp_path: Path
) -> None:
    settings = retention_settings(tmp_path, retention__interval="45s")
    async with open_runtime(settings, clock=VirtualClock(start_ms=END)) as rt:
        (job,) = [j for j in rt.dispatcher.periodic if j.name == "retention"]
        assert job.interval == 45.0
        assert job.job == rt.retention.run_pass
        assert rt.dispatcher.startup == (rt.retention.resume,)


# -- topic deletion -------------------------------------------------------------------------
def _remove_topic(store: Path, topic: str) -> None:
    """What the broker does on deleteTopic: its consume queues and its topics.json entry."""
    shutil.rmtree(store / "consumequeue" / topic)
    names = [
        f"{SPEC.topic_prefix}{i}" for i in range(SPEC.topics) if f"{SPEC.topic_prefix}{i}" != topic
    ]
    topics = {n: TopicConfig(n, SPEC.queues, SPEC.queues) for n in names}
    (store / "config" / "topics.json").write_bytes(encode_topics(topics))


async def test_a_deleted_topic_keeps_its_cold_data_until_retention_passes(
    store: Path, tmp_path: Path, tier_expiring: TierExpiring
) -> None:
    clock = VirtualClock(start_ms=END)
    await tier_expiring(tmp_path, clock)
    _remove_topic(store, "SynthTopic0")
    async with open_runtime(retention_settings(tmp_path), clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        # Within retention: nothing of the gone topic is touched.
        await advance(rt.dispatcher.lease, clock, 0.5 * H)
        assert (await rt.retention.run_pass()).decisions == ()
        await advance(rt.dispatcher.lease, clock, 1 * H)
        report = await rt.retention.run_pass()
        assert {(d.topic, d.queue_id) for d in report.destroyed} == {
            ("SynthTopic0", 0),
            ("SynthTopic0", 1),
        }
        states = {(q.topic, q.queue_id): q for q in rt.catalogue.queues.all()}
        for qid in (0, 1):
            gone = states[("SynthTopic0", qid)]
            assert gone.state is QueueState.DELETED
            assert rt.catalogue.segments.of("SynthTopic0", qid) == []
            live = states[("SynthTopic1", qid)]
            assert live.state is QueueState.ACTIVE
            assert len(rt.catalogue.segments.of("SynthTopic1", qid)) == 1  # newest kept
        # A DELETED queue stays DELETED and is not planned again.
        assert (await rt.retention.run_pass()).decisions == ()
        tick = await rt.dispatcher.tick()
        assert tick.segments == tick.slices == 0
    keys = _segment_objects(tmp_path / "cold")
    assert not [k for k in keys if "/SynthTopic0/" in k]


async def test_a_topic_still_in_topics_json_is_not_destroyed(
    store: Path, tmp_path: Path, tier_expiring: TierExpiring
) -> None:
    clock = VirtualClock(start_ms=END)
    await tier_expiring(tmp_path, clock)
    shutil.rmtree(store / "consumequeue" / "SynthTopic0")  # topics.json still lists it
    async with open_runtime(retention_settings(tmp_path), clock=clock) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await advance(rt.dispatcher.lease, clock, 5 * H)
        report = await rt.retention.run_pass()
        assert not report.destroyed
        for q in rt.catalogue.queues.all():
            assert q.state is QueueState.ACTIVE
            assert len(rt.catalogue.segments.of(q.topic, q.queue_id)) == 1


# -- the command --------------------------------------------------------------------------
def _cli(tmp_path: Path, *args: str) -> list[str]:
    return [*args, *location_args(tmp_path / "store", tmp_path / "cold", tmp_path / "state")]


def _catalogue_view(tmp_path: Path) -> list[tuple[str, list[str]]]:
    with Catalogue.open(tmp_path / "state", cluster=CLUSTER, broker=BROKER, read_only=True) as c:
        return [
            (f"{q} {q.state.value} [{q.cold_min}, {q.cold_commit})",
             [f"{s} {s.status.value}" for s in c.segments.of(q.topic, q.queue_id)])
            for q in c.queues.all()
        ]  # fmt: skip


def _cold_bytes(tmp_path: Path) -> dict[str, bytes]:
    cold = tmp_path / "cold"
    return {
        p.relative_to(cold).as_posix(): p.read_bytes()
        for p in sorted(cold.rglob("*"))
        if p.is_file() and p.name != "_lease.json"
    }


def test_expire_dry_run_prints_what_and_why_and_changes_nothing(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], tier_expiring: TierExpiring
) -> None:
    asyncio.run(tier_expiring(tmp_path, VirtualClock(start_ms=END)))
    before = (_catalogue_view(tmp_path), _cold_bytes(tmp_path))
    at = END + int(2 * H * 1000)
    common = _cli(tmp_path, "expire", "--now", str(at), "--retention", "1h")
    assert main([*common, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert (_catalogue_view(tmp_path), _cold_bytes(tmp_path)) == before
    would = [line for line in out if line.startswith("would expire ")]
    # One line per queue, never one per segment: the segments are counted in each line.
    queues = [re.search(r"of queue (\S+):", line) for line in would]
    assert all(queues) and len({q[1] for q in queues if q}) == len(would)
    counted = sum(int(line.split()[2]) for line in would)
    assert counted > len(would) and out[-1].startswith(f"dry run: would expire {counted} segm")
    for line in would:
        assert re.match(r"would expire \d+ segments? \[\d+, \d+\) of queue SynthTopic", line)
        assert "newest max store timestamp " in line and ", age 2h" in line
        assert "retention 1h00m00.000s: older than retention" in line
    # The real pass at the same instant deletes exactly what the dry run listed.
    assert main(common) == 0
    done = [line for line in capsys.readouterr().out.splitlines() if line.startswith("expired ")]
    assert [d.removeprefix("expired ") for d in done[:-1]] == [
        w.removeprefix("would expire ") for w in would
    ]
    assert _catalogue_view(tmp_path) != before[0]


def test_expire_purge_needs_confirmation_and_a_topic_gone_from_the_broker(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], tier_expiring: TierExpiring
) -> None:
    asyncio.run(tier_expiring(tmp_path, VirtualClock(start_ms=END)))
    purge = _cli(tmp_path, "expire", "--topic", "SynthTopic0", "--purge")
    assert main(purge) == 3
    assert "add --confirm" in capsys.readouterr().err
    assert main([*purge, "--confirm"]) == 3
    assert "still exists in the broker" in capsys.readouterr().err
    _remove_topic(store, "SynthTopic0")
    before = _cold_bytes(tmp_path)
    assert main([*purge, "--dry-run"]) == 0
    assert "would destroy queue SynthTopic0/1: purged by the operator" in capsys.readouterr().out
    assert _cold_bytes(tmp_path) == before
    assert main([*purge, "--confirm"]) == 0
    out = capsys.readouterr().out
    assert "destroyed queue SynthTopic0/0: purged by the operator" in out
    # Its data is gone; its records beside the topics stay (history, never garbage).
    assert not [k for k in _cold_bytes(tmp_path) if "/SynthTopic0/" in k and "/_queues/" not in k]
    states = {line[0].split()[0]: line[0].split()[1] for line in _catalogue_view(tmp_path)}
    assert states == {
        "SynthTopic0/0": "DELETED",
        "SynthTopic0/1": "DELETED",
        "SynthTopic1/0": "ACTIVE",
        "SynthTopic1/1": "ACTIVE",
    }
    # The other topic's young data is untouched and still exact.
    cold = asyncio.run(_read(tmp_path))
    assert {q.topic for q in cold} == {"SynthTopic1"}


async def _read(tmp_path: Path) -> dict[QueueKey, object]:
    async with open_backend(str(tmp_path / "cold")) as backend:
        return dict(
            await assert_cold_matches_hot(
                backend, HotStore(tmp_path / "store"), CLUSTER, BROKER, expect_full=False
            )
        )
