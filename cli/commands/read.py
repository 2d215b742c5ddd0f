"""``tieredstore read``: decode messages of one queue from the cold store alone.

Works from the cold store's manifests (no catalogue, no broker store), so it runs
anywhere the bucket is reachable. ``--offset N`` reads from queue offset N;
``--timestamp MS`` first finds the offset by store time (``--boundary lower``: the first
message at or after MS; ``upper``: the last one at or before MS — see
:mod:`tieredstore.cold.reader` for the table). ``--count K`` messages are printed (fewer at
the end of what cold holds), as JSON lines or readable text.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TextIO

from tieredstore.backends import open_cold
from tieredstore.cli.commands._settings import (
    add_settings_arguments,
    parse_time,
    positive_int,
    settings_from_args,
)
from tieredstore.cold.provenance import find_tiered_prefix
from tieredstore.cold.reader import BoundaryType, ColdMessage, ColdReader
from tieredstore.errors import OffsetOutOfRangeError
from tieredstore.humanize import iso_time
from tieredstore.settings.loader import Settings


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings_arguments(p, store=False)
    p.add_argument("--topic", required=True, help="topic to read")
    p.add_argument("--queue", type=_non_negative, required=True, help="queue id")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--offset", type=_non_negative, help="first queue offset to read")
    where.add_argument(
        "--timestamp",
        type=parse_time,
        help="start at this store time (epoch ms or ISO 8601, no zone = UTC)",
    )
    p.add_argument(
        "--boundary",
        choices=[b.value for b in BoundaryType],
        default=BoundaryType.LOWER.value,
        help="with --timestamp: lower = first message at or after it, "
        "upper = last message at or before it (default lower)",
    )
    p.add_argument("--count", type=positive_int, default=1, help="messages to print (default 1)")
    p.add_argument(
        "--format", choices=["json", "text"], default="json", help="JSON lines or readable text"
    )


def _iso(ms: int) -> str:
    return iso_time(ms, timespec="milliseconds", zulu=False)


def _print_text(m: ColdMessage, out: TextIO) -> None:
    r = m.record
    encoding, body = m.body_text()
    out.write(
        f"{r.topic}/{r.queue_id} offset {m.queue_offset}  msgId {m.msg_id or '-'}  "
        f"offsetMsgId {m.offset_msg_id}\n"
        f"  stored {_iso(r.store_timestamp)} by {r.store_host}  "
        f"born {_iso(r.born_timestamp)} at {r.born_host}\n"
        f"  tags {r.tags or '-'}  keys {' '.join(r.keys) or '-'}\n"
    )
    for name, value in sorted(r.properties.items()):
        out.write(f"  property {name}={value!r}\n")
    out.write(f"  body ({encoding}, {len(m.body)} bytes): {body}\n\n")


async def _read(settings: Settings, args: argparse.Namespace, out: TextIO) -> int:
    async with open_cold(settings.cold) as backend:
        await find_tiered_prefix(
            backend, settings.cold.cluster, settings.cold.broker,
            where=settings.cold_url_redacted, require_record=False,
        )  # fmt: skip
        reader = ColdReader(backend, settings.cold.cluster, settings.cold.broker)
        offset = args.offset
        if args.timestamp is not None:
            boundary = BoundaryType(args.boundary)
            offset = await reader.offset_by_time(args.topic, args.queue, args.timestamp, boundary)
            rng = await reader.range(args.topic, args.queue)
            if offset == rng.commit:
                raise OffsetOutOfRangeError(
                    f"every message of {args.topic}/{args.queue} in cold {rng} is older than "
                    f"timestamp {args.timestamp}"
                )
        async for message in reader.iter_messages(args.topic, args.queue, offset, args.count):
            if args.format == "json":
                out.write(json.dumps(message.to_json(), ensure_ascii=False) + "\n")
            else:
                _print_text(message, out)
    return 0


def run(args: argparse.Namespace) -> int:
    # read needs only the cold store: the broker store and state dir are not used.
    settings = settings_from_args(args, extra={"store.path": "-", "state.dir": "-"}, check=False)
    return asyncio.run(_read(settings, args, sys.stdout))
