"""The operator's side of the writer lease: ``tieredstore lease show`` and ``lease break``.

``show`` reads the lease record once and says who holds it. It cannot say whether that
holder is alive: only watching the record can
(:class:`~tieredstore.dispatcher.lease.lease.LeaseWatch`),
which is what ``break`` does.

``break`` frees a lease whose holder is gone without waiting for a sidecar to take it
over: it watches the record on this process's monotonic clock and, once the record has
stayed unchanged for its lease time, replaces it by a compare-and-swap with a *released*
record of the next epoch. That fences whoever held it: its next renewal swaps on a
version that no longer exists and it stops (LOST), and the next writer takes epoch + 2.
It refuses (LeaseHeldError) as soon as it sees the record change — a holder that renews
is alive, whatever its clock says — and when the swap itself finds a newer version.
A released or absent lease is left as it is: there is nothing to break.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass

from tieredstore.dispatcher.lease.lease import (
    LeaseObject,
    LeaseRecord,
    LeaseWatch,
    Liveness,
    Sighting,
)
from tieredstore.errors import LeaseHeldError
from tieredstore.humanize import iso_time

__all__ = ["BreakOutcome", "BreakReport", "break_lease", "describe_lease"]

log = logging.getLogger(__name__)


class BreakOutcome(enum.Enum):
    NOTHING_HELD = "nothing_held"  # no record, or a released one: left as it is
    BROKEN = "broken"  # replaced by a released record of the next epoch


@dataclass(frozen=True, slots=True)
class BreakReport:
    """What :func:`break_lease` did: the record it found and the epoch it wrote."""

    outcome: BreakOutcome
    found: LeaseRecord | None
    epoch: int  # the fencing epoch written (BROKEN), else the record's own (0: none)

    def describe(self) -> str:
        if self.outcome is BreakOutcome.NOTHING_HELD:
            return "nothing to break: the writer lease is not held"
        assert self.found is not None
        return (
            f"broke the writer lease of {self.found.owner} (epoch {self.found.epoch}): "
            f"released at epoch {self.epoch}; that holder is fenced"
        )


def describe_lease(record: LeaseRecord | None, *, now_ms: int) -> list[str]:
    """Lines for ``lease show``: holder, epoch, lease time, and the record's own clock
    (a released record: only that it is free, its epoch and when it was released).

    The times in the record come from its writer's wall clock; they are shown with
    their distance from this host's clock, which says how far the two clocks disagree
    (plus the time since the last renewal), never whether the holder is alive.
    """
    if record is None:
        return ["no lease record: no sidecar has written to this broker's prefix yet"]
    renewed = iso_time(record.renewed_at_ms, timespec="auto", zulu=False)
    if not record.owner:  # released: no lease time, and its clock says nothing now
        return [
            "holder:     nobody (released)",
            f"epoch:      {record.epoch} (the next sidecar takes {record.epoch + 1} at once)",
            f"released:   {renewed} by the last holder's clock",
        ]
    holder = record.owner
    ahead = (record.renewed_at_ms - now_ms) / 1000
    return [
        f"holder:     {holder}",
        f"epoch:      {record.epoch}",
        f"lease time: {record.lease_ms / 1000:.0f}s (a holder silent this long is dead)",
        f"renewed at: {renewed} by the holder's clock, {ahead:+.0f}s from this host's",
        "liveness:   not judged from clocks; `tieredstore lease break --force` watches "
        "the record for one lease time and refuses if it is renewed",
    ]


async def break_lease(
    lease: LeaseObject, *, on_watch: Callable[[Sighting], None] | None = None
) -> BreakReport:
    """Free the lease if its record stays unchanged for its lease time (module doc).

    ``on_watch`` is called once, with the first reading of a held lease, before the
    watch begins (the CLI prints how long it will take). Raises LeaseHeldError when the
    record changes while watched or as it is swapped.
    """
    lease.require_fencing()
    watch = LeaseWatch(lease.clock, owner=lease.owner, default_lease_ms=lease.ttl_ms)
    first = True
    while True:
        seen = watch.observe(await lease.read_versioned())
        found = None if seen.current is None else seen.current.record
        if seen.liveness is Liveness.FREE:
            return BreakReport(BreakOutcome.NOTHING_HELD, found, found.epoch if found else 0)
        if seen.liveness is Liveness.RENEWED:
            raise LeaseHeldError(
                f"{seen.holder} still renews the writer lease (its record changed while "
                "this command watched): not broken",
                where=lease.key,
            )
        if seen.liveness is Liveness.SILENT:
            return await _fence(lease, seen)
        if first and on_watch is not None:
            on_watch(seen)
        first = False
        await lease.clock.sleep(seen.poll_s)


async def _fence(lease: LeaseObject, seen: Sighting) -> BreakReport:
    """Swap the silent record for a released one of the next epoch."""
    assert seen.current is not None
    old = seen.current.record
    now = lease.clock.now_ms()
    released = LeaseRecord("", old.epoch + 1, now, now)
    if await lease.swap(released, seen.current) is None:
        raise LeaseHeldError(
            f"the writer lease changed as it was being broken ({seen.holder}): not broken",
            where=lease.key,
        )
    log.warning("lease broken: %s, held by %s, released at epoch %d", lease.key,
                seen.holder, released.epoch)  # fmt: skip
    return BreakReport(BreakOutcome.BROKEN, old, released.epoch)
