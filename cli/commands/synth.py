"""``tieredstore synth``: write a synthetic RocketMQ store for demos, tests, benchmarks."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tieredstore.cli.commands._settings import parse_time, positive_int
from tieredstore.errors import ConfigError, StoreNotFoundError
from tieredstore.hot.synth import SyntheticStore, SynthSpec, synthesize
from tieredstore.hot.synth_bodies import BODY_KINDS
from tieredstore.settings.loader import parse_size


def _size(text: str) -> int:
    """Parse ``1048576``, ``64K``, ``4M`` or ``1G`` as bytes (never ``nan``/``inf``)."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _body_range(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition(":")
    return (_size(lo), _size(hi)) if sep else (_size(lo), _size(lo))


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = SynthSpec()
    p.add_argument("--out", required=True, type=Path, help="store directory to create (empty)")
    p.add_argument(
        "--append",
        type=positive_int,
        metavar="N",
        help="append N more messages to the store synth made in --out, stamped as a live "
        "broker would: the last about now, never in the future (or from --start-time); the "
        "other flags come from its synth.json",
    )
    p.add_argument("--topics", type=int, default=d.topics, help="number of topics (default 4)")
    p.add_argument("--queues", type=int, default=d.queues, help="queues per topic (default 4)")
    p.add_argument("--messages", type=int, default=d.messages, help="messages (default 10000)")
    p.add_argument(
        "--body-size",
        type=_body_range,
        default=(d.body_min, d.body_max),
        help=f"body size, or MIN:MAX bytes (default {d.body_min}:{d.body_max})",
    )
    p.add_argument(
        "--commitlog-file-size", type=_size, default=d.commitlog_file_size,
        help="commitlog file size (default 4M; a broker uses 1G)",
    )  # fmt: skip
    p.add_argument(
        "--cq-file-size", type=_size, default=d.cq_file_size,
        help=f"consume-queue file size, rounded up to 20 bytes (default {d.cq_file_size})",
    )  # fmt: skip
    p.add_argument(
        "--start-time", type=parse_time, default=None,
        help="first store time, epoch ms or ISO 8601 (default: recent, so the last message "
        "is stored about now)",
    )  # fmt: skip
    p.add_argument(
        "--interval-ms", type=int, default=d.interval_ms,
        help="store-time step between messages (default 1)",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=d.seed, help="random seed (default 0)")
    p.add_argument(
        "--bodies", choices=sorted(BODY_KINDS), default=d.body_kind,
        help="body content: hex text, or JSON order and user events, each exactly its drawn "
        "size (default hex)",
    )  # fmt: skip
    p.add_argument("--no-tags", action="store_true", help="write no TAGS")
    p.add_argument("--no-keys", action="store_true", help="write no KEYS")
    p.add_argument(
        "--compress-over", type=_size, default=d.compress_over,
        help="compress bodies over this size (default 4096; 0 = never)",
    )  # fmt: skip
    p.add_argument("--long-topic", action="store_true", help="add a >127-byte topic (v2)")
    p.add_argument("--ipv6", action="store_true", help="IPv6 born/store hosts")
    p.add_argument(
        "--prepared-every", type=int, default=0,
        help="every Nth message is a PREPARED half message (default 0 = none)",
    )  # fmt: skip
    p.add_argument(
        "--queue-start", type=int, default=0,
        help="first offset of each queue, filler units before it (default 0)",
    )  # fmt: skip


def recent_start(messages: int, interval_ms: int, now_ms: int) -> int:
    """A start time that puts the last of ``messages`` about ``now_ms``: a demo's lag
    then reads in seconds, not in the years since a fixed date."""
    return now_ms - max(messages - 1, 0) * interval_ms


def run(args: argparse.Namespace) -> int:
    now_ms = time.time_ns() // 1_000_000
    if args.append is not None:
        return _append(args, now_ms)
    start = args.start_time
    if start is None:
        start = recent_start(args.messages, args.interval_ms, now_ms)
    spec = SynthSpec(
        topics=args.topics,
        queues=args.queues,
        messages=args.messages,
        body_min=args.body_size[0],
        body_max=args.body_size[1],
        commitlog_file_size=args.commitlog_file_size,
        cq_file_size=args.cq_file_size,
        start_time=start,
        interval_ms=args.interval_ms,
        seed=args.seed,
        tags=not args.no_tags,
        keys=not args.no_keys,
        compress_over=args.compress_over,
        long_topic=args.long_topic,
        ipv6=args.ipv6,
        prepared_every=args.prepared_every,
        queue_start=args.queue_start,
        body_kind=args.bodies,
    )
    try:
        store = synthesize(args.out, spec)
    except OSError as exc:
        raise ConfigError(f"cannot write store: {exc.strerror}", where=str(args.out)) from exc
    print(f"wrote {store.written} messages to {args.out}", file=sys.stderr)
    return 0


def _append_times(args: argparse.Namespace, store: SyntheticStore, now_ms: int) -> tuple[int, int]:
    """(first store time, interval) of an appended batch. With ``--start-time``: from
    there at the store's interval. Otherwise the batch ends about now, as a live broker
    stamps what it stores now (never the future), and starts no earlier than the store's
    last store time: when the two do not leave room at the store's interval, the batch's
    messages are spaced closer."""
    interval = store.spec.interval_ms
    last = store.last_store_time
    if args.start_time is not None:
        return max(args.start_time, last), interval
    span = max(args.append - 1, 0)
    start = recent_start(args.append, interval, now_ms)
    if start >= last or span == 0:
        return max(start, last), interval
    return last, max((now_ms - last) // span, 0)


def _append(args: argparse.Namespace, now_ms: int) -> int:
    """``--append N``: continue the store as a live broker would (later store times)."""
    try:
        store = SyntheticStore.open(args.out)
    except StoreNotFoundError as exc:  # wrong input: not a store synth made
        raise ConfigError(f"--append: {exc.message}", where=exc.where) from exc
    stamp, step = _append_times(args, store, now_ms)
    try:
        store.append(args.append, store_time=stamp, interval_ms=step)
    except OSError as exc:
        raise ConfigError(f"cannot write store: {exc.strerror}", where=str(args.out)) from exc
    print(
        f"appended {args.append} messages to {args.out} ({store.written} in all)", file=sys.stderr
    )
    return 0
