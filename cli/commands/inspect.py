"""``tieredstore inspect``: a hot store's checkpoint (one line), then its queues with
their hot min/max offsets (``--json``: the same as one object)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from tieredstore.cli.commands.status_view import fit
from tieredstore.formats.checkpoint import Checkpoint
from tieredstore.hot.store import HotStore
from tieredstore.humanize import iso_time


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, type=Path, help="broker store root directory")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def checkpoint_line(cp: Checkpoint) -> str:
    """The checkpoint in one line: what the broker has flushed, by store time (UTC)."""
    return (
        f"checkpoint: commitlog flushed to {iso_time(cp.physic_msg_timestamp)}, consume "
        f"queues to {iso_time(cp.logics_msg_timestamp)}, index to "
        f"{iso_time(cp.index_msg_timestamp)}; master flushed offset "
        f"{cp.master_flushed_offset}, confirm offset {cp.confirm_phy_offset}"
    )


def run(args: argparse.Namespace) -> int:
    store = HotStore(args.store)
    rows: list[dict[str, str | int]] = []
    for q in store.queues():
        r = store.queue_range(q.topic, q.queue_id)
        rows.append({"topic": q.topic, "queue": q.queue_id, "min": r.min, "max": r.max})
    if args.json:
        print(json.dumps({"checkpoint": asdict(store.checkpoint()), "queues": rows}))
        return 0
    print(checkpoint_line(store.checkpoint()), end="\n\n")
    print(f"{'topic':<40} {'queue':>5} {'hot min':>12} {'hot max':>12}")
    for row in rows:
        topic = fit(str(row["topic"]), 40)  # a cut name says so; --json has it whole
        print(f"{topic:<40} {row['queue']:>5} {row['min']:>12} {row['max']:>12}")
    return 0
