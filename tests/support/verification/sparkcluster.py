"""A Spark standalone cluster on loopback: one master and two workers, each its own JVM,
started with the installed pyspark's ``spark-class`` (the suite's fleet test, the bench).

Small on purpose (the machine is shared): every worker offers one core and 512 MiB, the
daemons get 256 MiB each, and every JVM compiles with C1 only (``SPARK_SUBMIT_OPTS`` of
the suite, reused as the daemons' and executors' options). :func:`standalone_cluster`
waits until both workers have registered (the master's ``/json`` status page) and stops
the three processes it started, by their ids, on the way out.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.support.spark_archive import BASE_JVM_OPTIONS

__all__ = ["SparkCluster", "spark_bin", "standalone_cluster"]

_READY_S: Final = 120.0


def spark_bin(name: str) -> Path:
    """A launcher of the installed pyspark (``spark-class``, ``spark-submit``)."""
    return Path(sys.executable).parent / name


@dataclass(frozen=True)
class SparkCluster:
    master_url: str
    web_url: str
    workers: int
    env: dict[str, str]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive_workers(web_url: str) -> int:
    """Workers the master lists as ALIVE; 0 while its web UI is not up. A UI still
    starting may answer ``/json/`` with its HTML page (its handlers are attached one by
    one): not up yet either."""
    try:
        with urllib.request.urlopen(f"{web_url}/json/", timeout=2) as r:
            doc = json.load(r)
    except (OSError, ValueError):  # ValueError: JSONDecodeError of the HTML page
        return 0
    return sum(1 for w in doc.get("workers", []) if w.get("state") == "ALIVE")


@contextmanager
def standalone_cluster(work: Path, *, workers: int = 2) -> Iterator[SparkCluster]:
    """Start a master and ``workers`` workers under ``work``; yield once all registered."""
    opts = os.environ.get("SPARK_SUBMIT_OPTS", BASE_JVM_OPTIONS)
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_DAEMON_JAVA_OPTS=opts,
        SPARK_DAEMON_MEMORY="256m",
        SPARK_SUBMIT_OPTS=opts,
        SPARK_LOG_DIR=str(work / "logs"),
        SPARK_PID_DIR=str(work),
    )
    port, web = _free_port(), _free_port()
    master_url, web_url = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web}"
    spark_class = str(spark_bin("spark-class"))
    with ExitStack() as stack:

        def start(name: str, *args: str) -> None:
            log = stack.enter_context((work / f"{name}.log").open("wb"))
            proc = subprocess.Popen([spark_class, *args], env=env, stdout=log, stderr=log)
            stack.callback(_stop, proc)

        work.mkdir(parents=True, exist_ok=True)
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
              "--port", str(port), "--webui-port", str(web))  # fmt: skip
        for i in range(workers):
            start(
                f"worker{i}", "org.apache.spark.deploy.worker.Worker", master_url,
                "--host", "127.0.0.1", "--cores", "1", "--memory", "512m",
                "--webui-port", str(_free_port()), "--work-dir", str(work / f"worker{i}"),
            )  # fmt: skip
        deadline = time.monotonic() + _READY_S
        while _alive_workers(web_url) < workers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standalone cluster did not start: see {work}/*.log")
            time.sleep(0.2)  # polling an external process's readiness, not synchronising ours
        yield SparkCluster(master_url, web_url, workers, env)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
