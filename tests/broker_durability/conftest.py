"""One ASYNC_FLUSH broker for the durability tests, and two sidecars tiering it.

A package of its own (not ``tests/broker``), so this broker starts only after the
conformance broker has stopped: never two broker JVMs at once on a small machine.

Two sidecars tier the same store into two cold roots, one per durability rule:
``sync`` (the default) and ``checkpoint`` (see dispatcher/tiering/durability.py). Both cut
segments at 2 s of age with a 1 s tick, serve HTTP on a free loopback port (metrics),
and renew their leases every 30 s so a paused sidecar (SIGSTOP, while the broker's
power is "cut") still holds its lease when it resumes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.broker.rocketmq import (
    BrokerSettings,
    LocalCluster,
    missing_tools,
    prepare_toolchain,
)
from tests.support.broker.sidecar import LiveSidecar

TOPIC = "TieredStoreDurability"
QUEUES = 4
SEGMENT_MAX_AGE_S = 2.0
TICK_S = 1.0
#: RocketMQ's flushIntervalCommitLog default (FlushRealTimeService).
BROKER_FLUSH_INTERVAL_S = 0.5
#: RocketMQ's flushCommitLogThoroughInterval default: when ASYNC_FLUSH flushes a trickle.
BROKER_THOROUGH_FLUSH_S = 10.0


@dataclass(frozen=True)
class Durability:
    """The ASYNC_FLUSH cluster and its two sidecars (``sync`` and ``checkpoint``)."""

    cluster: LocalCluster
    sync: LiveSidecar
    checkpoint: LiveSidecar

    @property
    def sidecars(self) -> tuple[LiveSidecar, LiveSidecar]:
        return (self.sync, self.checkpoint)


def _overrides(guard: str) -> dict[str, str]:
    return {
        "TIEREDSTORE_TIERING_GUARD": guard,
        "TIEREDSTORE_TIERING_SEGMENT_MAX_AGE": f"{SEGMENT_MAX_AGE_S:g}s",
        "TIEREDSTORE_TIERING_TICK_INTERVAL": f"{TICK_S:g}s",
        "TIEREDSTORE_TIERING_INCLUDE_RETRY": "false",
        "TIEREDSTORE_HTTP_ENABLED": "true",
        "TIEREDSTORE_HTTP_PORT": "0",
        "TIEREDSTORE_READS_PORT": "0",
        "TIEREDSTORE_LEASE_RENEW_INTERVAL": "30s",
        # Per-queue segments: the lags are read from manifest times, and the power-cut
        # test checks that no manifest of a diverged queue was overwritten.
        "TIEREDSTORE_TIERING_BATCHING": "false",
    }


@pytest.fixture(scope="package")
def durability(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Durability]:
    missing = missing_tools()
    if missing:
        pytest.skip(f"real-broker tests need {', '.join(missing)} on PATH")
    toolchain = prepare_toolchain()
    settings = BrokerSettings(
        commitlog_file_size=256 << 10, max_message_size=64 << 10, flush_disk_type="ASYNC_FLUSH"
    )
    cluster = LocalCluster(toolchain, tmp_path_factory.mktemp("rocketmq-async"), settings)
    with cluster:
        cluster.create_topics({TOPIC: QUEUES})
        with (
            LiveSidecar.start(
                cluster, tmp_path_factory.mktemp("sync"), overrides=_overrides("sync")
            ) as sync,
            LiveSidecar.start(
                cluster, tmp_path_factory.mktemp("checkpoint"), overrides=_overrides("checkpoint")
            ) as checkpoint,
        ):
            yield Durability(cluster, sync, checkpoint)
