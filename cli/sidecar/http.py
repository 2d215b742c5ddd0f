"""The sidecar's operations API: health and metrics (aiohttp, on the sidecar's event loop).

======================  ==================================================================
endpoint                answer
======================  ==================================================================
``GET /healthz``        200 ``{"status": "ok", ...}`` while the dispatcher runs and holds an
                        unexpired writer lease, or stands by in a broker group with its
                        replica reports going out; 503 ``{"status": "unavailable",
                        "reason": ...}`` otherwise (starting, waiting for the lease,
                        stopping, failed, lease lost or expired, the cold store
                        refusing what tiering needs); ``cold_access`` lists the faults
                        the cold store refuses now (:mod:`tieredstore.dispatcher.cold_access`; a
                        delete-only one leaves the status ``ok``)
``GET /metrics``        Prometheus text format of the sidecar's registry
``GET /v1/queues``      per-queue hot/cold offsets, lag and state, as ``status --json``
======================  ==================================================================

Nothing here returns message contents: this listener (``http.bind``/``http.port``) is the
one a container opens to the kubelet and Prometheus. Message bodies are served by the read
API (:mod:`tieredstore.cli.sidecar.read_api`) on a listener of its own, loopback by
default. There is no write endpoint on either.

:class:`HttpServer` serves either app where it is told; port 0 picks a free port,
reported by :attr:`HttpServer.port`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import asdict, dataclass
from typing import Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tieredstore.cli.sidecar.runtime import Runtime
from tieredstore.clock import Clock, SystemClock
from tieredstore.dispatcher.cold_access import ColdAccess, Refusal
from tieredstore.dispatcher.dispatcher import Dispatcher, DispatcherState
from tieredstore.dispatcher.lease.lease import LeaseState
from tieredstore.dispatcher.replicas import ReplicaGroup
from tieredstore.dispatcher.status_report import as_json, collect, mark_stopped
from tieredstore.errors import ConfigError

__all__ = ["Health", "HttpServer", "build_app", "health"]

log = logging.getLogger(__name__)


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


def health(
    dispatcher: Dispatcher,
    now_ms: int,
    *,
    group: ReplicaGroup | None = None,
    access: ColdAccess | None = None,
) -> Health:
    """Healthy while the dispatcher runs and holds a lease that has not expired, and the
    cold store refuses it nothing tiering needs (``access``: a delete-only refusal is
    named in the detail but stays healthy: tiering goes on).

    In a broker group (``group`` reporting) a standby is healthy too: a sidecar waiting
    on the lease whose replica reports go out (it reads and syncs its store); one whose
    reports fail is not.
    """
    refused = access.summary() if access is not None else ""
    if refused and access is not None and access.blocks_tiering:
        return Health(False, refused)
    lease = dispatcher.lease
    if dispatcher.state is DispatcherState.CREATED:
        if group is not None and group.reporting and lease.state is LeaseState.NOT_HELD:
            ok, why = group.report_healthy()
            if ok:
                return Health(True, f"standby: waiting on the writer lease; {why}")
            return Health(False, f"standby: {why}")
        return Health(False, f"starting: the writer lease is {_LEASE_WORDS[lease.state]}")
    if dispatcher.state is not DispatcherState.RUNNING:
        return Health(False, f"dispatcher is {dispatcher.state.value}")
    if lease.state is not LeaseState.HELD:
        return Health(False, f"the writer lease is {_LEASE_WORDS[lease.state]}")
    if lease.expires_at_ms <= now_ms:
        late = (now_ms - lease.expires_at_ms) / 1000
        return Health(False, f"writer lease expired {late:.1f}s ago without renewal")
    running = f"running, writer lease epoch {lease.epoch}"
    return Health(True, f"{running}; {refused}" if refused else running)


class _Api:
    """Request handlers over one runtime."""

    def __init__(self, rt: Runtime, clock: Clock) -> None:
        self.rt = rt
        self.clock = clock

    async def healthz(self, _request: web.Request) -> web.Response:
        h = health(
            self.rt.dispatcher, self.clock.now_ms(), group=self.rt.group, access=self.rt.access
        )
        refusals = [asdict(r) | {"fault": r.fault.value} for r in self._refusals()]
        if h.ok:
            return web.json_response({"status": "ok", "detail": h.reason,
                                      "cold_access": refusals})  # fmt: skip
        return web.json_response(
            {"status": "unavailable", "reason": h.reason, "cold_access": refusals}, status=503
        )

    def _refusals(self) -> tuple[Refusal, ...]:
        return self.rt.access.refusals if self.rt.access is not None else ()

    async def metrics(self, _request: web.Request) -> web.Response:
        body = generate_latest(self.rt.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def queues(self, _request: web.Request) -> web.Response:
        rows = self.rt.catalogue.queues.all()
        losses = self.rt.catalogue.queues.losses()
        statuses = await asyncio.to_thread(collect, self.rt.hot, rows, self.clock.now_ms(), losses)
        states = self.rt.dispatcher.states
        statuses = mark_stopped(statuses, states.stopped, states.damaged)
        return web.json_response({"queues": [as_json(s) for s in statuses]})


def build_app(rt: Runtime, *, clock: Clock | None = None) -> web.Application:
    """The operations API's aiohttp application over ``rt`` (GET routes only)."""
    api = _Api(rt, clock or SystemClock())
    app = web.Application()
    app.router.add_get("/healthz", api.healthz)
    app.router.add_get("/metrics", api.metrics)
    app.router.add_get("/v1/queues", api.queues)
    return app


class HttpServer:
    """Serves an app on ``bind:port`` until closed. ``close()`` is safe to call twice."""

    def __init__(
        self, app: web.Application, *, bind: str, port: int, where: str = "http.bind/http.port"
    ) -> None:
        self.app = app
        self.where = where
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
                where=self.where,
            ) from exc
        self.port = int(self._runner.addresses[0][1])
        return self.port

    @property
    def url(self) -> str:
        host = f"[{self.bind}]" if ":" in self.bind else self.bind
        return f"http://{host}:{self.port}"

    async def close(self) -> None:
        await self._runner.cleanup()
