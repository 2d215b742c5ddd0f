"""The verifier's SparkSession: the active one, or a local one started quietly.

A JVM started here writes everything it prints (log4j lines, the banner, JVM warnings,
the Python workers' stderr) to a log file when given one (``<out>/spark.log`` from the
command line), so the terminal shows only the verifier's own lines.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

__all__ = ["SPARK_LOG_NAME", "failure_line", "output_to", "spark_session", "under_spark_submit"]

_APP_NAME: Final = "tieredstore-verify"
#: Where a Spark JVM started by the verifier writes its output (inside ``--out``).
SPARK_LOG_NAME: Final = "spark.log"


def under_spark_submit() -> bool:
    # spark-submit starts the Python driver with a gateway to its own JVM.
    return "PYSPARK_GATEWAY_PORT" in os.environ


@contextmanager
def output_to(log_file: Path | None) -> Iterator[None]:
    """Point this process's stdout and stderr (file descriptors 1 and 2) at ``log_file``
    for the duration, then put them back.

    A JVM started meanwhile inherits the log file as its stdout and stderr for good, and
    so do the Python workers it starts; this process gets its terminal back at once.
    """
    if log_file is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = (os.dup(1), os.dup(2))
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


@contextmanager
def spark_session(
    master: str | None, *, log_file: Path | None = None, log_level: str = "ERROR"
) -> Iterator[SparkSession]:
    """Yield a SparkSession: the active one if there is one (left running), else a new
    one (stopped at exit). ``master`` None means ``local[*]``, or spark-submit's choice.

    A JVM started here prints into ``log_file`` (appended to) when one is given, else on
    this terminal (spark-submit's JVM already runs: its output is its own). Spark logs
    at ``log_level`` from then on. Python workers are reused across tasks; with a local
    master they start from :mod:`tieredstore.verifier.spark.pydaemon`.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    # Python workers must run this interpreter (our venv), not whatever `python3` is.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
    builder = SparkSession.builder.appName(_APP_NAME)
    if master is None and not under_spark_submit():
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):
        # Spark binds to loopback anyway; saying so spares the "hostname resolves to a
        # loopback address" warning.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "8")
            # Workers run this interpreter, which imports PySpark's installed bytecode
            # (verifier/spark/pydaemon.py) rather than compiling pyspark.zip in each worker.
            .config("spark.python.daemon.module", "tieredstore.verifier.spark.pydaemon")
        )
    # One Python worker per core for the whole run, not one per task (Spark's default,
    # said here because each fresh worker costs a second of imports).
    builder = builder.config("spark.python.worker.reuse", "true")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    with output_to(None if under_spark_submit() else log_file):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    try:
        yield spark
    finally:
        spark.stop()


_SPARK_REASON = re.compile(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$", re.MULTILINE)


def failure_line(exc: BaseException) -> str:
    """A failed run's reason in one line: the Python error dug out of a Spark task
    failure when there is one, else the error's first line (its type when empty)."""
    text = str(exc)
    found = _SPARK_REASON.findall(text)
    if isinstance(exc, PySparkException | Py4JError) and found:
        name, message = found[-1]
        return f"Spark job failed: {name}: {message.strip()}"
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__
