"""Fixtures that run the sidecar in this process (``tieredstore.cli.sidecar.runtime``):
tier a store, make a queue diverge, repair it.

Registered for the whole suite through ``pytest_plugins`` in ``tests/conftest.py``: the
archive, core and dispatcher tests share them. They run the CLI's runtime (and the
dispatcher's repair), which ``tests.support`` (core layer) may not import, so they
are fixtures here; what they set up comes from ``tests.support``
(:mod:`~tests.support.sidecar.settings`, :mod:`~tests.support.stores.divergence`). Each
fixture is session-scoped and gives the function to call.

* ``tier``: ``await tier(store, cold, state, **overrides)`` tiers ``store`` completely
  into ``cold`` with the real dispatcher (small segments, no durability guard);
* ``diverge``: ``await diverge(tmp_path)`` writes the diverged store of
  :mod:`tests.support.stores.divergence` at ``tmp_path / "store"``, tiered before its
  broker lost and re-wrote the tail: both queues are DIVERGED;
* ``repair_queue``: ``await repair_queue(rt, queue_id)`` does what ``tieredstore repair``
  does to a queue of that store: start (lease, reconcile), plan, execute.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol

import pytest

from tests.support.sidecar.settings import settings_for
from tests.support.stores.divergence import SPEC, TOPIC, divergence_settings, rewrite_tail
from tieredstore.cli.sidecar.runtime import Runtime, open_runtime
from tieredstore.dispatcher.maintenance.repair import execute_repair, plan_repair
from tieredstore.hot.synth import synthesize

Diverge = Callable[[Path], Coroutine[Any, Any, None]]
RepairQueue = Callable[[Runtime, int], Coroutine[Any, Any, None]]


class Tier(Protocol):
    """The ``tier`` fixture's function."""

    async def __call__(self, store: Path, cold: str, state: Path, **overrides: object) -> None:
        """Tier ``store`` completely into ``cold`` (settings ``overrides`` on top)."""


async def _tier(store: Path, cold: str, state: Path, **overrides: object) -> None:
    settings = settings_for(store, cold, state, **{"tiering__guard": "none", **overrides})
    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        report = await rt.dispatcher.catch_up()
        assert not report.errors, report.errors


async def _diverge(tmp_path: Path) -> None:
    synthesize(tmp_path / "store", SPEC)
    async with open_runtime(divergence_settings(tmp_path)) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        await rt.dispatcher.catch_up()
    rewrite_tail(tmp_path / "store")
    async with open_runtime(divergence_settings(tmp_path)) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        report = await rt.dispatcher.catch_up()
        assert sorted(str(q) for q in report.diverged) == [f"{TOPIC}/0", f"{TOPIC}/1"]


async def _repair_queue(rt: Runtime, queue_id: int) -> None:
    await rt.dispatcher.start(wait_for_lease=False)
    plan = await plan_repair(
        hot=rt.hot, backend=rt.backend, catalogue=rt.catalogue, topic=TOPIC, queue_id=queue_id
    )
    await execute_repair(
        plan,
        backend=rt.backend,
        catalogue=rt.catalogue,
        keys=rt.dispatcher.rounds.batcher.keys,
        clock=rt.dispatcher.clock,
    )


@pytest.fixture(scope="session")
def tier() -> Tier:
    """Tier a store completely with the real dispatcher (see the module docstring)."""
    return _tier


@pytest.fixture(scope="session")
def diverge() -> Diverge:
    """Write and tier the diverged store at ``tmp_path / "store"`` (module docstring)."""
    return _diverge


@pytest.fixture(scope="session")
def repair_queue() -> RepairQueue:
    """Repair one queue of the diverged store as ``tieredstore repair`` does."""
    return _repair_queue
