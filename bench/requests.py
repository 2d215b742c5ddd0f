"""Object requests per minute of one broker with many trickling queues (issue 37's baseline).

Builds a synthetic store of ``--topics`` × ``--queues`` queues (default 128 × 8 = 1,024)
and drives the real sidecar in this process (``open_runtime`` and ``Dispatcher.run``:
the tick loop, lease renewal, the retention pass and the config backup, default
settings unless ``--age`` / ``--tick`` say otherwise) on a VirtualClock: nothing sleeps,
time moves one tick at a time once every loop of the sidecar is parked. A simulated
minute costs what the sidecar's 60 ticks cost (about 0.5 CPU-s each at 1,024 queues
here: some 30 CPU-s), and no waiting. Every queue gets a trickle of
``--messages-per-minute`` messages with 100-byte bodies, each queue at its own phase
(spread evenly over one segment cycle, as on a broker whose queues are not in step),
stamped with the simulated time. The first cycle is written before the sidecar starts,
so every queue is in its steady cycle from the first tick; the sidecar's start-up (the
lease, the tiering rules, the config copies, one init record per queue) takes the
first two ticks, which are not counted.

Every request the sidecar makes to the cold store is counted by kind by its own
counting wrapper (``CountingBackend``: one per call over memory and POSIX, one per HTTP
request over S3 on a moto server in its own process): PUT (writes, conditional creates
and replaces, multipart parts), GET, HEAD, LIST, DELETE. ``--cold memory`` (the
default), ``posix`` or ``s3``.

Measured over the next ``--minutes`` simulated minutes (default 10):

* requests per minute by kind, and all of them;
* new objects per day: objects listed at the end of the window and not at its start,
  per simulated minute × 1,440;
* the RPO: for each message, the simulated time from its append to
  the commit of the segment or batch slice that holds it (the ``on_segment`` callback,
  once its manifest or batch is written and the catalogue row committed); max and p99, against
  ``segment_max_age`` + 2 ticks. Measured for the messages whose bound ends inside the
  window (appended from its start less the bound to its end less the bound): each must
  be committed by the window's end, and one that is not makes the max infinite.

The baseline "in the same run" is the per-queue mode: each queue's own segment every
``segment_max_age`` (COMMIT_LOG, CONSUME_QUEUE and MANIFEST objects). The batch mode
(``tiering.batching``: one batch object for the small segments of a round, age cuts
every other tick) is printed beside it, and the RESULT lines are about it. Last lines::

    RESULT requests_puts_per_min ratio=<PUTs per minute> target=<=60 PASS|FAIL
    RESULT requests_rpo_max ratio=<max RPO, s> target=<=<age + 2 ticks>s PASS|FAIL
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _common import AWS_ENV, BROKER, CLUSTER, machine, result_line, table
from prometheus_client import CollectorRegistry

from tieredstore.cli.sidecar.runtime import Runtime, open_runtime
from tieredstore.clock import VirtualClock
from tieredstore.dispatcher.tiering.planner import SegmentPlan
from tieredstore.formats.consumequeue import CQ_UNIT_SIZE
from tieredstore.hot.synth import SyntheticStore, SynthSpec
from tieredstore.settings.loader import Settings, load_settings

PUTS_TARGET = 60.0  # PUTs per minute per broker (issue 37: 1 a second)
RPO_TICKS = 2  # the RPO bound: segment_max_age + this many ticks
BODY = 100  # bytes per message body
START_MS = 1_700_000_000_000
#: S3 list price of a PUT (also COPY, POST, LIST) request, standard storage class.
PUT_PRICE = 0.005 / 1000
SHM = Path("/dev/shm")
#: The cold store's request kinds, from the counting wrapper's operations.
KINDS = {
    "write": "PUT",
    "read": "GET",
    "size": "HEAD",
    "exists": "HEAD",
    "list": "LIST",
    "delete": "DELETE",
    "abort": "DELETE",  # an aborted multipart upload
}
KIND_ORDER = ("PUT", "GET", "HEAD", "LIST", "DELETE")
#: Modes measured side by side: the settings each changes. ``per-queue`` is the sidecar
#: without batching (issue 37's baseline); ``batch`` puts the small segments of a round
#: in one batch object (``tiering.batching``). The RESULT lines are about the last.
MODES: dict[str, dict[str, object]] = {
    "per-queue": {"tiering.batching": False},
    "batch": {"tiering.batching": True},
}


@dataclass(frozen=True, slots=True)
class Shape:
    """The simulated timeline, in milliseconds of virtual time after :data:`START_MS`.

    Messages are appended from 0; the sidecar starts at ``start_ms`` (one segment cycle
    later, so every queue is already in its steady cycle); requests are counted over
    ``[window_start_ms, window_end_ms)``; the RPO is measured for the messages whose
    bound falls in that window (:meth:`rpo_window`).
    """

    step_ms: int  # one tick
    period_ms: float  # between two messages of one queue
    phases_ms: np.ndarray  # int64: each queue's first append
    start_ms: int
    window_start_ms: int
    window_end_ms: int
    rpo_bound_ms: int

    @property
    def minutes(self) -> float:
        return (self.window_end_ms - self.window_start_ms) / 60_000

    def due(self, now_ms: int) -> np.ndarray:
        """Messages each queue should have received by ``now_ms`` (int64 per queue)."""
        since = now_ms - self.phases_ms
        return np.where(since >= 0, np.floor(since / self.period_ms).astype(np.int64) + 1, 0)

    def rpo_window(self) -> tuple[int, int]:
        """Appends whose RPO bound ends inside the counted window: each of them must be
        committed by its end."""
        return (
            max(0, self.window_start_ms - self.rpo_bound_ms),
            self.window_end_ms - self.rpo_bound_ms,
        )


def shape_of(settings: Settings, queues: int, per_minute: float, minutes: float) -> Shape:
    """Phases spread evenly over one segment cycle (the multiple of the message period
    that reaches ``segment_max_age``). The sidecar starts one cycle in: every queue has
    its first messages, the oldest as old as in the steady state. Its start-up (lease,
    rules, config copies, one init record per queue) takes the first two ticks, which
    the window leaves out."""
    step = max(1, round(settings.tiering.tick_interval * 1000))
    age = round(settings.tiering.segment_max_age * 1000)
    period = 60_000 / per_minute
    cycle = max(period, math.ceil(age / period) * period)
    phases = (np.arange(queues, dtype=np.int64) * int(cycle)) // queues
    start = -(-int(cycle) // step) * step
    window_start = start + 2 * step
    window_end = window_start + -(-round(minutes * 60_000) // step) * step
    return Shape(step, period, phases, start, window_start, window_end, age + RPO_TICKS * step)


@dataclass(frozen=True, slots=True)
class Measured:
    """One mode's window: requests by kind, objects, the RPO of its messages."""

    mode: str
    queues: int
    minutes: float
    requests: Counter[str]  # by kind
    put_bytes: int
    new_objects: int
    deleted_objects: int
    segments: int
    rpo_s: np.ndarray  # float64 seconds; NaN for a message not committed by the end
    rpo_bound_s: float
    wall_seconds: float

    def per_minute(self, n: float) -> float:
        return n / self.minutes

    @property
    def puts_per_min(self) -> float:
        return self.per_minute(self.requests["PUT"])

    @property
    def objects_per_day(self) -> float:
        return self.per_minute(self.new_objects) * 1440

    @property
    def late(self) -> int:
        """Messages still not committed when the window ended (past their bound)."""
        return int(np.isnan(self.rpo_s).sum())

    @property
    def rpo_max(self) -> float:
        return math.inf if self.late or not len(self.rpo_s) else float(self.rpo_s.max())

    @property
    def rpo_p99(self) -> float:
        rpo = np.nan_to_num(self.rpo_s, nan=math.inf)
        return float(np.percentile(rpo, 99)) if len(rpo) else math.inf


def counted(registry: CollectorRegistry) -> tuple[Counter[str], int]:
    """The sidecar's cold-store requests so far by kind, and the bytes it wrote."""
    requests: Counter[str] = Counter()
    written = 0
    for family in registry.collect():
        for sample in family.samples:
            op = sample.labels.get("operation", "")
            if sample.name == "tieredstore_backend_requests_total":
                requests[KINDS.get(op, op.upper())] += int(sample.value)
            elif sample.name == "tieredstore_backend_bytes_total" and op == "write":
                written += int(sample.value)
    return requests, written


async def listed(rt: Runtime) -> set[str]:
    """Every key in the cold store (outside the counted window: the caller makes sure)."""
    return {info.key for info in await rt.backend.list("")}


class Timeline:
    """Appends and commits of every message, per queue, in virtual milliseconds."""

    def __init__(self, keys: Sequence[tuple[str, int]], most: int) -> None:
        self.index = {key: i for i, key in enumerate(keys)}
        self.appended = np.full((len(keys), most), np.nan)
        self.committed = np.full((len(keys), most), np.nan)
        self.count = np.zeros(len(keys), dtype=np.int64)
        self.segments = 0

    def append(self, queues: np.ndarray, counts: np.ndarray, now_ms: int) -> None:
        for q, n in zip(queues.tolist(), counts.tolist(), strict=True):
            self.appended[q, self.count[q] : self.count[q] + n] = now_ms
            self.count[q] += n

    def commit(self, plan: SegmentPlan, now_ms: int) -> None:
        q = self.index[plan.queue.topic, plan.queue.queue_id]
        self.committed[q, plan.start : plan.end] = now_ms
        self.segments += 1

    def rpo_seconds(self, start_ms: float, end_ms: float) -> np.ndarray:
        """Commit − append of every message appended in [start_ms, end_ms)."""
        inside = (self.appended >= start_ms) & (self.appended < end_ms)
        rpo: np.ndarray = (self.committed[inside] - self.appended[inside]) / 1000
        return rpo


@contextmanager
def cold_store(kind: str, mode: str, root: Path) -> Iterator[dict[str, object]]:
    """The ``cold.*`` settings of an empty cold store of ``kind`` for ``mode``."""
    if kind == "memory":
        yield {"cold.url": f"memory://bench-requests-{mode}-{os.getpid()}"}
    elif kind == "posix":
        yield {"cold.url": str(root / f"cold-{mode}")}
    else:
        import botocore.session

        from tests.support.moto import MotoServer

        os.environ.update(AWS_ENV)
        with MotoServer(root / f"moto-{mode}.log") as moto:
            client = botocore.session.get_session().create_client(
                "s3", endpoint_url=moto.endpoint_url, region_name=AWS_ENV["AWS_DEFAULT_REGION"]
            )
            client.create_bucket(Bucket="bench-requests")
            yield {
                "cold.url": "s3://bench-requests",
                "cold.endpoint_url": moto.endpoint_url,
                "cold.region": AWS_ENV["AWS_DEFAULT_REGION"],
            }


async def measure(args: argparse.Namespace, mode: str, root: Path) -> Measured:
    """Run ``mode`` on a fresh store and cold store; measure its window."""
    names = SynthSpec(topics=args.topics).topic_names()
    keys = [(t, q) for t in names for q in range(args.queues)]
    spec = SynthSpec(
        topics=args.topics,
        queues=args.queues,
        messages=0,
        body_min=BODY,
        body_max=BODY,
        commitlog_file_size=64 << 20,
        cq_file_size=6000 * CQ_UNIT_SIZE,
        start_time=START_MS,
        compress_over=0,
    )
    store = SyntheticStore.create(root / f"store-{mode}", spec)
    with cold_store(args.cold, mode, root) as cold:
        settings = sidecar_settings(args, mode, store.root, root / f"state-{mode}", cold)
        shape = shape_of(settings, len(keys), args.messages_per_minute, args.minutes)
        timeline = Timeline(keys, int(shape.due(shape.window_end_ms).max()) + 1)

        def append_due(now: int) -> None:
            due = shape.due(now)
            queues = np.flatnonzero(due > timeline.count)
            if len(queues):
                counts = due[queues] - timeline.count[queues]
                to = [keys[q] for q, n in zip(queues, counts, strict=True) for _ in range(n)]
                store.append(store_time=START_MS + now, interval_ms=0, queues=to)
                timeline.append(queues, counts, now)

        t0 = time.perf_counter()
        for now in range(0, shape.start_ms + 1, shape.step_ms):  # before the sidecar
            append_due(now)
        clock = VirtualClock(START_MS + shape.start_ms)

        def on_segment(plan: SegmentPlan, _sliced: bool) -> None:
            timeline.commit(plan, clock.now_ms() - START_MS)

        async with open_runtime(settings, clock=clock, on_segment=on_segment) as rt:
            await rt.dispatcher.start(wait_for_lease=False)
            runner = asyncio.create_task(rt.dispatcher.run())
            # Parked between ticks: the tick loop, lease renewal and each periodic job.
            loops = 2 + len(rt.dispatcher.periodic)

            async def run_until(end_ms: int) -> None:
                """Tick by tick until ``end_ms``: append what is due, move one tick on,
                wait until every loop of the sidecar is parked again."""
                # A bound on failure (a wedged sidecar), not a synchronisation.
                await asyncio.wait_for(clock.parked(loops), timeout=600)
                while (now := clock.now_ms() - START_MS) < end_ms:
                    append_due(now)
                    await clock.advance(shape.step_ms / 1000)
                    await asyncio.wait_for(clock.parked(loops), timeout=600)
                    if runner.done():
                        runner.result()  # the sidecar stopped: raise its error

            await run_until(shape.window_start_ms)
            keys_before = await listed(rt)
            before, bytes_before = counted(rt.metrics.registry)
            segments_before = timeline.segments
            await run_until(shape.window_end_ms)
            after, bytes_after = counted(rt.metrics.registry)
            segments = timeline.segments - segments_before
            keys_after = await listed(rt)
            rt.dispatcher.stop()
            await runner
    return Measured(
        mode=mode,
        queues=len(keys),
        minutes=shape.minutes,
        requests=after - before,
        put_bytes=bytes_after - bytes_before,
        new_objects=len(keys_after - keys_before),
        deleted_objects=len(keys_before - keys_after),
        segments=segments,
        rpo_s=timeline.rpo_seconds(*shape.rpo_window()),
        rpo_bound_s=shape.rpo_bound_ms / 1000,
        wall_seconds=time.perf_counter() - t0,
    )


def sidecar_settings(
    args: argparse.Namespace, mode: str, store: Path, state: Path, cold: dict[str, object]
) -> Settings:
    """The defaults but for the bench's broker, ``--age``, ``--tick`` and ``mode``'s."""
    return load_settings(
        env={},
        overrides={
            "store.path": str(store),
            "cold.cluster": CLUSTER,
            "cold.broker": BROKER,
            "state.dir": str(state),
            "http.enabled": False,
            "tiering.segment_max_age": args.age,
            "tiering.tick_interval": args.tick,
            **cold,
            **MODES[mode],
        },
    )


def report(rows: list[Measured]) -> None:
    """The tables, one line per mode, and the RESULT lines (about the last mode)."""
    print(
        table(
            ["mode", "queues", "PUTs/min", "requests/min", "new objects/day", "max RPO s"],
            [
                [
                    m.mode,
                    m.queues,
                    m.puts_per_min,
                    m.per_minute(sum(m.requests.values())),
                    round(m.objects_per_day),
                    m.rpo_max,
                ]
                for m in rows
            ],
        )
    )
    print(
        table(
            ["requests/min", *KIND_ORDER, "other"],
            [
                [
                    m.mode,
                    *(m.per_minute(m.requests[k]) for k in KIND_ORDER),
                    m.per_minute(sum(n for k, n in m.requests.items() if k not in KIND_ORDER)),
                ]
                for m in rows
            ],
        )
    )
    for m in rows:
        month = m.puts_per_min * 60 * 24 * 30 * PUT_PRICE
        print(
            f"{m.mode}: {m.minutes:g} simulated minutes in {m.wall_seconds:,.0f} s; "
            f"{m.segments:,} segments ({m.per_minute(m.segments):,.1f}/min), "
            f"{m.new_objects:,} new objects ({m.new_objects / max(m.segments, 1):.2f} a "
            f"segment), {m.deleted_objects:,} deleted, "
            f"{m.put_bytes / max(m.requests['PUT'], 1):,.0f} B a PUT; RPO of "
            f"{len(m.rpo_s):,} messages: p99 {m.rpo_p99:.1f} s, max {m.rpo_max:.1f} s "
            f"(bound {m.rpo_bound_s:g} s), {m.late:,} not committed by the end; "
            f"PUTs at $0.005 per 1,000 (S3 list price): ${month:,.2f} a broker-month"
        )
    last = rows[-1]
    puts, rpo, bound = last.puts_per_min, last.rpo_max, last.rpo_bound_s
    print(result_line("requests_puts_per_min", puts, f"<={PUTS_TARGET:g}", puts <= PUTS_TARGET))
    print(result_line("requests_rpo_max", rpo, f"<={bound:g}s", rpo <= bound))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--topics", type=int, default=128)
    ap.add_argument("--queues", type=int, default=8, help="queues per topic")
    ap.add_argument(
        "--messages-per-minute", type=float, default=6.0, help="per queue, 100 B bodies (6)"
    )
    ap.add_argument("--minutes", type=float, default=10.0, help="simulated minutes counted (10)")
    ap.add_argument("--age", default=None, help="tiering.segment_max_age (default 60s)")
    ap.add_argument("--tick", default=None, help="tiering.tick_interval (default 1s)")
    ap.add_argument("--cold", choices=["memory", "posix", "s3"], default="memory")
    ap.add_argument(
        "--mode", choices=sorted(MODES), action="append", help="a mode to run (all of them)"
    )
    ap.add_argument(
        "--workdir",
        type=Path,
        default=SHM if SHM.is_dir() and os.access(SHM, os.W_OK) else None,
        help="where to write (/dev/shm if there is one, else a temp dir: nothing measured "
        "depends on the disk, and fsyncs on a shared disk only slow the run down)",
    )
    args = ap.parse_args()
    print(machine())
    print(
        f"{args.topics * args.queues:,} queues ({args.topics} topics x {args.queues}), "
        f"{args.messages_per_minute:g} messages a minute each ({BODY} B bodies), "
        f"segment_max_age {args.age or 'default'}, tick {args.tick or 'default'}, "
        f"cold store {args.cold}"
    )
    with tempfile.TemporaryDirectory(dir=args.workdir, prefix="bench-requests-") as tmp:
        rows = [asyncio.run(measure(args, mode, Path(tmp))) for mode in args.mode or MODES]
    report(rows)


if __name__ == "__main__":
    main()
