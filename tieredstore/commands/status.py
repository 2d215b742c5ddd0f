"""``tieredstore status``: per queue hot min/max, cold min/commit, lag and state.

Reads the broker store and the catalogue (read-only, so it works next to a running
sidecar); it never contacts the cold store.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass

from tieredstore.commands._settings import add_settings_arguments, settings_from_args
from tieredstore.errors import TieredStoreError
from tieredstore.hotstore import HotStore


@dataclass(frozen=True, slots=True)
class QueueStatus:
    topic: str
    queue: int
    state: str
    hot_min: int
    hot_max: int
    cold_min: int
    cold_commit: int
    lag_messages: int
    lag_bytes: int
    lag_seconds: float
    note: str


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON")


def collect(hot: HotStore, rows: list[object], now_ms: int) -> list[QueueStatus]:
    """Join catalogue rows with the hot store's current offsets."""
    from metadata.rows import QueueRow

    out: list[QueueStatus] = []
    for row in rows:
        assert isinstance(row, QueueRow)
        note = ""
        try:
            rng = hot.queue_range(row.topic, row.queue_id)
            lag = max(rng.max - row.cold_commit, 0)
            lag_bytes, lag_s = 0, 0.0
            start = max(row.cold_commit, rng.min)
            if start < rng.max:
                units = hot.read_units(row.topic, row.queue_id, start, rng.max)
                lag_bytes = int(units["size"].sum())
                oldest = hot.read_store_timestamp(int(units["commitlog_offset"][0]))
                lag_s = max(now_ms - oldest, 0) / 1000
            if rng.max < row.cold_commit:
                note = "hot max below cold commit"
            elif rng.min > row.cold_commit:
                note = f"hot offsets [{row.cold_commit}, {rng.min}) deleted before tiering"
        except TieredStoreError as exc:
            rng_min = rng_max = -1
            lag, lag_bytes, lag_s, note = 0, 0, 0.0, str(exc)
        else:
            rng_min, rng_max = rng.min, rng.max
        out.append(
            QueueStatus(
                topic=row.topic,
                queue=row.queue_id,
                state=row.state.name,
                hot_min=rng_min,
                hot_max=rng_max,
                cold_min=row.cold_min,
                cold_commit=row.cold_commit,
                lag_messages=lag,
                lag_bytes=lag_bytes,
                lag_seconds=lag_s,
                note=note,
            )
        )
    return out


def run(args: argparse.Namespace) -> int:
    from metadata.catalogue import Catalogue

    # status never touches the cold store, so a cold URL is not required here.
    settings = settings_from_args(args, extra={"cold.url": args.cold or "memory://unused"})
    hot = HotStore(settings.store_path)
    with Catalogue.open(
        settings.state_dir, cluster=settings.cluster, broker=settings.broker, read_only=True
    ) as catalogue:
        rows: list[object] = list(catalogue.queues())
    statuses = collect(hot, rows, time.time_ns() // 1_000_000)
    if args.json:
        print(json.dumps({"queues": [asdict(s) for s in statuses]}, indent=1))
        return 0
    head = f"{'topic':<32} {'q':>3} {'state':<8} {'hot min':>9} {'hot max':>9} "
    head += f"{'cold min':>9} {'cold commit':>11} {'lag msgs':>9} {'lag MB':>8} {'lag s':>7}"
    print(head)
    for s in statuses:
        print(
            f"{s.topic[:32]:<32} {s.queue:>3} {s.state:<8} {s.hot_min:>9} {s.hot_max:>9} "
            f"{s.cold_min:>9} {s.cold_commit:>11} {s.lag_messages:>9} "
            f"{s.lag_bytes / 1e6:>8.2f} {s.lag_seconds:>7.1f}" + (f"  {s.note}" if s.note else "")
        )
    return 0
