"""Suite-wide pytest configuration: plugin fixtures shared by several test packages."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

pytest_plugins = ["tests.fixtures_s3", "tests.fixtures_sidecar", "tests.fixtures_spark"]

#: Every Spark JVM the suite starts (its session, ``tieredstore verify`` and
#: ``spark-submit`` subprocesses, the bench scripts' smoke runs) compiles with C1 only
#: and collects garbage in one thread, as the broker JVMs of the suite do
#: (tieredstore/testing/broker/rocketmq.py): on two cores, short-lived JVMs otherwise spend up
#: to a third of a Spark test's time on C2 and GC threads. Nothing outside the suite
#: is changed.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

_THIRD_PARTY = ("aiobotocore", "botocore", "botocore.auth", "s3fs", "fsspec", "urllib3", "py4j")


#: The real-broker tests in two xdist groups, so that ``make test``'s two workers can run
#: them side by side (two broker JVM clusters at most; each cluster takes its own free
#: ports and temporary directories): ``tests/broker/`` (its package broker and the serving
#: plugin's clusters) in one, every other broker test (the power cut, the broker group,
#: the bench's consumer) in the other. One group alone was the suite's critical path: 26
#: minutes on one worker (CONTRIBUTING.md, "Running the tests").
BROKER_GROUPS = {"tests/broker/": "rocketmq-1"}
OTHER_BROKER_GROUP = "rocketmq-2"


def broker_group(nodeid: str) -> str:
    """The xdist group of the broker test ``nodeid``: all the tests of a package (which
    share its package-scoped broker) are in the same one."""
    for prefix, group in BROKER_GROUPS.items():
        if nodeid.startswith(prefix):
            return group
    return OTHER_BROKER_GROUP


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep the real-broker tests on two xdist groups (``make test`` runs two workers
    with ``--dist loadgroup``): at most two broker JVM clusters at a time.

    ``tryfirst``: xdist turns the ``xdist_group`` mark into the test's group in its own
    ``pytest_collection_modifyitems``; a mark added after that is ignored, silently
    (tests/repo/test_xdist_groups.py)."""
    for item in items:
        if item.get_closest_marker("broker") is not None:
            item.add_marker(pytest.mark.xdist_group(broker_group(item.nodeid)))


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """Commands run in-process call ``configure_logging``, which replaces the root
    handlers with one bound to the (per-test, captured) stderr. Put everything back so no
    later test logs into a closed stream."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in _THIRD_PARTY}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, lvl in levels.items():
        logging.getLogger(name).setLevel(lvl)
