"""CountingBackend: requests and bytes per operation, per call and (S3) per HTTP request."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator

import pytest

from tests.support.moto import S3Bucket
from tieredstore.backends.counting import CountingBackend
from tieredstore.backends.memory import MemoryBackend, reset_memory_stores
from tieredstore.backends.retry import RetryingBackend, RetryPolicy
from tieredstore.backends.s3 import S3Backend
from tieredstore.errors import ObjectNotFoundError

MiB = 1 << 20


class Tally:
    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()

    def counting(self, inner: MemoryBackend | S3Backend) -> CountingBackend:
        return CountingBackend(
            inner,
            on_request=lambda op: self.requests.update([op]),
            on_bytes=lambda op, n: self.bytes.update({op: n}),
        )


async def _chunks(data: bytes, step: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), step):
        yield data[i : i + step]


async def test_every_call_is_a_request_and_payload_bytes_are_counted() -> None:
    reset_memory_stores()
    tally = Tally()
    backend = tally.counting(MemoryBackend.from_url("memory://counting"))
    await backend.write("a", b"x" * 100)
    assert await backend.write_chunks("b", _chunks(b"y" * 1000, 300)) == 1000
    assert await backend.read("a", 10, 60) == b"x" * 50
    assert await backend.read_exact("b", 0, 10) == b"y" * 10
    assert await backend.size("a") == 100
    assert await backend.exists("nope") is False
    assert [o.key for o in await backend.list()] == ["a", "b"]
    await backend.delete("a")
    with pytest.raises(ObjectNotFoundError):
        await backend.read("a")  # a failed request is still a request, with no bytes
    assert tally.requests == {
        "write": 2, "read": 3, "size": 1, "exists": 1, "list": 1, "delete": 1,
    }  # fmt: skip
    assert tally.bytes == {"write": 1100, "read": 60}


@pytest.mark.s3
async def test_s3_requests_are_counted_as_s3_bills_them(s3_bucket: S3Bucket) -> None:
    """A multipart write is create + parts + complete, each a request; a retried request
    counts every attempt because the counter sits inside the retry wrapper."""
    tally = Tally()
    s3 = S3Backend(s3_bucket.url, s3_bucket.options(multipart_threshold=5 * MiB))
    async with RetryingBackend(tally.counting(s3), RetryPolicy()) as backend:
        await backend.write("small", b"s" * 1000)
        assert tally.requests == {"write": 1}
        data = b"m" * (11 * MiB)
        assert await backend.write_chunks("big", _chunks(data, MiB)) == len(data)
        # 11 MiB in 5 MiB parts: create, 3 parts, complete.
        assert tally.requests == {"write": 1 + 5}
        assert await backend.exists("big") and await backend.size("small") == 1000
        assert await backend.read("small", 0, 10) == b"s" * 10
        assert len(await backend.list()) == 2
        await backend.delete("small")
    assert tally.requests == {"write": 6, "size": 2, "read": 1, "list": 1, "delete": 1}
    assert tally.bytes == {"write": 1000 + 11 * MiB, "read": 10}
