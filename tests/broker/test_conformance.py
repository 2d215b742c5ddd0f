"""Our store reader against a real Apache RocketMQ 5.3 broker (issue 3).

One broker for the session (``conftest.py``): ~5,200 messages with tags, keys, user
properties, compressed and uncompressed bodies, delay, timer, transactional and
retried messages. Every check of the conformance suite runs twice: on the store while
the broker runs, then after a clean stop. Classes run in file order, so the live
checks see the running broker.
"""

from __future__ import annotations

import pytest

from tests.support.broker.scenario import BrokerRun
from tests.support.broker.suite import ConformanceSuite, StoreView

pytestmark = pytest.mark.broker


class TestLiveStore(ConformanceSuite):
    """The store read while the broker is running."""

    @pytest.fixture
    def view(self, live_view: StoreView) -> StoreView:
        return live_view

    def test_broker_still_running(self, broker_run: BrokerRun) -> None:
        assert broker_run.cluster.running, broker_run.cluster.log_tail()


class TestStoreAfterCleanStop(ConformanceSuite):
    """The same store once the broker has shut down cleanly."""

    @pytest.fixture
    def view(self, stopped_view: StoreView) -> StoreView:
        return stopped_view

    def test_broker_stopped(self, broker_run: BrokerRun, stopped_view: StoreView) -> None:
        assert not broker_run.cluster.running
        assert not (broker_run.cluster.store_root / "abort").exists()
