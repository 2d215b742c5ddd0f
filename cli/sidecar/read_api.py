"""The sidecar's read API: message contents from cold, on a listener of its own.

=========================  ===============================================================
endpoint                   answer
=========================  ===============================================================
``GET /v1/messages``       messages from cold as JSON, as ``tieredstore read``
``GET /v1/cold/range``     binary ``TSQ1``: the queue's cold min/commit, earliest time
``GET /v1/cold/records``   binary ``TSR1``: raw records and their CQ units from an offset
``GET /v1/cold/offset``    binary ``TSO1``: the queue offset for a store time
=========================  ===============================================================

The binary answers are the broker plugin's (``broker-plugin/``); their format is in
:mod:`tieredstore.cold.serving` and ``docs/serving.md``. Every endpoint takes ``topic`` and
``queue``.

* ``/v1/messages``: ``offset`` *or* ``timestamp`` (epoch ms, with
  ``boundary=lower|upper``, default lower), and ``count`` (default 1, at most
  ``max_count``). A reply also stops once it holds ``max_bytes`` of records (at least one
  message); ``nextOffset`` says where to continue.
* ``/v1/cold/records``: ``offset``, ``maxCount`` (1..``max_count``, default 32) and
  ``maxBytes`` (default and cap ``max_bytes``).
* ``/v1/cold/offset``: ``timestamp`` and ``boundary`` as above.

Errors are JSON ``{"error": ...}``: 400 for a bad parameter or name, 404 for an offset
outside what cold holds (or a queue cold holds nothing of, for ``/v1/cold/offset``), 503
while the cold store is unreachable, 500 for damaged cold data. ``/v1/cold/range`` answers
an empty range, never 404, for a queue cold does not hold. There is no write endpoint.

Everything is read from manifests (:class:`~tieredstore.cold.reader.ColdReader`), never from
the catalogue and without the writer lease, so a standby sidecar serves too. Segment
objects are read through the read-ahead cache (``reads.cache_bytes``,
``reads.part_bytes``; :mod:`tieredstore.cold.readahead`).

This listener (``reads.bind``/``reads.port``) is loopback by default and must stay inside
the pod: it has no authentication, and it returns message bodies.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web

from tieredstore.cli.sidecar.buffers import write_buffers
from tieredstore.cli.sidecar.runtime import Runtime
from tieredstore.cold.readahead import ReadAhead
from tieredstore.cold.reader import BoundaryType, ColdMessage, ColdReader
from tieredstore.cold.serving import (
    ServingReader,
    encode_offset,
    encode_range,
    encode_records,
    read_raw,
)
from tieredstore.errors import (
    InvalidNameError,
    OffsetOutOfRangeError,
    RetryableError,
    TieredStoreError,
)

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_COUNT", "build_read_app", "reader_for"]

log = logging.getLogger(__name__)

DEFAULT_MAX_COUNT: Final = 1000
#: A reply stops after the message that brings it to this many record bytes.
DEFAULT_MAX_BYTES: Final = 16 << 20
_RECORDS_COUNT: Final = 32
_BINARY: Final = "application/octet-stream"
#: How long a queue's manifest listing is reused by the read service (seconds).
LISTING_TTL: Final = 1.0

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _BadRequestError(Exception):
    """A query parameter that cannot be used (answered with 400)."""


def _int_param(request: web.Request, name: str, *, default: int | None = None) -> int:
    text = request.query.get(name)
    if text is None:
        if default is None:
            raise _BadRequestError(f"missing parameter {name!r}")
        return default
    try:
        value = int(text)
    except ValueError as exc:
        raise _BadRequestError(f"parameter {name!r} is not an integer: {text!r}") from exc
    if value < 0:
        raise _BadRequestError(f"parameter {name!r} must be >= 0, got {value}")
    return value


def _bounded(request: web.Request, name: str, default: int, cap: int) -> int:
    value = _int_param(request, name, default=default)
    if not 1 <= value <= cap:
        raise _BadRequestError(f"parameter {name!r} must be in 1..{cap}, got {value}")
    return value


def _queue(request: web.Request) -> tuple[str, int]:
    topic = request.query.get("topic")
    if not topic:
        raise _BadRequestError("missing parameter 'topic'")
    return topic, _int_param(request, "queue")


def _boundary(request: web.Request) -> BoundaryType:
    try:
        return BoundaryType(request.query.get("boundary", "lower"))
    except ValueError as exc:
        raise _BadRequestError("parameter 'boundary' must be lower or upper") from exc


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def reader_for(rt: Runtime) -> ColdReader:
    """The read service's reader over ``rt``'s cold store, with its read-ahead cache."""
    metrics = rt.metrics
    readahead = ReadAhead(
        rt.backend,
        capacity_bytes=rt.settings.reads.cache_bytes,
        part_bytes=rt.settings.reads.part_bytes,
        on_fetch=metrics.readahead_fetched.inc,
    )
    metrics.readahead_bytes.set_function(lambda: readahead.stats.bytes)
    return ServingReader(
        rt.backend, rt.settings.cold.cluster, rt.settings.cold.broker, readahead=readahead,
        listing_ttl=LISTING_TTL,
    )  # fmt: skip


class _ReadApi:
    """Request handlers over one reader."""

    def __init__(self, rt: Runtime, reader: ColdReader, max_count: int, max_bytes: int) -> None:
        self.rt = rt
        self.reader = reader
        self.max_count = max_count
        self.max_bytes = max_bytes

    def answer(self, endpoint: str, handler: _Handler) -> _Handler:
        """``handler`` with errors mapped to statuses and every outcome counted."""
        counter = self.rt.metrics.read_requests

        async def wrapped(request: web.Request) -> web.StreamResponse:
            try:
                reply = await handler(request)
            except (_BadRequestError, InvalidNameError) as exc:
                counter.labels(endpoint, "bad_request").inc()
                return _error(400, str(exc))
            except OffsetOutOfRangeError as exc:
                counter.labels(endpoint, "out_of_range").inc()
                return _error(404, str(exc))
            except RetryableError as exc:
                counter.labels(endpoint, "unavailable").inc()
                return _error(503, f"cold store unavailable: {exc}")
            except TieredStoreError as exc:
                counter.labels(endpoint, "error").inc()
                log.error("%s failed: %s", endpoint, exc)
                return _error(500, str(exc))
            counter.labels(endpoint, "ok").inc()
            return reply

        return wrapped

    async def range(self, request: web.Request) -> web.StreamResponse:
        topic, queue = _queue(request)
        rng = await self.reader.range(topic, queue)
        first = await self.reader.first_link(topic, queue) if rng.count else None
        earliest = first.min_store_timestamp if first is not None else 0
        return web.Response(body=encode_range(rng, earliest), content_type=_BINARY)

    async def records(self, request: web.Request) -> web.StreamResponse:
        topic, queue = _queue(request)
        offset = _int_param(request, "offset")
        count = _bounded(request, "maxCount", _RECORDS_COUNT, self.max_count)
        size = _bounded(request, "maxBytes", self.max_bytes, self.max_bytes)
        batch = await read_raw(self.reader, topic, queue, offset, count, size)
        rng = await self.reader.range(topic, queue)  # the listing read_raw just used
        self.rt.metrics.read_bytes.inc(batch.size)
        return await write_buffers(request, encode_records(batch, rng), _BINARY)

    async def offset(self, request: web.Request) -> web.StreamResponse:
        topic, queue = _queue(request)
        timestamp = _int_param(request, "timestamp")
        found = await self.reader.offset_by_time(topic, queue, timestamp, _boundary(request))
        rng = await self.reader.range(topic, queue)
        return web.Response(body=encode_offset(found, rng), content_type=_BINARY)

    async def messages(self, request: web.Request) -> web.StreamResponse:
        topic, queue = _queue(request)
        count = _bounded(request, "count", 1, self.max_count)
        has_offset, has_time = "offset" in request.query, "timestamp" in request.query
        if has_offset == has_time:
            raise _BadRequestError("give exactly one of 'offset' and 'timestamp'")
        if has_offset:
            offset = _int_param(request, "offset")
        else:
            boundary = _boundary(request)
            timestamp = _int_param(request, "timestamp")
            offset = await self.reader.offset_by_time(topic, queue, timestamp, boundary)
        rng = await self.reader.range(topic, queue)
        messages: list[ColdMessage] = []
        size = 0
        async for message in self.reader.iter_messages(topic, queue, offset, count):
            messages.append(message)
            size += message.record.total_size
            if size >= self.max_bytes:
                break  # nextOffset tells the client where to continue
        self.rt.metrics.read_bytes.inc(size)
        return web.json_response(
            {
                "topic": topic,
                "queue": queue,
                "offset": offset,
                "nextOffset": offset + len(messages),
                "coldMin": rng.min,
                "coldCommit": rng.commit,
                "messages": [m.to_json() for m in messages],
            },
            dumps=lambda doc: json.dumps(doc, ensure_ascii=False),
        )


def build_read_app(
    rt: Runtime,
    *,
    reader: ColdReader | None = None,
    max_count: int = DEFAULT_MAX_COUNT,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> web.Application:
    """The read API's aiohttp application over ``rt`` (GET routes only).

    Without ``reader``, one is built with the read-ahead cache the settings ask for
    (:func:`reader_for`); the app's cleanup closes that cache.
    """
    reader = reader or reader_for(rt)
    api = _ReadApi(rt, reader, max_count, max_bytes)
    app = web.Application()
    app.router.add_get("/v1/messages", api.answer("/v1/messages", api.messages))
    app.router.add_get("/v1/cold/range", api.answer("/v1/cold/range", api.range))
    app.router.add_get("/v1/cold/records", api.answer("/v1/cold/records", api.records))
    app.router.add_get("/v1/cold/offset", api.answer("/v1/cold/offset", api.offset))

    async def close_readahead(_app: web.Application) -> None:
        if reader.readahead is not None:
            await reader.readahead.close()

    app.on_cleanup.append(close_readahead)
    return app
