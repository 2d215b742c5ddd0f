"""Upload bandwidth limit: writes wait for a shared :class:`TokenBucket`.

:class:`ThrottledBackend` makes every ``write`` (and ``create``: manifests) wait for
``len(data)`` tokens before it starts, and every ``write_chunks`` wait for each chunk's
tokens before handing the chunk on — so a streamed segment upload is paced chunk by
chunk instead of being delayed once and then sent at full speed. Reads, listings and
deletes pass straight through. A retried write waits again: its bytes cross the network
again.

``on_wait(seconds)`` (optional) is told every time a write had to wait.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable
from pathlib import Path

from tieredstore.backends.base import Backend
from tieredstore.backends.forwarding import ForwardingBackend
from tieredstore.ratelimit import TokenBucket

__all__ = ["ThrottledBackend"]


class ThrottledBackend(ForwardingBackend):
    """``inner`` whose writes are paced by ``bucket`` (see the module doc)."""

    def __init__(
        self,
        inner: Backend,
        bucket: TokenBucket,
        *,
        on_wait: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(inner)
        self.bucket = bucket
        self._on_wait = on_wait

    async def _take(self, n: int) -> None:
        waited = await self.bucket.acquire(n)
        if waited > 0 and self._on_wait is not None:
            self._on_wait(waited)

    async def write(self, key: str, data: bytes) -> None:
        await self._take(len(data))
        await self.inner.write(key, data)

    async def create(self, key: str, data: bytes) -> str:
        await self._take(len(data))
        return await self.inner.create(key, data)

    async def write_chunks(self, key: str, chunks: AsyncIterable[bytes]) -> int:
        async def paced() -> AsyncIterator[bytes]:
            async for chunk in chunks:
                await self._take(len(chunk))
                yield chunk

        return await self.inner.write_chunks(key, paced())

    async def write_file(
        self, key: str, path: Path, *, chunk_bytes: int, check: Callable[[], None]
    ) -> int:
        """Unlimited: the inner backend's own (possibly cheaper) way; limited: streamed
        and paced chunk by chunk."""
        if self.bucket.rate == 0:
            return await self.inner.write_file(key, path, chunk_bytes=chunk_bytes, check=check)
        return await super().write_file(key, path, chunk_bytes=chunk_bytes, check=check)
