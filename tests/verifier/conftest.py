"""Fixtures of the verifier tests: one tiered synthetic store, copied per test to damage.

``pristine`` (session) is a synthetic hot store (3 topics × 2 queues, 3000 messages,
several commitlog and CQ files) tiered with the real segment codec into 100-message
segments under a local cold root. ``world`` gives each test its own copy of the cold
root (and, on request, of the hot store) so damage never leaks between tests.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tieredstore.cli.main import main as cli_main
from tieredstore.clock import Clock
from tieredstore.cold.manifest import Manifest
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.hot.store import HotStore, QueueKey
from tieredstore.hot.synth import SynthSpec, synthesize
from tieredstore.testing.coldimage import ColdImage, tier, write_local
from tieredstore.testing.settings import BROKER, CLUSTER
from verifier.cli import main as job_main

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

        With ``clock``, the run's time comes from it (``python -m verifier``'s entry point
        with the clock injected: the same job and flags).
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
