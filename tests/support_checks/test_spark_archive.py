"""The Spark JVMs' class archive (tests/support/spark_archive.py): made once, used by the
suite's Spark JVMs, and silent where a JVM cannot use it."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.support.spark_archive import BASE_JVM_OPTIONS, spark_jvm_options

pytestmark = pytest.mark.spark


def test_the_suites_spark_jvms_get_the_archive() -> None:
    """conftest gives the archive to every Spark JVM of a run that holds a Spark test."""
    options = spark_jvm_options()
    assert options.startswith(BASE_JVM_OPTIONS)
    archive = next(o for o in shlex.split(options) if o.startswith("-XX:SharedArchiveFile="))
    assert Path(archive.split("=", 1)[1]).stat().st_size > 0
    if os.environ["SPARK_SUBMIT_OPTS"].startswith(BASE_JVM_OPTIONS):  # not one of your own
        assert os.environ["SPARK_SUBMIT_OPTS"] == options


def test_a_jvm_that_cannot_use_the_archive_says_nothing_and_runs(tmp_path: Path) -> None:
    """Another classpath than the archive's: the JVM runs without it and prints nothing
    on stdout, where it would reach the output a test reads."""
    options = shlex.split(spark_jvm_options())
    (tmp_path / "Hello.java").write_text(
        'class Hello { public static void main(String[] a) { System.out.print("hello"); } }'
    )
    done = subprocess.run(
        ["java", *options, "-cp", str(tmp_path), str(tmp_path / "Hello.java")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello"
