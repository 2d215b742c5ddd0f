"""The one SparkSession of the test suite (session-scoped), for tests marked ``spark``.

Registered through ``pytest_plugins`` in ``tests/conftest.py``. ``local[2]`` (both cores
of the CI machine), two shuffle partitions, no UI, small driver memory, bound to
127.0.0.1; Python workers run this interpreter; its JVM options (C1 only, serial GC) are
``SPARK_SUBMIT_OPTS`` from ``tests/conftest.py``. The environment variables it sets are
restored when the session ends.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

__all__ = ["spark"]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    with pytest.MonkeyPatch.context() as mp:
        # Workers must run this venv's interpreter, not whatever `python3` is on PATH.
        mp.setenv("PYSPARK_PYTHON", sys.executable)
        mp.setenv("SPARK_LOCAL_IP", "127.0.0.1")
        session = (
            SparkSession.builder.master("local[2]")
            .appName("tieredstore-tests")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.driver.memory", "1g")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        try:
            yield session
        finally:
            session.stop()
