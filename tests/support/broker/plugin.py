"""Build the broker read plugin (``broker-plugin/``) with Maven, as a user would.

:func:`build_plugin` copies the plugin's sources (its ``pom.xml`` and ``src/``) into a
staging directory under the harness cache, runs ``mvn package`` there and keeps the jar
as ``$TIEREDSTORE_CACHE/broker-plugin/plugin-<hash>.jar``, keyed by a hash of those
sources: the build runs once per change, and never writes into the repository.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

from tests.support.broker.rocketmq import HarnessError, _run
from tests.support.cache import cache_lock, cache_root

__all__ = ["PLUGIN_CLASS", "PLUGIN_DIR", "build_plugin", "plugin_sources"]

PLUGIN_DIR = Path(__file__).resolve().parents[3] / "broker-plugin"
PLUGIN_CLASS = "io.tieredstore.broker.TieredReadPlugin"
JAR_NAME = "tieredstore-broker-plugin.jar"


def plugin_sources() -> list[Path]:
    """The files the jar is built from (relative to ``broker-plugin/``), sorted."""
    files = [PLUGIN_DIR / "pom.xml", *sorted((PLUGIN_DIR / "src").rglob("*"))]
    return [f.relative_to(PLUGIN_DIR) for f in files if f.is_file()]


def build_plugin(rocketmq_version: str | None = None) -> Path:
    """The plugin jar for the current sources (built with ``mvn package`` when missing),
    compiled against ``rocketmq_version`` (``-Drocketmq.version``; default: the POM's)."""
    sources = plugin_sources()
    if not sources or not (PLUGIN_DIR / "pom.xml").is_file():
        raise HarnessError(f"no broker plugin sources in {PLUGIN_DIR}")
    digest = hashlib.sha256((rocketmq_version or "").encode() + b"\0")
    for rel in sources:
        digest.update(str(rel).encode() + b"\0" + (PLUGIN_DIR / rel).read_bytes() + b"\0")
    base = cache_root() / "broker-plugin"
    with cache_lock():
        return _build(sources, base / f"plugin-{digest.hexdigest()[:16]}.jar", rocketmq_version)


def _build(sources: list[Path], jar: Path, rocketmq_version: str | None) -> Path:
    """The body of :func:`build_plugin`, run under the cache lock."""
    base = jar.parent
    if jar.is_file():
        return jar
    staging = base / f"build.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    for rel in sources:
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PLUGIN_DIR / rel, staging / rel)
    try:
        _run(
            [
                "mvn",
                "-q",
                "-B",
                "-f",
                str(staging / "pom.xml"),
                "package",
                *([f"-Drocketmq.version={rocketmq_version}"] if rocketmq_version else []),
            ],
            timeout=540,  # below pytest-timeout (600 s), so the failure names mvn
            what="mvn package (broker-plugin)",
        )
        built = staging / "target" / JAR_NAME
        if not built.is_file():
            raise HarnessError(f"mvn package built no {JAR_NAME} in {staging / 'target'}")
        tmp = jar.with_suffix(f".tmp-{os.getpid()}")
        shutil.copyfile(built, tmp)
        tmp.rename(jar)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for stale in base.glob("plugin-*.jar"):  # builds of older sources (or other versions)
        if stale != jar and time.time() - stale.stat().st_mtime > 86400:
            stale.unlink(missing_ok=True)
    return jar
