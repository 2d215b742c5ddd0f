"""One bad consume-queue directory never stops the other queues (issue 34, row 6).

The store holds a topic directory whose name is not valid UTF-8, a queue directory that
is no decimal queue id, and a new queue whose consume-queue file cannot be read (its
length is no multiple of 20). Before, the first raised during discovery (a traceback,
nothing tiered, and a long-running ``run`` crashed again on every restart) and the last
failed every new queue's initialisation with it. Now each is one ERROR line naming it,
the gauge counts them, and every other queue is tiered, tick after tick.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER, location_args, settings_for
from tieredstore.backends import open_backend
from tieredstore.cli.main import main
from tieredstore.cli.sidecar.runtime import open_runtime
from tieredstore.cold.history import BrokerHistory, load_history
from tieredstore.hot.synth import SynthSpec

SPEC = SynthSpec(topics=3, queues=2, messages=300, body_min=50, body_max=200, seed=6)


def _damage(store: Path) -> list[str]:
    """Three bad directories; return what each ERROR line must name."""
    cq = store / "consumequeue"
    os.rename(cq / "SynthTopic0", os.fsencode(cq) + b"/Bad\xff\xfeTopic")
    (cq / "SynthTopic1" / "\u00b2").mkdir()  # isdigit(), yet no queue id
    unreadable = cq / "SynthTopic1" / "7"
    unreadable.mkdir()
    (unreadable / ("0" * 20)).write_bytes(b"\x00" * 7 + b"\x01" + b"\x00" * 24)  # 32 bytes
    return [r"Bad\xff\xfeTopic", "SynthTopic1/\u00b2", "SynthTopic1/7"]


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_bad_directories_are_skipped_and_every_other_queue_is_tiered(
    store: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    names = _damage(store)
    settings = settings_for(store, str(tmp_path / "cold"), tmp_path / "state",
                            tiering__guard="none")  # fmt: skip
    async with open_runtime(settings) as rt:
        await rt.dispatcher.start(wait_for_lease=False)
        with caplog.at_level(logging.ERROR):
            await rt.dispatcher.catch_up()
            first = _errors(caplog)
            await rt.dispatcher.tick(flush=True)  # the next tick skips them quietly
            assert _errors(caplog) == first
        assert len(first) == 3, first
        for name in names:
            assert sum(name in line for line in first) == 1, (name, first)
        assert rt.dispatcher.metrics.queues_skipped._value.get() == 3
        tiered = {(r.topic, r.queue_id): r.cold_commit for r in rt.catalogue.queues.all()}
        assert set(tiered) == {(t, q) for t in ("SynthTopic1", "SynthTopic2") for q in (0, 1)}
        for (topic, queue), commit in tiered.items():
            assert commit == rt.hot.queue_range(topic, queue).max > 0


def test_run_once_exits_0_and_tiers_the_good_queues(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _damage(store)
    args = location_args(store, tmp_path / "cold", tmp_path / "state")
    assert main(["run", "--once", "--progress", "off", *args]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert r"Bad\xff\xfeTopic: topic name is not valid UTF-8" in err
    history = asyncio.run(_history(tmp_path / "cold"))
    assert {q.topic for q, h in history.queues.items() if h.links} == {"SynthTopic1", "SynthTopic2"}


async def _history(cold: Path) -> BrokerHistory:
    async with open_backend(str(cold)) as backend:
        return await load_history(backend, CLUSTER, BROKER)
