"""Fixtures for the catalogue tests: a catalogue in a temporary state dir, a virtual clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.clock import VirtualClock
from tieredstore.metadata.catalogue import Catalogue


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(start_ms=1_700_000_100_000)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def catalogue(state_dir: Path, clock: VirtualClock) -> Iterator[Catalogue]:
    with Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER, clock=clock) as cat:
        yield cat
