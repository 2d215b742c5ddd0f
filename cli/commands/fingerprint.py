"""``tieredstore fingerprint``: fingerprint the hot store into the cold store.

Run on each broker host (cron), before the nightly fleet verification
(``tieredstore verify --fleet``). Reads every hot queue block by block, paced by
``--max-bytes-per-second`` so that it never starves the broker, and writes one hot
fingerprint (its format :mod:`tieredstore.cold.fingerprint`, taken by
:mod:`tieredstore.verifier.fleet.take`) under the broker's cold prefix,
``_fingerprints/s<sequence>-<taken_ms>.json``, create-if-absent at one past the highest
sequence listed (taken meanwhile by another run: list again, next sequence). The sequence,
not the host clock, decides which fingerprint is newest.

Incremental: a run carries forward from the broker's newest fingerprint every block the
broker still holds unchanged (:mod:`tieredstore.verifier.fleet.carry`: the same range,
its first and last leaves hashing as they did) and reads the rest; a run whose sequence
is a multiple of ``--full-every`` (default 7), or whose previous fingerprint cannot be
used (:mod:`tieredstore.verifier.fleet.previous`), reads every block and prints one line
saying why. No Spark, no JVM; memory is three
blocks' records (a worker thread hashes two while the next is read). The fingerprint is
computed from hot bytes only: never from the sidecar's catalogue or its tiering path;
the only thing read from cold is the broker's tiering record, for the times its
``stored_from`` offsets are searched at.

Exit codes: 0 written; 1 a runtime failure (a hot file that does not read, the cold
store refusing the write); 3 bad flag or configuration, no tiering record at the broker
prefix, or a cold store that cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from pathlib import Path
from typing import Final

from tieredstore.backends import open_backend
from tieredstore.backends.base import Backend
from tieredstore.backends.factory import COMMAND_RETRY, canonical_cold_url
from tieredstore.backends.options import BackendOptions
from tieredstore.cli.commands._settings import non_negative_int
from tieredstore.clock import SystemClock
from tieredstore.cold.layout import fingerprint_key
from tieredstore.cold.provenance import find_tiered_prefix
from tieredstore.errors import ConditionFailedError, ConfigError, NotAStoreError
from tieredstore.hot.store import HotStore
from tieredstore.humanize import human_bytes
from tieredstore.ratelimit import TokenBucket
from tieredstore.verifier.fleet.previous import (
    list_fingerprints,
    previous_fingerprint,
    sequence_after,
)
from tieredstore.verifier.fleet.take import (
    DEFAULT_BLOCK_OFFSETS,
    DEFAULT_LEAF_OFFSETS,
    take_carrying,
)

#: The default pace: a tenth of a modest disk's sequential read rate.
DEFAULT_MAX_BYTES_PER_SECOND = 64 << 20
#: How many times the create moves to a later sequence before it gives up.
MAX_RESEQUENCE: Final = 4
#: One run in this many reads every block whole (the others carry unchanged blocks).
DEFAULT_FULL_EVERY: Final = 7


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, type=Path, help="broker store root (read-only)")
    p.add_argument("--cold", required=True, help="cold store root URL (path, file://, s3://)")
    p.add_argument("--cluster", required=True, help="broker cluster name")
    p.add_argument("--broker", required=True, help="broker name")
    p.add_argument("--endpoint-url", default=None, help="S3 endpoint URL (MinIO, moto, ...)")
    p.add_argument("--region", default=None, help="S3 region")
    p.add_argument(
        "--max-bytes-per-second",
        type=non_negative_int,
        default=DEFAULT_MAX_BYTES_PER_SECOND,
        help="read at most this many hot bytes per second (0: unlimited; default "
        f"{human_bytes(DEFAULT_MAX_BYTES_PER_SECOND)}/s)",
    )
    p.add_argument(
        "--block-offsets",
        type=non_negative_int,
        default=DEFAULT_BLOCK_OFFSETS,
        help="queue offsets per digest block (default %(default)s)",
    )
    p.add_argument(
        "--leaf-offsets",
        type=non_negative_int,
        default=DEFAULT_LEAF_OFFSETS,
        help="queue offsets per leaf digest, the unit the fleet job compares (default %(default)s)",
    )
    p.add_argument(
        "--full-every",
        type=non_negative_int,
        default=DEFAULT_FULL_EVERY,
        help="read every block whole when the run's sequence is a multiple of this; the other "
        "runs carry forward the blocks the broker still holds unchanged (1: every run is "
        "full; default %(default)s)",
    )


async def next_sequence(cold: Backend, cluster: str, broker: str) -> int:
    """One past the highest fingerprint sequence listed for the broker (0 if none)."""
    return sequence_after(await list_fingerprints(cold, cluster, broker))


async def _fingerprint(args: argparse.Namespace) -> int:
    if args.block_offsets == 0:
        raise ConfigError("bad --block-offsets: must be at least 1")
    if args.leaf_offsets == 0:
        raise ConfigError("bad --leaf-offsets: must be at least 1")
    if args.full_every == 0:
        raise ConfigError("bad --full-every: must be at least 1")
    if not args.store.is_dir():
        raise NotAStoreError("hot store directory does not exist", where=str(args.store))
    hot = HotStore(args.store)
    cluster, broker = args.cluster, args.broker
    options = BackendOptions(endpoint_url=args.endpoint_url, region=args.region)
    clock = SystemClock()
    bucket = TokenBucket(clock, args.max_bytes_per_second) if args.max_bytes_per_second else None
    where = canonical_cold_url(args.cold)
    async with open_backend(args.cold, options=options, retry=COMMAND_RETRY) as cold:
        record = await find_tiered_prefix(cold, cluster, broker, where=where, require_record=True)
        since = tuple(sorted({e.since_ms for e in record.history})) if record else ()
        names = await list_fingerprints(cold, cluster, broker)
        previous = await previous_fingerprint(
            cold, names, cluster=cluster, broker=broker,
            sequence=sequence_after(names),
            full_every=args.full_every, block_offsets=args.block_offsets,
            leaf_offsets=args.leaf_offsets,
        )  # fmt: skip
        if previous.fingerprint is None:
            print(f"fingerprint: a full run: {previous.why_full}")
        taken = await take_carrying(
            hot, previous.fingerprint, cluster=cluster, broker=broker, clock=clock,
            bucket=bucket, block_offsets=args.block_offsets, leaf_offsets=args.leaf_offsets,
            since_ms=since,
        )  # fmt: skip
        fp = taken.fingerprint
        for attempt in range(MAX_RESEQUENCE):
            fp = dataclasses.replace(fp, sequence=await next_sequence(cold, cluster, broker))
            key = fingerprint_key(cluster, broker, stamp_ms=fp.taken_ms, sequence=fp.sequence)
            data = fp.to_bytes()
            try:
                await cold.create(key, data)
                break
            except ConditionFailedError as exc:
                if attempt == MAX_RESEQUENCE - 1:
                    raise ConditionFailedError(
                        f"fingerprint sequence taken {MAX_RESEQUENCE} times over by other runs",
                        where=key,
                    ) from exc
    blocks = sum(len(q.blocks) for q in fp.queues)
    print(
        f"fingerprint {key}: {len(fp.queues)} queues, {blocks} blocks "
        f"({taken.carried_blocks} carried forward), {human_bytes(taken.read_bytes)} of "
        f"{human_bytes(fp.hot_bytes)} of hot data read, {human_bytes(len(data))} written"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_fingerprint(args))
