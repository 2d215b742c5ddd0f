"""A class-data sharing archive for the Spark JVMs the suite starts (JDK AppCDS).

Every Spark driver JVM the suite starts (its SparkSession, each ``tieredstore verify``
and ``spark-submit`` subprocess, the bench scripts' smoke runs) loads the same few
thousand classes from the same jars. Parsing and verifying them is most of a short
JVM's start: measured on the project's 2-core host beside a full test run, a
``spark-submit`` of a one-line job took 7.0-7.2 CPU-s and 13-15 s without an archive,
3.9-4.9 CPU-s and 7-10 s with one.

:func:`spark_jvm_options` returns the JVM options with the archive, making it once per
machine (a small Spark job run with ``-XX:ArchiveClassesAtExit``, kept in the test
support's cache, :mod:`tests.support.cache`, under its lock, keyed by the JDK, the
pyspark jars and the options). Where the archive cannot be made or does not fit a JVM
(another classpath, another JDK; an archive whose making failed leaves a ``.failed``
note instead and is not tried again) the JVM runs as it would without it: the options ask
for it with ``-Xshare:auto`` (the default) and silence the JVM's CDS warnings, which it
prints on stdout. Nothing of the product uses it; it only makes the suite's JVMs start
faster.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

from tests.support.cache import cache_lock, cache_root

__all__ = ["BASE_JVM_OPTIONS", "spark_jvm_options"]

#: The Spark JVMs' own options in the suite: C1 only, one GC thread (short-lived JVMs on
#: two cores otherwise spend up to a third of a Spark test's time on C2 and GC threads).
BASE_JVM_OPTIONS: Final = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: The JVM reports an archive it cannot use on stdout (``[warning][cds]``), which would
#: reach the output a test reads.
_QUIET: Final = "-Xlog:cds*=off -Xlog:class+path=off"

#: The job whose classes go into the archive: what the verifier's jobs do in small
#: (a DataFrame from rows, ``mapInArrow`` in a Python worker, a shuffle, Parquet out
#: and back in).
_JOB: Final = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
df = spark.createDataFrame([(i % 7, i) for i in range(1000)], "k long, v long")
df = df.mapInArrow(lambda batches: batches, df.schema)
out = sys.argv[1]
df.groupBy("k").count().write.parquet(out)
assert spark.read.parquet(out).count() == 7
spark.stop()
"""


def spark_jvm_options() -> str:
    """:data:`BASE_JVM_OPTIONS` and, when the archive exists or can be made in the
    cache (:func:`~tests.support.cache.cache_root`), the options that use it. Blocks
    while another process makes it or holds the cache's lock."""
    archive = _archive_path(cache_root())
    if archive is None:
        return BASE_JVM_OPTIONS
    failed = archive.with_suffix(".failed")  # made once and failed: not tried again
    if not archive.is_file() and not failed.exists():
        with cache_lock():
            if not archive.is_file() and not failed.exists():
                _make(archive, failed)
    if not archive.is_file():
        return BASE_JVM_OPTIONS
    return f"{BASE_JVM_OPTIONS} -XX:SharedArchiveFile={archive} {_QUIET}"


def _archive_path(cache: Path) -> Path | None:
    """Where the archive of this JDK, these jars and these options lives (None: no JDK
    or no pyspark here)."""
    try:
        import pyspark
    except ImportError:
        return None
    try:
        java = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, timeout=60, check=True
        ).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    key = hashlib.sha256(
        "\n".join([java, pyspark.__version__, BASE_JVM_OPTIONS, *sorted(os.listdir(jars))]).encode()
    ).hexdigest()[:16]
    return cache / "spark-cds" / f"spark-{key}.jsa"


def _make(archive: Path, failed: Path) -> None:
    """Run :data:`_JOB` with ``-XX:ArchiveClassesAtExit`` into a temporary file and move
    it into place, removing the archives of other JDKs or jars; if the job fails, leave
    only ``failed`` (with its output) behind. ``spark-submit`` execs the JVM, so the wait
    ends when the JVM has written the archive and exited."""
    import pyspark

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.name}.tmp-{os.getpid()}")
    with tempfile.TemporaryDirectory(prefix="spark-cds-") as tmp:
        script = Path(tmp) / "job.py"
        script.write_text(_JOB)
        env = dict(
            os.environ,
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_SUBMIT_OPTS=f"{BASE_JVM_OPTIONS} -XX:ArchiveClassesAtExit={partial} {_QUIET}",
        )
        try:
            done = subprocess.run(
                [str(submit), str(script), str(Path(tmp) / "out")],
                env=env, capture_output=True, timeout=300, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            done = None
    if done is not None and done.returncode == 0 and partial.is_file():
        for stale in archive.parent.glob("spark-*.jsa"):
            stale.unlink()
        partial.rename(archive)
    else:
        partial.unlink(missing_ok=True)
        said = (
            "timed out"
            if done is None
            else (done.stdout + done.stderr).decode(errors="replace")[-3000:]
        )
        failed.write_text(f"making the class archive failed: {said}\n")
