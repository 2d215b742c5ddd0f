"""``restore --check``: does a restored store hold exactly the cold messages it came from?

The restore journal (``complete``) says what the store was built from: the parameters
(cold prefix, topics, time window) and every queue's restored range ``[start, next)``.
The check reads the store as a broker would (:class:`~tieredstore.hot.store.HotStore`)
and the cold history's links again (planned as the restore planned them), and
confirms:

* the store has exactly the journal's queues, each with min/max offsets ``start``/``next``;
* for every queue offset: the restored consume-queue unit's size and tagsCode equal the
  cold unit's; the restored record equals the cold record byte for byte outside
  [28, 36); its physicalOffset field is where it lies (its unit's commitlog offset);
* the commitlog holds no record beyond those (its record count is the units' total).

A queue with an accepted loss is planned as the restore planned it, from the first
offset after its last loss (:class:`~tieredstore.restore.plan.LossCut`), and the check
prints the same line for it.

Only the position-derived fields (physicalOffset, hence the offset message id) may
differ. A cold link expired since the restore makes the check fail: the messages it
was built from can no longer be compared.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np

from tieredstore.backends.base import Backend
from tieredstore.errors import ConfigError, StoreError, TieredStoreError
from tieredstore.formats.record import BLANK_MAGIC_CODE, PHYSICAL_OFFSET_AT
from tieredstore.formats.vector import gather_be, physical_offset_bytes
from tieredstore.hot.store import HotStore
from tieredstore.restore.journal import (
    JOURNAL_NAME,
    Journal,
    JournalState,
    QueueProgress,
    RestoreParams,
)
from tieredstore.restore.plan import QueuePlan, RestoreFilter, TimeWindow, build_plan
from tieredstore.restore.stream import Chunk, segment_chunks

__all__ = ["CheckResult", "check_restored"]

_MAX_PROBLEMS: Final = 20
_HEAD = struct.Struct(">ii")


@dataclass(slots=True)
class CheckResult:
    """Messages and queues compared; the problems found (at most 20 are kept)."""

    queues: int = 0
    messages: int = 0
    problems: list[str] = field(default_factory=list)
    more: int = 0
    #: The plan's lines for queues restored only after an accepted loss (LossCut).
    losses: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, text: str) -> None:
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(text)
        else:
            self.more += 1

    def describe(self) -> str:
        if self.ok:
            return "\n".join(
                [
                    *self.losses,
                    f"CLEAN: {self.messages:,} messages of {self.queues} queues match the "
                    "cold store (every field but physicalOffset)",
                ]
            )
        lines = [*self.losses, f"MISMATCH: {len(self.problems) + self.more} problems"]
        lines += [f"  {p}" for p in self.problems]
        if self.more:
            lines.append(f"  ... and {self.more} more")
        return "\n".join(lines)


def _load(out: Path) -> Journal:
    if not (out / JOURNAL_NAME).is_file():
        raise ConfigError(
            f"nothing to check: no {JOURNAL_NAME} here (give the --out of a restore)",
            where=str(out),
        )
    journal = Journal.load(out / JOURNAL_NAME)
    if journal.state is not JournalState.COMPLETE:
        raise StoreError("not a complete restore (resume it first)", where=str(out))
    return journal


def _same_cold(recorded: str, given: str) -> bool:
    """Whether two cold URLs name one store (local paths compared once resolved)."""
    if recorded.rstrip("/") == given.rstrip("/"):
        return True
    local = [
        u.removeprefix("file://")
        for u in (recorded, given)
        if "://" not in u.removeprefix("file://")
    ]
    return len(local) == 2 and Path(local[0]).resolve() == Path(local[1]).resolve()


def _refuse_other_source(journal: Journal, source: RestoreParams, out: Path) -> None:
    """A check against another cold store (or broker) would list every record as
    different; say once what the journal recorded instead."""
    p = journal.params
    if _same_cold(p.cold_url, source.cold_url) and (p.cluster, p.broker) == (
        source.cluster,
        source.broker,
    ):
        return
    raise ConfigError(
        f"this store was restored from {p.cold_url} ({p.cluster}/{p.broker}), not from "
        f"{source.cold_url} ({source.cluster}/{source.broker}); check it against the "
        "cold store it came from",
        where=str(out),
    )


def _mask(data: bytes | bytearray, starts: np.ndarray) -> np.ndarray:
    arr = np.frombuffer(data, dtype=np.uint8).copy()
    arr[physical_offset_bytes(starts)] = 0
    return arr


def _compare(chunk: Chunk, lo: int, hi: int, hot: HotStore, result: CheckResult) -> None:
    m = chunk.link
    first = chunk.first + lo
    units = hot.read_units(m.topic, m.queue_id, first, chunk.first + hi)
    sizes, tags = chunk.sizes[lo:hi], chunk.tags[lo:hi]
    where = f"{m.topic}/{m.queue_id}"
    for name, restored, cold in (
        ("size", units["size"], sizes),
        ("tagsCode", units["tags_code"], tags),
    ):
        bad = np.flatnonzero(restored.astype(np.int64) != cold)
        if bad.size:
            i = int(bad[0])
            result.problem(
                f"{where}@{first + i}: unit {name} {int(restored[i])}, cold {int(cold[i])}"
            )
            return
    offsets = units["commitlog_offset"].astype(np.int64)
    records = b"".join(hot.read_records_bytes(offsets, sizes))
    starts = np.concatenate((np.zeros(1, np.int64), np.cumsum(sizes)[:-1]))
    a = int(chunk.starts[lo])
    cold_bytes = chunk.data[a : int(chunk.starts[hi - 1] + sizes[-1])]
    phys = gather_be(np.frombuffer(records, dtype=np.uint8), starts + PHYSICAL_OFFSET_AT, 8)
    bad = np.flatnonzero(phys != offsets)
    if bad.size:
        i = int(bad[0])
        result.problem(
            f"{where}@{first + i}: physicalOffset {int(phys[i])}, lies at {int(offsets[i])}"
        )
        return
    if not np.array_equal(_mask(records, starts), _mask(cold_bytes, starts)):
        diff = _mask(records, starts) != _mask(cold_bytes, starts)
        at = int(np.flatnonzero(diff)[0])
        i = int(np.searchsorted(starts, at, side="right")) - 1
        result.problem(
            f"{where}@{first + i}: record differs from cold at byte {at - int(starts[i])}"
        )
        return
    result.messages += hi - lo


async def _check_queue(
    backend: Backend,
    q: QueuePlan,
    progress: QueueProgress,
    hot: HotStore,
    result: CheckResult,
    batch_bytes: int,
) -> None:
    rng = hot.queue_range(q.queue.topic, q.queue.queue_id)
    if (rng.min, rng.max) != (progress.start, progress.next):
        result.problem(
            f"{q.queue}: store offsets [{rng.min}, {rng.max}), restored "
            f"[{progress.start}, {progress.next})"
        )
        return
    for m in q.links:
        if m.end_offset <= progress.start or m.start_offset >= progress.next:
            continue
        first = max(m.start_offset, progress.start)
        async for chunk in segment_chunks(backend, m, first=first, batch_bytes=batch_bytes):
            hi = min(len(chunk), progress.next - chunk.first)
            if hi > 0:
                _compare(chunk, 0, hi, hot, result)
            if chunk.first + len(chunk) >= progress.next:
                break


def _count_records(hot: HotStore) -> int:
    """Records in the commitlog, hopping by totalSize (files end with the BLANK filler)."""
    count = 0
    for f in hot.commitlog_files().files:
        with f.path.open("rb") as fh:
            pos = 0
            while pos + 8 <= f.size:
                fh.seek(pos)
                head = fh.read(8)
                total, magic = _HEAD.unpack_from(head, 0)
                if total <= 0 or magic == BLANK_MAGIC_CODE:
                    break
                count += 1
                pos += total
    return count


async def check_restored(
    backend: Backend,
    out: Path,
    *,
    batch_bytes: int = 8 << 20,
    source: RestoreParams | None = None,
) -> CheckResult:
    """Compare the restored store in ``out`` with the cold store (module docstring).

    Raises ConfigError when ``out`` holds no restore journal, or when ``source`` (the
    cold URL, cluster and broker the caller points at) is not what the journal recorded;
    StoreError when the restore is not complete. Cold-side errors (missing or corrupt
    objects) propagate as themselves.
    """
    journal = _load(out)
    if source is not None:
        _refuse_other_source(journal, source, out)
    p = journal.params
    plan = await build_plan(
        backend, p.cluster, p.broker, RestoreFilter(p.topics, TimeWindow(p.since, p.until))
    )
    hot = HotStore(out)
    result = CheckResult(losses=[cut.describe() for cut in plan.cuts])
    planned = {(q.queue.topic, q.queue.queue_id): q for q in plan.queues}
    for key in sorted(set(journal.queues) | {(k.topic, k.queue_id) for k in hot.queues()}):
        progress = journal.queues.get(key)
        q = planned.get(key)
        if progress is None:
            result.problem(f"{key[0]}/{key[1]}: in the store but not restored from cold")
        elif q is None:
            result.problem(f"{key[0]}/{key[1]}: restored but no longer in the cold store")
        else:
            result.queues += 1
            try:
                await _check_queue(backend, q, progress, hot, result, batch_bytes)
            except TieredStoreError as exc:
                result.problem(f"{key[0]}/{key[1]}: {exc}")
    records = _count_records(hot)
    total = sum(q.next - q.start for q in journal.queues.values())
    if records != total:
        result.problem(f"commitlog holds {records} records, the consume queues {total}")
    return result
