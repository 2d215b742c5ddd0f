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


def test_an_archive_that_cannot_be_made_leaves_a_note_and_the_plain_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spark-submit cannot start its JVM: the options are the plain ones, and the note
    says why, so the next run does not spend its start-up trying again."""
    monkeypatch.setenv("TIEREDSTORE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))  # spark-class's java, not PATH's
    assert spark_jvm_options() == BASE_JVM_OPTIONS
    (note,) = (tmp_path / "cache" / "spark-cds").glob("*.failed")
    assert "making the class archive failed" in note.read_text()
    assert not list(note.parent.glob("*.jsa*"))
    note.write_text("kept")
    assert spark_jvm_options() == BASE_JVM_OPTIONS
    assert note.read_text() == "kept"  # not made again
