"""One writer per catalogue, enforced across processes; readers may join."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.sidecar.settings import BROKER, CLUSTER
from tieredstore.errors import CatalogueBusyError
from tieredstore.metadata.catalogue import Catalogue

HOLDER = textwrap.dedent(
    """
    import sys
    from tieredstore.metadata.catalogue import Catalogue
    with Catalogue.open(sys.argv[1], cluster=sys.argv[2], broker=sys.argv[3]) as cat:
        cat.queues.ensure("T", 0, 5)
        print("ready", flush=True)
        sys.stdin.read()  # hold the catalogue until the test closes our stdin
    """
)


@pytest.fixture
def holder(state_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """A second process that holds the catalogue for writing until told to stop."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state_dir), CLUSTER, BROKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        yield proc
        if proc.poll() is None:
            proc.kill()


def test_second_writer_is_refused_naming_the_holder(
    holder: subprocess.Popen[str], state_dir: Path
) -> None:
    with pytest.raises(CatalogueBusyError) as info:
        Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER)
    assert f"catalogue {state_dir / 'catalogue.sqlite3'} is in use by another process " in str(
        info.value
    )
    assert f"(pid {holder.pid})" in str(info.value)


def test_readers_open_beside_the_writer(holder: subprocess.Popen[str], state_dir: Path) -> None:
    with Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER, read_only=True) as reader:
        assert [(q.topic, q.init_offset) for q in reader.queues.all()] == [("T", 5)]


def test_lock_is_free_once_the_holder_exits(holder: subprocess.Popen[str], state_dir: Path) -> None:
    assert holder.stdin is not None
    holder.stdin.close()
    assert holder.wait() == 0
    with Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER) as cat:
        assert cat.queues.get("T", 0) is not None


def test_lock_is_free_after_the_holder_is_killed(
    holder: subprocess.Popen[str], state_dir: Path
) -> None:
    holder.kill()
    holder.wait()
    with Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER) as cat:
        assert cat.queues.get("T", 0) is not None  # committed data survived kill -9


def test_second_writer_in_the_same_process_is_refused(state_dir: Path) -> None:
    with (
        Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER),
        pytest.raises(CatalogueBusyError),
    ):
        Catalogue.open(state_dir, cluster=CLUSTER, broker=BROKER)
