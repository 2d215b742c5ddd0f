"""Memory specifics: the shared registry by name, the injected clock, reset."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tieredstore.backends import MemoryBackend, open_backend, reset_memory_stores
from tieredstore.errors import ConfigError, ObjectNotFoundError


@pytest.fixture(autouse=True)
def fresh_stores() -> Iterator[None]:
    reset_memory_stores()
    yield
    reset_memory_stores()


async def test_backends_of_one_name_share_objects() -> None:
    writer = open_backend("memory://shared")
    reader = MemoryBackend.from_url("memory://shared")
    other = MemoryBackend("other")

    await writer.write("k", b"v")

    assert await reader.read("k") == b"v"
    assert not await other.exists("k")


async def test_reset_forgets_every_store() -> None:
    await MemoryBackend("s").write("k", b"v")
    reset_memory_stores()
    with pytest.raises(ObjectNotFoundError):
        await MemoryBackend("s").read("k")


async def test_mtime_comes_from_the_injected_clock() -> None:
    now = [1_700_000_000.0]
    backend = MemoryBackend("clocked", clock=lambda: now[0])

    await backend.write("a", b"1")
    now[0] += 90.5
    await backend.write("b", b"2")

    assert [(i.key, i.mtime) for i in await backend.list()] == [
        ("a", 1_700_000_000.0),
        ("b", 1_700_000_090.5),
    ]


async def test_written_bytes_are_frozen() -> None:
    backend = MemoryBackend("frozen")
    data = bytearray(b"before")
    await backend.write("k", data)  # type: ignore[arg-type]  # callers may pass a bytearray
    data[:] = b"after!"
    assert await backend.read("k") == b"before"


def test_url_names_the_store() -> None:
    assert MemoryBackend.from_url("memory://a/b/").url == "memory://a/b"
    with pytest.raises(ConfigError):
        MemoryBackend.from_url("memory://")
    with pytest.raises(ConfigError):
        MemoryBackend.from_url("s3://x")
