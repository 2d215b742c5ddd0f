"""``tieredstore run``: the sidecar. ``--once`` = one catch-up pass, then exit.

``--once`` exits 0 only when everything is tiered that may be: it exits 1 when a queue
diverged, lost hot data or failed during the pass, and also while any queue is PAUSED
(offsets lost before tiering, waiting for ``tieredstore resume``) or DIVERGED (waiting
for ``tieredstore repair``) from an earlier run — such a queue is no longer tiered, so
"done" would be a lie — and when the pass STOPPED a queue (a newer-format manifest, an
inconsistent hot store) or found committed cold data damaged (DEGRADED, even once a
lost tail was tiered again: the loss is never hidden).

Lifecycle of the long-running mode:

* start: settings are validated and the cold store is probed (one listing of the
  lease key): a bad setting, a missing store, an unwritable state dir or an
  unreachable cold store each end the command with one line and exit 3, leaving no
  state dir behind (it is created only once the cold store answered);
* the HTTP API (``http.enabled``: health, metrics) and the read API (``reads.enabled``:
  message contents, the broker plugin's reads) start before the lease is acquired, each
  on its own listener, so ``/healthz`` answers 503 "starting" while the sidecar waits for
  the lease and a standby sidecar serves reads; the log lines ``HTTP API listening on
  http://HOST:PORT`` and ``read API listening on http://HOST:PORT`` give the real ports;
* in a broker group (``group.replica`` set) the sidecar publishes its replica report
  every ``tiering.tick_interval`` from start to stop, standing by or tiering
  (:mod:`tieredstore.dispatcher.replicas`); ``--once`` publishes none;
* ``SIGTERM``/``SIGINT``: no new segment starts; a line says at once how many uploads
  are in flight and that they get at most ``shutdown.deadline`` to commit; a second
  signal abandons them now (uncommitted objects are never read; ``gc`` removes them), as
  the deadline does; the lease is released, exit 0. ``--once`` stops the same way but
  exits 130 (SIGINT) or 143 (SIGTERM) with a last line saying what happened
  (:func:`closing_line`: committed, abandoned, and whether anything is left to tier);
* ``SIGHUP``: the config file and environment are read again; the settings that can
  change live are applied, the others are logged as needing a restart
  (:mod:`tieredstore.cli.sidecar.reload`). A reload that does not validate changes nothing.

``--once`` never serves HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from tieredstore.cli.commands._settings import add_settings_arguments, settings_from_args
from tieredstore.cli.sidecar.allocator import fix_mmap_threshold
from tieredstore.cli.sidecar.progress import ProgressLine, pass_total
from tieredstore.cli.sidecar.reload import apply_reload
from tieredstore.cli.sidecar.runtime import Runtime, check_cold_store, open_runtime
from tieredstore.cli.sidecar.summary import log_summaries
from tieredstore.dispatcher.tiering.tick_report import TickReport
from tieredstore.errors import ConfigError
from tieredstore.hot.store import QueueKey
from tieredstore.humanize import human_bytes, human_seconds
from tieredstore.logs import before_each_line, configure_logging
from tieredstore.metadata.rows import QueueState
from tieredstore.settings.loader import GuardMode, Settings

if TYPE_CHECKING:
    from tieredstore.cli.sidecar.http import HttpServer

log = logging.getLogger("tieredstore.run")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings_arguments(p)
    p.add_argument("--once", action="store_true", help="one catch-up pass, then exit")
    p.add_argument("--init-policy", help="earliest | latest | timestamp:<ms> [tiering.init_policy]")
    p.add_argument("--guard", choices=[m.value for m in GuardMode], help="[tiering.guard]")
    p.add_argument("--no-wait", action="store_true", help="exit if another sidecar holds the lease")
    p.add_argument(
        "--progress",
        choices=["auto", "on", "off"],
        default="auto",
        help="progress line on stderr (auto: only on a TTY)",
    )


class _Reloader:
    """Re-reads the settings on SIGHUP and applies what can change live."""

    def __init__(self, rt: Runtime, load: Callable[[], Settings]) -> None:
        self.rt = rt
        self.load = load
        self._task: asyncio.Task[None] | None = None

    def request(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._reload(), name="config reload")

    async def _reload(self) -> None:
        log.info("SIGHUP: reloading the configuration")
        try:
            new = await asyncio.to_thread(self.load)
        except ConfigError as exc:
            log.error("config reload refused, keeping the running settings: %s", exc)
            return
        plan = apply_reload(self.rt, new)
        if {"log.level", "log.format"} & set(plan.applied):
            configure_logging(plan.settings.log.format, plan.settings.log.level)
        if not plan.changed:
            log.info("config reload: nothing changed")
        shown, running = new.redacted(), plan.settings.redacted()  # no URL userinfo in logs
        for key in plan.applied:
            log.info("config reload: %s = %r applied", key, running[key])
        for key in plan.needs_restart:
            log.warning(
                "config reload: %s changed to %r but needs a restart; still %r",
                key,
                shown[key],
                running[key],
            )

    async def close(self) -> None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)


async def _serve_http(rt: Runtime) -> list[HttpServer]:
    """Start the listeners the settings enable (closed by the caller, also on failure).

    The web framework is imported here, not with the command: ``--once`` and a sidecar
    serving nothing start without it (a quarter of a second of CPU on each start)."""
    if not (rt.settings.http.enabled or rt.settings.reads.enabled):
        return []
    from tieredstore.cli.sidecar.http import HttpServer, build_app
    from tieredstore.cli.sidecar.read_api import build_read_app

    servers: list[HttpServer] = []
    try:
        if rt.settings.http.enabled:
            ops = HttpServer(build_app(rt), bind=rt.settings.http.bind, port=rt.settings.http.port)
            await ops.start()
            servers.append(ops)
            log.info("HTTP API listening on %s", ops.url)
        if rt.settings.reads.enabled:
            reads = HttpServer(
                build_read_app(rt),
                bind=rt.settings.reads.bind,
                port=rt.settings.reads.port,
                where="reads.bind/reads.port",
            )
            await reads.start()
            servers.append(reads)
            log.info("read API listening on %s", reads.url)
    except BaseException:
        for server in servers:
            await server.close()
        raise
    return servers


class _Stopper:
    """The SIGTERM/SIGINT handler: stop the dispatcher, or stop waiting for the lease."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.requested = False
        self.signal: signal.Signals | None = None
        self._starting: asyncio.Task[None] | None = None

    def __call__(self, signum: signal.Signals = signal.SIGTERM) -> None:
        dispatcher = self.rt.dispatcher
        if self.requested:  # the second signal: stop waiting for the segments in flight
            log.warning(
                "%s again: abandoning %s in flight (uncommitted: never read, gc removes them)",
                signum.name, _uploads(dispatcher.rounds.in_flight),
            )  # fmt: skip
            dispatcher.abandon()
            return
        self.requested = True
        self.signal = signum
        busy = dispatcher.rounds.in_flight
        if busy:
            log.warning(
                "%s: finishing %s, at most %s; %s again to abandon them",
                signum.name, _uploads(busy), human_seconds(self.rt.settings.shutdown.deadline),
                "Ctrl-C" if signum is signal.SIGINT else signum.name,
            )  # fmt: skip
        else:
            log.warning("%s: stopping (no upload in flight)", signum.name)
        dispatcher.stop()
        if self._starting is not None:
            self._starting.cancel()

    @property
    def name(self) -> str:
        return (self.signal or signal.SIGTERM).name

    def interrupted(self) -> int:
        """The exit code of a ``--once`` pass a signal stopped: 128 + the signal."""
        return 128 + int(self.signal or signal.SIGTERM)

    async def start(self) -> bool:
        """Start the dispatcher (waiting for the lease if so configured).

        Returns False when a stop was requested before the lease was held.
        """
        if self.requested:
            return False
        wait = bool(self.rt.settings.lease.wait)
        self._starting = asyncio.create_task(self.rt.dispatcher.start(wait_for_lease=wait))
        try:
            await self._starting
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not self.requested or (current is not None and current.cancelling()):
                raise
            log.info("stopped before the writer lease was acquired")
            return False
        finally:
            self._starting = None
        return True


async def _run_forever(rt: Runtime, stopper: _Stopper, load: Callable[[], Settings]) -> int:
    loop = asyncio.get_running_loop()
    reloader = _Reloader(rt, load)
    servers: list[HttpServer] = []
    loop.add_signal_handler(signal.SIGHUP, reloader.request)
    try:
        servers = await _serve_http(rt)
        reports = asyncio.create_task(
            rt.group.report_until(
                rt.dispatcher.states.stopping, lambda: rt.settings.tiering.tick_interval
            ),
            name="replica reports",
        )
        try:
            if await stopper.start():
                await rt.dispatcher.run(shutdown_deadline=rt.settings.shutdown.deadline)
        finally:
            reports.cancel()
            await asyncio.gather(reports, return_exceptions=True)
        log.info("stopped")
        return 0
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
        await reloader.close()
        for server in servers:
            await server.close()


def _uploads(n: int) -> str:
    return f"{n} upload{'s' if n != 1 else ''}"


def closing_line(report: TickReport, signame: str) -> str:
    """What an interrupted ``run --once`` says last: what happened to the segments in
    flight and what is left, so that "run again" is said only when it is true."""
    done = f"{report.committed} committed"
    if report.abandoned:
        head = (
            f"stopped by {signame}: {_uploads(report.abandoned)} in flight abandoned "
            f"uncommitted (never read; `tieredstore gc` removes them), {done}"
        )
    else:
        head = f"stopped by {signame}: {done}"
    if not report.left_messages:
        return f"{head}; nothing is left to tier, the catch-up had finished"
    queues = f"{report.left_queues} queue{'s' if report.left_queues != 1 else ''}"
    return f"{head}; {report.left_messages} messages in {queues} left: run again to tier them"


async def _catch_up(
    rt: Runtime, stopper: _Stopper, bar_close: Callable[[], None], closing: list[str]
) -> int:
    if not await stopper.start():
        bar_close()
        closing.append(
            f"stopped by {stopper.name} before the writer lease was held; nothing tiered"
        )
        return stopper.interrupted()
    report = await rt.dispatcher.catch_up(shutdown_deadline=rt.settings.shutdown.deadline)
    bar_close()
    if report.interrupted:
        log.warning(
            "catch-up stopped: %s, %d messages, %s (%d bytes) committed before the stop",
            report.committed,
            report.messages,
            human_bytes(report.bytes),
            report.bytes,
        )
        closing.append(closing_line(report, stopper.name))
        return stopper.interrupted()
    log.info(
        "catch-up done: %s, %d messages, %s (%d bytes)",
        report.committed,
        report.messages,
        human_bytes(report.bytes),
        report.bytes,
    )
    if report.diverged or report.lost or report.errors:
        log.error(
            "catch-up incomplete: %d queues diverged, %d lost hot data, %d errors",
            len(report.diverged),
            len(report.lost),
            len(report.errors),
        )
        return 1
    return _stopped_queues(rt)


def _stopped_queues(rt: Runtime) -> int:
    """1 (and one log line each) when a queue is PAUSED or DIVERGED, or this pass
    STOPPED it or found its committed cold data damaged (DEGRADED), else 0."""
    fix = {QueueState.PAUSED: "resume", QueueState.DIVERGED: "repair"}
    stopped = [r for r in rt.catalogue.queues.all() if r.state in fix]
    for row in stopped:
        extra = " --accept-loss" if row.state is QueueState.PAUSED else ""
        log.error(
            "queue %s is %s and not tiered; run `tieredstore %s --topic %s --queue %d%s`",
            row, row.state.value, fix[row.state], row.topic, row.queue_id, extra,
        )  # fmt: skip
    states = rt.dispatcher.states
    marked: list[tuple[QueueState, Mapping[QueueKey, str]]] = [
        (QueueState.STOPPED, states.stopped),
        (QueueState.DEGRADED, states.damaged),
    ]
    for state, queues in marked:
        for queue, reason in sorted(queues.items()):
            log.error("queue %s is %s: %s", queue, state.value, reason)
    return 1 if stopped or any(queues for _, queues in marked) else 0


async def _serve(
    settings: Settings,
    *,
    once: bool,
    progress: bool,
    load: Callable[[], Settings],
    closing: list[str],
) -> int:
    await check_cold_store(settings)
    bar = ProgressLine(enabled=progress)
    unhook = before_each_line(bar.close)
    try:
        return await _serve_runtime(settings, once=once, bar=bar, load=load, closing=closing)
    finally:
        unhook()
        bar.close()


async def _serve_runtime(
    settings: Settings,
    *,
    once: bool,
    bar: ProgressLine,
    load: Callable[[], Settings],
    closing: list[str],
) -> int:
    async with open_runtime(settings, on_segment=bar.update) as rt:
        # Everything built so far (imported modules, the runtime) lives as long as the
        # process: keep it out of the cyclic collector's full passes, which otherwise
        # walk it every few thousand allocations of the tiering pass.
        gc.freeze()
        fix_mmap_threshold()  # large blocks go back to the kernel when freed
        loop = asyncio.get_running_loop()
        stopper = _Stopper(rt)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopper, sig)
        summaries = asyncio.create_task(
            log_summaries(rt.metrics, rt.dispatcher.clock, settings.log.summary_interval)
        )
        try:
            if once:
                bar.measure(pass_total(rt.catalogue, rt.hot))  # a total and an ETA
                return await _catch_up(rt, stopper, bar.close, closing)
            return await _run_forever(rt, stopper, load)
        finally:
            summaries.cancel()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)


def run(args: argparse.Namespace) -> int:
    def load() -> Settings:
        return settings_from_args(
            args,
            extra={
                "tiering.init_policy": args.init_policy,
                "tiering.guard": args.guard,
                "lease.wait": False if args.no_wait else None,
            },
        )

    settings = load()
    configure_logging(settings.log.format, settings.log.level)
    progress = args.progress == "on" or (args.progress == "auto" and sys.stderr.isatty())
    closing: list[str] = []  # an interrupted pass's last line (closing_line)
    code = asyncio.run(
        _serve(settings, once=args.once, progress=progress, load=load, closing=closing)
    )
    for line in closing:  # said last, after the lease is released and the runtime closed
        print(f"tieredstore run: {line}", file=sys.stderr)
    return code
