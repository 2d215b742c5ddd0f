"""Writing an answer held as several buffers (views over cached parts) without joining it.

The read service's binary answers are a small head followed by records that are views
over the read-ahead cache's parts (:func:`tieredstore.cold.serving.encode_records`).
:func:`write_buffers` sends them with their exact ``Content-Length``, one buffer after
the other, each handed to the transport as it is: the socket takes what it can at once,
and only what it did not take is copied into the transport's buffer (until the client
reads it).
"""

from __future__ import annotations

from collections.abc import Sequence

from aiohttp import web

__all__ = ["write_buffers"]


async def write_buffers(
    request: web.Request, buffers: Sequence[bytes | memoryview], content_type: str
) -> web.StreamResponse:
    """Answer ``request`` with 200 and the concatenation of ``buffers`` as its body.

    The status and headers are sent with the first buffer: raise any error before
    calling this. A client that goes away mid-answer raises ``ConnectionResetError``
    from here (aiohttp logs it and closes the connection; nothing is left half-sent on
    a kept-alive connection).
    """
    response = web.StreamResponse(headers={"Content-Type": content_type})
    response.content_length = sum(len(b) for b in buffers)
    await response.prepare(request)
    for buffer in buffers:
        await response.write(buffer)
    await response.write_eof()
    return response
