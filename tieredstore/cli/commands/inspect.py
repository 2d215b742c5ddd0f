"""``tieredstore inspect``: list a hot store's queues with their hot min/max offsets."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from tieredstore.cli.commands.status_view import fit
from tieredstore.hot_store import HotStore


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, type=Path, help="broker store root directory")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    store = HotStore(args.store)
    rows: list[dict[str, str | int]] = []
    for q in store.queues():
        r = store.queue_range(q.topic, q.queue_id)
        rows.append({"topic": q.topic, "queue": q.queue_id, "min": r.min, "max": r.max})
    if args.json:
        print(json.dumps({"checkpoint": asdict(store.checkpoint()), "queues": rows}))
        return 0
    print(f"{'topic':<40} {'queue':>5} {'hot min':>12} {'hot max':>12}")
    for row in rows:
        topic = fit(str(row["topic"]), 40)  # a cut name says so; --json has it whole
        print(f"{topic:<40} {row['queue']:>5} {row['min']:>12} {row['max']:>12}")
    return 0
