"""``tieredstore synth``: write a synthetic RocketMQ store for demos, tests, benchmarks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tieredstore.config import parse_size
from tieredstore.errors import ConfigError
from tieredstore.synth import SynthSpec, synthesize


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
    p.add_argument("--topics", type=int, default=d.topics, help="number of topics")
    p.add_argument("--queues", type=int, default=d.queues, help="queues per topic")
    p.add_argument("--messages", type=int, default=d.messages, help="messages in total")
    p.add_argument(
        "--body-size",
        type=_body_range,
        default=(d.body_min, d.body_max),
        help="body size or MIN:MAX range in bytes (default %(default)s)",
    )
    p.add_argument("--commitlog-file-size", type=_size, default=d.commitlog_file_size)
    p.add_argument("--cq-file-size", type=_size, default=d.cq_file_size)
    p.add_argument("--start-time", type=int, default=d.start_time, help="first store time (ms)")
    p.add_argument("--interval-ms", type=int, default=d.interval_ms, help="store-time step")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--no-tags", action="store_true", help="write no TAGS")
    p.add_argument("--no-keys", action="store_true", help="write no KEYS")
    p.add_argument("--compress-over", type=_size, default=d.compress_over, help="0 = never")
    p.add_argument("--long-topic", action="store_true", help="add a >127-byte topic (v2)")
    p.add_argument("--ipv6", action="store_true", help="IPv6 born/store hosts")
    p.add_argument("--prepared-every", type=int, default=0, help="every Nth is PREPARED")
    p.add_argument("--queue-start", type=int, default=0, help="first offset of each queue")


def run(args: argparse.Namespace) -> int:
    spec = SynthSpec(
        topics=args.topics,
        queues=args.queues,
        messages=args.messages,
        body_min=args.body_size[0],
        body_max=args.body_size[1],
        commitlog_file_size=args.commitlog_file_size,
        cq_file_size=args.cq_file_size,
        start_time=args.start_time,
        interval_ms=args.interval_ms,
        seed=args.seed,
        tags=not args.no_tags,
        keys=not args.no_keys,
        compress_over=args.compress_over,
        long_topic=args.long_topic,
        ipv6=args.ipv6,
        prepared_every=args.prepared_every,
        queue_start=args.queue_start,
    )
    try:
        store = synthesize(args.out, spec)
    except OSError as exc:
        raise ConfigError(f"cannot write store: {exc.strerror}", where=str(args.out)) from exc
    print(f"wrote {store.written} messages to {args.out}", file=sys.stderr)
    return 0
