"""POSIX specifics: temp files, crash leftovers, the root boundary, mtimes from stat."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tieredstore.backends import PosixBackend, open_backend
from tieredstore.backends.posix import posix_root_from_url
from tieredstore.errors import BackendError, ConfigError, ObjectNotFoundError


def temp_name(name: str) -> str:
    return f".{name}.tmp-{uuid.uuid4().hex}"


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if ".tmp-" in p.name]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "cold"


async def test_writes_leave_only_the_object(root: Path) -> None:
    async with PosixBackend(root) as b:
        await b.write("q/0/seg", b"x" * 1000)
        await b.write("q/0/seg", b"y")

        async def chunks() -> AsyncIterator[bytes]:
            yield b"a" * (3 << 20)
            yield b"b"

        await b.write_chunks("q/1/seg", chunks())

    assert files_under(root) == ["q/0/seg", "q/1/seg"]
    assert (root / "q/0/seg").read_bytes() == b"y"


async def test_temp_files_are_not_objects(root: Path) -> None:
    (root / "q").mkdir(parents=True)
    (root / temp_name("top")).write_bytes(b"half")
    (root / "q" / temp_name("seg")).write_bytes(b"half")

    async with PosixBackend(root) as b:
        await b.write("q/real", b"whole")
        assert [i.key for i in await b.list()] == ["q/real"]
        assert [i.key for i in await b.list("q/.")] == []
        with pytest.raises(BackendError, match="temp file"):
            await b.read("q/" + temp_name("seg"))


async def test_leftover_temp_files_are_listed_and_removed_through_the_contract(
    root: Path,
) -> None:
    (root / "b" / "q").mkdir(parents=True)
    torn = "b/q/" + temp_name("seg")
    (root / torn).write_bytes(b"torn")
    (root / "b" / ".lease.json.lock").write_bytes(b"")  # replace()'s lock: not a leftover

    async with PosixBackend(root) as b:
        await b.write("b/q/seg", b"whole")
        leftovers = await b.list_leftovers("b/")
        assert [(i.key, i.size) for i in leftovers] == [(torn, 4)]
        assert await b.list_leftovers("other/") == []
        with pytest.raises(BackendError, match="not a leftover"):
            await b.delete_leftover("b/q/seg")  # an object is never deleted this way
        assert await b.read("b/q/seg") == b"whole"
        await b.delete_leftover(torn)
        await b.delete_leftover(torn)  # idempotent
        assert await b.list_leftovers() == []
        assert (root / "b" / ".lease.json.lock").exists()


async def test_a_crash_before_rename_leaves_no_object(root: Path) -> None:
    # What a writer killed between write and os.replace leaves behind.
    (root / "seg").mkdir(parents=True)
    (root / "seg" / temp_name("00000000000000000000")).write_bytes(b"torn")

    async with PosixBackend(root) as b:
        assert not await b.exists("seg/00000000000000000000")
        with pytest.raises(ObjectNotFoundError):
            await b.read("seg/00000000000000000000")
        assert await b.list() == []

        # The retry after restart writes the same deterministic name and succeeds.
        await b.write("seg/00000000000000000000", b"whole")
        assert await b.read("seg/00000000000000000000") == b"whole"
        assert [i.key for i in await b.list()] == ["seg/00000000000000000000"]


async def test_a_cancelled_stream_leaves_no_object_and_no_temp_file(root: Path) -> None:
    first_chunk_written = asyncio.Event()
    never = asyncio.Event()

    async def stalled() -> AsyncIterator[bytes]:
        yield b"x" * (2 << 20)  # above the flush size: reaches the temp file
        first_chunk_written.set()
        await never.wait()
        yield b"unreachable"

    async with PosixBackend(root) as b:
        task = asyncio.create_task(b.write_chunks("seg", stalled()))
        await first_chunk_written.wait()
        assert len(temp_files(root)) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not await b.exists("seg")

    assert files_under(root) == []


@pytest.mark.parametrize("key", ["../escape", "a/../../escape", "/etc/passwd", "..", "a/.."])
async def test_keys_cannot_leave_the_root(tmp_path: Path, key: str) -> None:
    root = tmp_path / "cold"
    async with PosixBackend(root) as b:
        with pytest.raises(BackendError, match="key"):
            await b.write(key, b"x")
        with pytest.raises(BackendError, match="key"):
            await b.read(key)
    assert files_under(tmp_path) == []


async def test_a_directory_is_not_an_object(root: Path) -> None:
    (root / "d").mkdir(parents=True)
    async with PosixBackend(root) as b:
        assert not await b.exists("d")
        with pytest.raises(ObjectNotFoundError):
            await b.read("d")
        await b.delete("d")  # not an object, so nothing to delete
        with pytest.raises(BackendError, match="write failed"):
            await b.write("d", b"x")
    assert (root / "d").is_dir()


async def test_a_file_in_the_way_of_a_directory_is_a_backend_error(root: Path) -> None:
    async with PosixBackend(root) as b:
        await b.write("a", b"file")
        assert not await b.exists("a/b")
        with pytest.raises(BackendError) as err:
            await b.write("a/b", b"x")
    assert not isinstance(err.value, ObjectNotFoundError)
    assert str(root / "a" / "b") in str(err.value)


async def test_mtime_comes_from_stat(root: Path) -> None:
    async with PosixBackend(root) as b:
        await b.write("k", b"x")
        os.utime(root / "k", ns=(1_700_000_000_250_000_000, 1_700_000_000_250_000_000))
        [info] = await b.list()
    assert info.mtime == 1_700_000_000.25


async def test_root_need_not_exist_until_the_first_write(root: Path) -> None:
    async with PosixBackend(root) as b:
        assert await b.list() == []
        assert not await b.exists("k")
        await b.write("deep/er/k", b"x")
    assert (root / "deep/er/k").read_bytes() == b"x"


@pytest.fixture
def read_only_root(root: Path) -> Iterator[Path]:
    root.mkdir()
    root.chmod(0o500)
    yield root
    root.chmod(0o700)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
async def test_permission_denied_is_a_backend_error(read_only_root: Path) -> None:
    async with PosixBackend(read_only_root) as b:
        with pytest.raises(BackendError, match="write failed"):
            await b.write("k", b"x")


def test_urls_and_plain_paths_name_the_same_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert posix_root_from_url(str(tmp_path / "c")) == tmp_path / "c"
    assert posix_root_from_url((tmp_path / "c d").as_uri()) == tmp_path / "c d"
    assert posix_root_from_url("file://localhost" + str(tmp_path / "c")) == tmp_path / "c"
    assert posix_root_from_url("relative/dir") == tmp_path / "relative" / "dir"
    backend = open_backend((tmp_path / "c d").as_uri())
    assert isinstance(backend, PosixBackend)
    assert backend.root == tmp_path / "c d"


@pytest.mark.parametrize("url", ["file://remote-host/x", "file://relative/x", "s3://b", ""])
def test_bad_posix_urls(url: str) -> None:
    with pytest.raises(ConfigError):
        posix_root_from_url(url)
