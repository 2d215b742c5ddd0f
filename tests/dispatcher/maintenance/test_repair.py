"""Repair of a DIVERGED queue: keep the agreeing prefix, quarantine the rest (never
delete), truncate, resume; a crash at any point is finished by running repair again."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from tests.fixtures_sidecar import Diverge, RepairQueue
from tests.support.sidecar.settings import BROKER, CLUSTER, location_args
from tests.support.stores.coldcheck import assert_cold_matches_hot, read_cold
from tests.support.stores.divergence import KEPT, SPEC, TOPIC, divergence_settings
from tests.support.stores.segments import hot_batch, segment_of, upload
from tieredstore.backends import open_backend
from tieredstore.backends.base import Backend
from tieredstore.backends.forwarding import ForwardingBackend
from tieredstore.cli.main import main
from tieredstore.cli.sidecar.runtime import Runtime, open_runtime
from tieredstore.cold.history import span_bytes
from tieredstore.cold.layout import QueuePath
from tieredstore.cold.segment import verify_segment
from tieredstore.dispatcher.maintenance.repair import execute_repair, plan_repair
from tieredstore.dispatcher.tiering.quarantine import Agreement
from tieredstore.errors import ConfigError
from tieredstore.hot.store import HotStore
from tieredstore.hot.synth import generate_messages, synthesize
from tieredstore.metadata.rows import QueueState


class CrashError(Exception):
    """Stands for the process dying just before a backend call."""


class CrashingBackend(ForwardingBackend):
    """A real backend whose process 'dies' before the n-th matching write or delete."""

    def __init__(self, inner: Backend, *, op: str, nth: int) -> None:
        super().__init__(inner)
        self.op, self.nth = op, nth
        self.seen: Counter[str] = Counter()

    def _maybe_crash(self, op: str, key: str) -> None:
        relevant = "/_quarantine/" in key if op == "write" else not key.endswith("_lease.json")
        if op == self.op and relevant:
            self.seen[op] += 1
            if self.seen[op] == self.nth:
                raise CrashError(f"{op} {key}")

    async def write(self, key: str, data: bytes) -> None:
        self._maybe_crash("write", key)
        await self.inner.write(key, data)

    async def delete(self, key: str) -> None:
        self._maybe_crash("delete", key)
        await self.inner.delete(key)


def _agreeing(queue_id: int) -> int:
    """How many leading offsets of the queue the broker kept as they were."""
    plans = generate_messages(replace(SPEC, messages=KEPT))
    return sum(1 for p in plans if (p.topic, p.queue_id) == (TOPIC, queue_id))


def _objects(cold: Path) -> dict[str, bytes]:
    return {
        p.relative_to(cold).as_posix(): p.read_bytes()
        for p in sorted(cold.rglob("*"))
        if p.is_file() and p.name != "_lease.json"
    }


def _assert_quarantine_holds(originals: dict[str, bytes], cold: Path) -> None:
    """Every original object is in quarantine, byte for byte (under some stamp)."""
    quarantined = {k: v for k, v in _objects(cold).items() if "/_quarantine/" in k}
    for key, data in originals.items():
        kind_name = "/".join(key.rsplit("/", 2)[1:])
        copies = [v for k, v in quarantined.items() if k.endswith("/" + kind_name)]
        assert data in copies, f"{key} has no exact copy in quarantine"


@pytest.mark.slow
async def test_repair_keeps_the_agreeing_prefix_and_quarantines_the_rest(
    tmp_path: Path, diverge: Diverge
) -> None:
    await diverge(tmp_path)
    cold = tmp_path / "cold"
    async with open_runtime(divergence_settings(tmp_path)) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        for qid in (0, 1):
            segments = rt.catalogue.segments.of(TOPIC, qid)
            plan = await plan_repair(
                hot=rt.hot, backend=rt.backend, catalogue=rt.catalogue, topic=TOPIC, queue_id=qid
            )
            good = _agreeing(qid)
            *kept, first_bad = plan.checks
            assert all(c.agreement is Agreement.AGREES for c in kept) and kept
            assert first_bad.agreement is Agreement.DIFFERS
            assert f"at queue offset {good}" in first_bad.detail
            assert first_bad.link.start_offset == plan.cut <= good
            assert first_bad.link.end_offset > good
            moved = [s for s in segments if s.start_offset >= plan.cut]
            assert [m.start_offset for m in plan.moves] == sorted(
                (s.start_offset for s in moved), reverse=True
            )
            originals = {
                k: v
                for k, v in _objects(cold).items()
                if any(
                    k in (s.manifest.key, s.manifest.commit_log_key, s.manifest.consume_queue_key)
                    for s in moved
                )
            }
            assert len(originals) == 3 * len(moved)
            report = await execute_repair(
                plan,
                backend=rt.backend,
                catalogue=rt.catalogue,
                keys=rt.dispatcher.rounds.batcher.keys,
                clock=rt.dispatcher.clock,
            )
            assert report.row.state is QueueState.ACTIVE and report.row.cold_commit == plan.cut
            assert report.row.cold_cl_end == moved[0].cl_base
            assert not set(originals) & set(_objects(cold))  # moved away...
            _assert_quarantine_holds(originals, cold)  # ...never lost
            # Every segment's objects moved; with batching, the slices past the cut copied.
            assert len([m for m in report.moved if "/_batches/" not in m[0]]) == len(originals)
        # Resumed: the next pass re-tiers from the cut and cold covers hot exactly.
        tick = await rt.dispatcher.catch_up()
        assert not tick.diverged and tick.messages > 0
        await assert_cold_matches_hot(rt.backend, rt.hot, CLUSTER, BROKER)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("op", "nth"),
    [("write", 1), ("write", 3), ("write", 4), ("delete", 1), ("delete", 2), ("delete", 4)],
)
async def test_a_crash_anywhere_in_repair_is_finished_by_repairing_again(
    tmp_path: Path, op: str, nth: int, diverge: Diverge, repair_queue: RepairQueue
) -> None:
    await diverge(tmp_path)
    cold = tmp_path / "cold"
    originals = {k: v for k, v in _objects(cold).items() if f"/{TOPIC}/0/" in k}
    async with open_backend(str(cold)) as inner:
        crashing = CrashingBackend(inner, op=op, nth=nth)
        async with open_runtime(divergence_settings(tmp_path), backend=crashing) as rt:
            with pytest.raises(CrashError):
                await repair_queue(rt, 0)
            assert rt.catalogue.queues.get(TOPIC, 0).state is QueueState.DIVERGED  # type: ignore[union-attr]
            # The bucket's committed links are still a contiguous prefix, each whole.
            view = await read_cold(inner, CLUSTER, BROKER)
            for link in view[next(q for q in view if q.queue_id == 0)].manifests:
                cl = await span_bytes(inner, link.commit_log)
                verify_segment(link, cl, await span_bytes(inner, link.consume_queue))
    async with open_runtime(divergence_settings(tmp_path)) as rt:
        await repair_queue(rt, 0)  # the same command again finishes the job
        await _repair_other(rt)
        await rt.dispatcher.catch_up()
        await assert_cold_matches_hot(rt.backend, rt.hot, CLUSTER, BROKER)
    now = _objects(cold)
    gone = {k: v for k, v in originals.items() if now.get(k) != v}
    assert gone, "the repair moved nothing"
    _assert_quarantine_holds(gone, cold)


@pytest.mark.slow
async def test_a_committed_manifest_the_catalogue_never_adopted_is_quarantined(
    tmp_path: Path,
    diverge: Diverge,
) -> None:
    await diverge(tmp_path)
    async with open_runtime(divergence_settings(tmp_path)) as rt:
        row = rt.catalogue.queues.get(TOPIC, 0)
        assert row is not None
        # A writer committed one more segment but crashed before its catalogue caught up.
        queue = QueuePath(CLUSTER, BROKER, TOPIC, 0)
        seg = segment_of(queue, hot_batch(TOPIC, 0, row.cold_commit, 3), cl_base=row.cold_cl_end)
        stray = await upload(rt.backend, seg)
        await rt.dispatcher.start(wait_for_lease=False)  # reconcile does not adopt it: DIVERGED
        assert rt.catalogue.queues.get(TOPIC, 0) == row
        plan = await plan_repair(
            hot=rt.hot, backend=rt.backend, catalogue=rt.catalogue, topic=TOPIC, queue_id=0
        )
        assert plan.moves[0].start_offset == stray.start_offset
        assert "catalogue lacks" in plan.moves[0].why
        await execute_repair(
            plan,
            backend=rt.backend,
            catalogue=rt.catalogue,
            keys=rt.dispatcher.rounds.batcher.keys,
            clock=rt.dispatcher.clock,
        )
        assert not await rt.backend.exists(stray.key)
        await _repair_other(rt)
        await rt.dispatcher.catch_up()
        await assert_cold_matches_hot(rt.backend, rt.hot, CLUSTER, BROKER)


async def _repair_other(rt: Runtime) -> None:
    """Repair queue 1 with an already started runtime."""
    plan = await plan_repair(
        hot=rt.hot, backend=rt.backend, catalogue=rt.catalogue, topic=TOPIC, queue_id=1
    )
    await execute_repair(
        plan,
        backend=rt.backend,
        catalogue=rt.catalogue,
        keys=rt.dispatcher.rounds.batcher.keys,
        clock=rt.dispatcher.clock,
    )


async def test_offsets_the_broker_already_deleted_are_kept(
    tmp_path: Path, diverge: Diverge
) -> None:
    await diverge(tmp_path)
    store = tmp_path / "store"
    oldest = sorted((store / "commitlog").iterdir())[0]
    oldest.unlink()  # the broker's own retention removed its oldest commitlog file
    hot = HotStore(store)
    assert hot.queue_range(TOPIC, 0).min > 0
    async with open_runtime(divergence_settings(tmp_path)) as rt:
        plan = await plan_repair(
            hot=rt.hot, backend=rt.backend, catalogue=rt.catalogue, topic=TOPIC, queue_id=0
        )
    verdicts = [c.agreement for c in plan.checks]
    assert verdicts[0] is Agreement.HOT_GONE
    assert verdicts[-1] is Agreement.DIFFERS
    assert all(v.kept for v in verdicts[:-1])


async def test_repair_refuses_a_queue_that_is_not_diverged(tmp_path: Path) -> None:
    synthesize(tmp_path / "store", SPEC)
    async with open_runtime(divergence_settings(tmp_path)) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.catch_up()
        for topic, qid, message in ((TOPIC, 0, "is ACTIVE, not DIVERGED"), ("Nope", 0, "no queue")):
            with pytest.raises(ConfigError, match=message):
                await plan_repair(
                    hot=rt.hot,
                    backend=rt.backend,
                    catalogue=rt.catalogue,
                    topic=topic,
                    queue_id=qid,
                )


@pytest.mark.slow
def test_repair_command_dry_run_changes_nothing_then_repairs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], diverge: Diverge
) -> None:
    import asyncio

    asyncio.run(diverge(tmp_path))
    cold = tmp_path / "cold"
    before = _objects(cold)
    common = [
        *location_args(tmp_path / "store", cold, tmp_path / "state"),
        "--topic", TOPIC, "--queue", "1",
    ]  # fmt: skip
    assert main(["repair", "--dry-run", *common]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dry run: nothing changed\nqueue SynthTopic0/1: hot [0, ")
    assert "agrees with the hot store" in out and "differs from the hot store" in out
    assert "truncate the catalogue to offset" in out
    assert _objects(cold) == before
    assert main(["repair", *common]) == 0
    out = capsys.readouterr().out
    assert "moved " in out and "/_quarantine/SynthTopic0/1/" in out
    assert "queue SynthTopic0/1 is ACTIVE at cold offset" in out
    assert main(["repair", *common]) == 3  # ACTIVE now: nothing to repair
    assert "not DIVERGED" in capsys.readouterr().err
