"""The sidecar's small read-only HTTP API (aiohttp, on the sidecar's event loop).

======================  ==================================================================
endpoint                answer
======================  ==================================================================
``GET /healthz``        200 ``{"status": "ok", ...}`` while the dispatcher runs and holds an
                        unexpired writer lease; 503 ``{"status": "unavailable",
                        "reason": ...}`` otherwise (starting, waiting for the lease,
                        stopping, failed, lease lost or expired)
``GET /metrics``        Prometheus text format of the sidecar's registry
``GET /v1/queues``      per-queue hot/cold offsets, lag and state, as ``status --json``
``GET /v1/messages``    messages from cold, as ``tieredstore read`` (parameters below)
======================  ==================================================================

``/v1/messages`` takes ``topic``, ``queue``, then ``offset`` *or* ``timestamp`` (epoch ms,
with ``boundary=lower|upper``, default lower), and ``count`` (default 1, at most
``max_count``). A reply also stops once it holds ``max_bytes`` of records (at least one
message); ``nextOffset`` says where to continue. Errors are JSON ``{"error": ...}``:
400 for a bad parameter or name, 404 for an offset outside what cold holds, 503 while the
cold store is unreachable, 500 for damaged cold data. There is no write endpoint.

The server binds where it is told (``http.bind``, default 127.0.0.1); port 0 picks a free
port, reported by :attr:`HttpServer.port`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import asdict, dataclass
from typing import Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dispatcher.dispatcher import Dispatcher, DispatcherState
from dispatcher.lease import LeaseState
from dispatcher.queue_status import collect, mark_stopped
from dispatcher.runtime import Runtime
from tieredstore.clock import Clock, SystemClock
from tieredstore.errors import (
    ConfigError,
    InvalidNameError,
    OffsetOutOfRangeError,
    RetryableError,
    TieredStoreError,
)
from tieredstore.reader import BoundaryType, ColdMessage, ColdReader

__all__ = ["Health", "HttpServer", "build_app", "health"]

log = logging.getLogger(__name__)

DEFAULT_MAX_COUNT: Final = 1000
#: A reply stops after the message that brings it to this many record bytes.
DEFAULT_MAX_BYTES: Final = 16 << 20


@dataclass(frozen=True, slots=True)
class Health:
    """The sidecar's health: ``ok``, or why not."""

    ok: bool
    reason: str


#: What each lease state means to the operator reading ``/healthz``.
_LEASE_WORDS: Final = {
    LeaseState.NOT_HELD: "not held yet (another sidecar may hold it; this one waits)",
    LeaseState.HELD: "held",
    LeaseState.LAPSED: "lapsed (not renewed in time; reclaiming it)",
    LeaseState.RELEASED: "released (stopping)",
    LeaseState.LOST: "lost to another writer (this sidecar writes nothing more)",
}


def health(dispatcher: Dispatcher, now_ms: int) -> Health:
    """Healthy while the dispatcher runs and holds a lease that has not expired."""
    lease = dispatcher.lease
    if dispatcher.state is DispatcherState.CREATED:
        return Health(False, f"starting: the writer lease is {_LEASE_WORDS[lease.state]}")
    if dispatcher.state is not DispatcherState.RUNNING:
        return Health(False, f"dispatcher is {dispatcher.state.value}")
    if lease.state is not LeaseState.HELD:
        return Health(False, f"the writer lease is {_LEASE_WORDS[lease.state]}")
    if lease.expires_at_ms <= now_ms:
        late = (now_ms - lease.expires_at_ms) / 1000
        return Health(False, f"writer lease expired {late:.1f}s ago without renewal")
    return Health(True, f"running, writer lease epoch {lease.epoch}")


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


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


class _Api:
    """Request handlers over one runtime."""

    def __init__(
        self, rt: Runtime, reader: ColdReader, clock: Clock, max_count: int, max_bytes: int
    ) -> None:
        self.rt = rt
        self.reader = reader
        self.clock = clock
        self.max_count = max_count
        self.max_bytes = max_bytes

    async def healthz(self, _request: web.Request) -> web.Response:
        h = health(self.rt.dispatcher, self.clock.now_ms())
        if h.ok:
            return web.json_response({"status": "ok", "detail": h.reason})
        return web.json_response({"status": "unavailable", "reason": h.reason}, status=503)

    async def metrics(self, _request: web.Request) -> web.Response:
        body = generate_latest(self.rt.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def queues(self, _request: web.Request) -> web.Response:
        rows = self.rt.catalogue.queues()
        losses = self.rt.catalogue.losses()
        statuses = await asyncio.to_thread(collect, self.rt.hot, rows, self.clock.now_ms(), losses)
        statuses = mark_stopped(statuses, self.rt.dispatcher.stopped)
        return web.json_response({"queues": [asdict(s) for s in statuses]})

    async def messages(self, request: web.Request) -> web.Response:
        try:
            return await self._messages(request)
        except _BadRequestError as exc:
            return _error(400, str(exc))
        except InvalidNameError as exc:
            return _error(400, str(exc))
        except OffsetOutOfRangeError as exc:
            return _error(404, str(exc))
        except RetryableError as exc:
            return _error(503, f"cold store unavailable: {exc}")
        except TieredStoreError as exc:
            log.error("/v1/messages failed: %s", exc)
            return _error(500, str(exc))

    async def _messages(self, request: web.Request) -> web.Response:
        topic = request.query.get("topic")
        if not topic:
            raise _BadRequestError("missing parameter 'topic'")
        queue = _int_param(request, "queue")
        count = _int_param(request, "count", default=1)
        if not 1 <= count <= self.max_count:
            raise _BadRequestError(f"parameter 'count' must be in 1..{self.max_count}, got {count}")
        has_offset, has_time = "offset" in request.query, "timestamp" in request.query
        if has_offset == has_time:
            raise _BadRequestError("give exactly one of 'offset' and 'timestamp'")
        if has_offset:
            offset = _int_param(request, "offset")
        else:
            try:
                boundary = BoundaryType(request.query.get("boundary", "lower"))
            except ValueError as exc:
                raise _BadRequestError("parameter 'boundary' must be lower or upper") from exc
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


def build_app(
    rt: Runtime,
    *,
    reader: ColdReader | None = None,
    clock: Clock | None = None,
    max_count: int = DEFAULT_MAX_COUNT,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> web.Application:
    """The API's aiohttp application over ``rt`` (read-only: GET routes only)."""
    api = _Api(
        rt,
        reader or ColdReader(rt.backend, rt.settings.cluster, rt.settings.broker),
        clock or SystemClock(),
        max_count,
        max_bytes,
    )
    app = web.Application()
    app.router.add_get("/healthz", api.healthz)
    app.router.add_get("/metrics", api.metrics)
    app.router.add_get("/v1/queues", api.queues)
    app.router.add_get("/v1/messages", api.messages)
    return app


class HttpServer:
    """Serves an app on ``bind:port`` until closed. ``close()`` is safe to call twice."""

    def __init__(self, app: web.Application, *, bind: str, port: int) -> None:
        self.app = app
        self.bind = bind
        self.requested_port = port
        # No access log: a Prometheus scrape every few seconds would drown the real logs.
        self._runner = web.AppRunner(app, access_log=None)
        self._site: web.TCPSite | None = None
        self.port = 0

    async def start(self) -> int:
        """Start listening; return the bound port (the real one when asked for 0)."""
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self.bind, self.requested_port)
        try:
            await self._site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise ConfigError(
                f"cannot serve HTTP on {self.bind}:{self.requested_port}: {exc.strerror or exc}",
                where="http.bind/http.port",
            ) from exc
        self.port = int(self._runner.addresses[0][1])
        return self.port

    @property
    def url(self) -> str:
        host = f"[{self.bind}]" if ":" in self.bind else self.bind
        return f"http://{host}:{self.port}"

    async def close(self) -> None:
        await self._runner.cleanup()
