"""Fixtures of the verifier tests: one tiered synthetic store, copied per test to damage.

``pristine`` (session) is a synthetic hot store (3 topics × 2 queues, 3000 messages,
several commitlog and CQ files) tiered with the real segment codec into 100-message
segments under a local cold root. ``world`` gives each test its own copy of the cold
root (and, on request, of the hot store) so damage never leaks between tests.

:func:`sample_result` and :func:`history_run` build finished runs without Spark for the
report and publishing tests (``reporting/``, ``spark/test_quiet.py``,
``test_config_and_progress.py``): they are made of the verifier's own result types, so
they live here, not in ``tests.support`` (core layer, which never imports the
verifier).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.support.sidecar.settings import BROKER, CLUSTER
from tests.support.stores.coldimage import ColdImage, tier, write_local
from tieredstore.cli.main import main as cli_main
from tieredstore.clock import Clock
from tieredstore.cold.manifest import Manifest
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.verifier.cli import main as job_main
from tieredstore.verifier.outcome import Anomaly, QueueReport, Totals, VerificationResult
from tieredstore.verifier.vocabulary import Level, VerifyOptions

SPEC = SynthSpec(
    topics=3,
    queues=2,
    messages=3000,
    body_min=100,
    body_max=400,
    commitlog_file_size=256 << 10,
    cq_file_size=100 * CQ_UNIT_SIZE,
    seed=11,
)
SEGMENT_MESSAGES = 100


@dataclass(frozen=True)
class World:
    """A hot store and its cold copy; ``image`` says what was tiered (before damage)."""

    hot: Path
    cold: Path
    out: Path
    image: ColdImage

    def manifests(self, queue: QueueKey) -> list[Manifest]:
        return self.image.manifests[queue]

    def path(self, key: str) -> Path:
        return self.cold / key

    def verify(self, *flags: str, clock: Clock | None = None) -> tuple[int, dict[str, Any]]:
        """Run ``tieredstore verify`` in-process; return the exit code and report.json.

        With ``clock``, the run's time comes from it (``python -m tieredstore.verifier``'s entry
        point with the clock injected: the same job and flags).
        """
        argv = [
            "--hot",
            str(self.hot),
            "--cold",
            str(self.cold),
            "--cluster",
            CLUSTER,
            "--broker",
            BROKER,
            "--out",
            str(self.out),
            "--lag-allowance",
            "0",
            *flags,
        ]
        code = cli_main(["verify", *argv]) if clock is None else job_main(argv, clock=clock)
        report = self.out / "report.json"
        doc = json.loads(report.read_text()) if report.exists() else {}
        return code, doc


def delete_hot_head(world: World, queue: QueueKey, below: int) -> None:
    """Delete ``world``'s oldest commitlog files, as the broker does, until ``queue``'s
    hot min is at least ``below`` (``world`` must own its hot store: ``hot_copy``)."""
    hot = HotStore(world.hot)
    for f in sorted((world.hot / "commitlog").iterdir()):
        if hot.queue_range(queue.topic, queue.queue_id).min >= below:
            return
        f.unlink()
    raise AssertionError(f"hot min of {queue} stays below {below}")


@pytest.fixture(scope="session")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> World:
    base = tmp_path_factory.mktemp("verifier-pristine")
    synthesize(base / "hot", SPEC)
    image = tier(base / "hot", segment_messages=SEGMENT_MESSAGES)
    write_local(image, base / "cold")
    return World(base / "hot", base / "cold", base / "out", image)


@pytest.fixture
def world(pristine: World, tmp_path: Path, spark: SparkSession) -> World:
    # ``spark`` makes the suite's session the active one, which the command reuses.
    shutil.copytree(pristine.cold, tmp_path / "cold")
    return World(pristine.hot, tmp_path / "cold", tmp_path / "out", pristine.image)


@pytest.fixture
def hot_copy(world: World, tmp_path: Path) -> World:
    shutil.copytree(world.hot, tmp_path / "hot")
    return World(tmp_path / "hot", world.cold, world.out, world.image)


DAY_MS = 86_400_000


def sample_result(tmp_path: Path, anomalies: list[Anomaly]) -> VerificationResult:
    """A finished content-level run of one queue (``T<&>``, cold 0..90 of hot 0..100) with
    ``anomalies``: the report and publishing tests' input, built without Spark."""
    opts = VerifyOptions(
        hot=tmp_path,
        cold_url="s3://user:secret@bucket/prefix",
        cluster="C",
        broker="B",
        now_ms=1_700_000_000_000,
        level=Level.CONTENT,
    )
    queue = QueueReport(
        topic="T<&>",
        queue_id=0,
        hot_present=True,
        hot_min=0,
        hot_max=100,
        cold_min=0,
        cold_max=90,
        segments=3,
        cold_messages=90,
        cold_bytes=9000,
        lag_messages=10,
        lag_seconds=1.5,
        units_compared=90,
        bytes_compared=9000,
        cold_only=0,
        pending_objects=0,
    )
    totals = Totals(1, 3, 0, 9, 0, 0, 90, 9000, 0, 10)
    return VerificationResult(
        opts, (queue,), tuple(anomalies), totals, (), 1_700_000_000_000, 0, 10
    )


def history_run(tmp_path: Path, day: int, anomalies: list[Anomaly], lag: int) -> VerificationResult:
    """:func:`sample_result` as the run of ``day`` (days after the first), ``lag`` messages
    behind: one of a series of dated runs for ``history.html``."""
    base = sample_result(tmp_path, anomalies)
    finished = 1_700_000_000_000 + day * DAY_MS
    queue = replace(base.queues[0], lag_messages=lag, lag_seconds=float(lag))
    totals = replace(base.totals, lag_messages=lag, bytes_compared=day << 20)
    return replace(
        base, queues=(queue,), totals=totals, started_ms=finished - 1, finished_ms=finished
    )
