"""Suite-wide pytest configuration: plugin fixtures shared by several test packages."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from tests.support.spark_archive import BASE_JVM_OPTIONS, spark_jvm_options

pytest_plugins = ["tests.fixtures_s3", "tests.fixtures_sidecar", "tests.fixtures_spark"]

#: Every Spark JVM the suite starts (its session, ``tieredstore verify`` and
#: ``spark-submit`` subprocesses, the bench scripts' smoke runs) compiles with C1 only
#: and collects garbage in one thread, as the broker JVMs of the suite do
#: (tests/support/broker/rocketmq.py), and, once a run holds a Spark or slow test, maps
#: its classes from a class-data sharing archive (:mod:`tests.support.spark_archive`).
#: Nothing outside the suite is changed; a ``SPARK_SUBMIT_OPTS`` of your own is kept.
#: (xdist's workers inherit the controller's environment: the default set here is ours.)
_OWN_SPARK_OPTS = os.environ.get("SPARK_SUBMIT_OPTS", BASE_JVM_OPTIONS) == BASE_JVM_OPTIONS
os.environ.setdefault("SPARK_SUBMIT_OPTS", BASE_JVM_OPTIONS)

_THIRD_PARTY = ("aiobotocore", "botocore", "botocore.auth", "s3fs", "fsspec", "urllib3", "py4j")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Keep every real-broker test on one xdist worker (``make test`` runs two with
    ``--dist loadgroup``): one broker JVM at a time on a small machine.

    ``tryfirst``: xdist turns the ``xdist_group`` mark into the test's group in its own
    ``pytest_collection_modifyitems``; a mark added after that is ignored, silently
    (tests/repo/test_xdist_groups.py)."""
    for item in items:
        if item.get_closest_marker("broker") is not None:
            item.add_marker(pytest.mark.xdist_group("rocketmq"))


def pytest_collection_finish(session: pytest.Session) -> None:
    """With a Spark or slow test to run, give the Spark JVMs the class archive (made on
    the first such run on a machine: about half a minute, under a lock that the other
    workers wait on)."""
    if _OWN_SPARK_OPTS and any(
        item.get_closest_marker("spark") or item.get_closest_marker("slow")
        for item in session.items
    ):
        os.environ["SPARK_SUBMIT_OPTS"] = spark_jvm_options()


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
