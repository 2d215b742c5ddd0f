"""The single-writer lease: one object ``_lease.json`` in the broker's cold prefix.

A lease record holds the owner (random UUID + hostname: never IP@PID, which collides
between containers sharing a host network), a monotonically increasing epoch, and an
expiry. The holder renews it every ``renew_interval``; it expires after three intervals
without renewal. A graceful stop *releases* it (owner cleared, epoch kept) so a
replacement takes over at once, with the next epoch.

**Every change is a compare-and-swap.** Acquire, renew and release are conditional on the
version of the lease object this writer last saw (:meth:`Backend.replace`: S3
``If-Match`` on the ETag, POSIX under an exclusive lock; the very first acquire is a
create-if-absent, S3 ``If-None-Match: *``). Two writers can never both win: the loser's
write fails with ConditionFailedError and nothing of it lands. A retried write whose first
reply was lost may fail its condition against its own record; the lease reads the object
back and recognises its own record (same owner, epoch and renewal time).

**No writer trusts another's clock.** Each successful acquire or renew sets the
holder's deadline on the process's monotonic clock: the moment the write was *sent*, plus
the lease time, minus a safety margin (one renew interval). :meth:`Lease.check` — called
before every segment upload chunk, manifest, retention delete and gc delete — compares
only against that deadline: no value read earlier, no wall clock. A *waiter* judges the
holder dead only when the record has stayed unchanged (same version, same content) for
the record's lease time on the waiter's own monotonic clock (:class:`LeaseWatch`); the
wall-clock times in the record are never compared with the waiter's clock, so a holder
whose clock runs a day ahead (or behind) neither blocks a successor for a day nor is
taken over while it renews. Why the two never overlap: the waiter first sees a record
after its write landed, hence after the holder sent it; the holder stops at ``sent +
ttl - margin``, the waiter takes over no earlier than ``seen + ttl``, one margin later
(monotonic clocks agree on durations, whatever their wall clocks say). Committed data
never depends on this timing: every change is a compare-and-swap, manifests are only
created, never replaced, and data objects never share names (:mod:`tieredstore.cold.layout`).

**A lapse is not a loss.** When the deadline passes before a renewal landed (the process
was paused, the event loop blocked, the backend slow), the lease is LAPSED: every check
raises :class:`LeaseLapsedError` and nothing is written. The next renewal
reclaims it with a compare-and-swap on the version this writer last wrote, keeping its
epoch. That swap succeeds only if no other writer wrote the lease object since, i.e.
nobody took over, so nobody else can have committed under another epoch in between; if
someone did, the swap fails and the lease is LOST for good (the sidecar stops as fenced).

States (:class:`LeaseState`)::

    NOT_HELD ──acquire──▶ HELD ──deadline passed──▶ LAPSED ──reclaimed──▶ HELD
                           │                           │
                           ├──release──▶ RELEASED      └──taken over──▶ LOST
                           └──taken over──▶ LOST
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import socket
import uuid
from dataclasses import asdict, dataclass
from typing import TypedDict, Unpack

from tieredstore.backends.base import Backend
from tieredstore.clock import Clock
from tieredstore.errors import (
    ConditionFailedError,
    ConfigError,
    CorruptManifestError,
    LeaseHeldError,
    LeaseLapsedError,
    LeaseLostError,
    ObjectNotFoundError,
)

__all__ = [
    "Lease",
    "LeaseObject",
    "LeaseOptions",
    "LeaseRecord",
    "LeaseState",
    "LeaseWatch",
    "Liveness",
    "Sighting",
    "VersionedLease",
    "new_owner_id",
]

log = logging.getLogger(__name__)

EXPIRY_FACTOR = 3


def new_owner_id() -> str:
    """A unique writer id: random UUID + hostname."""
    return f"{uuid.uuid4()}@{socket.gethostname()}"


class LeaseState(enum.Enum):
    NOT_HELD = "not_held"
    HELD = "held"
    LAPSED = "lapsed"
    RELEASED = "released"
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The content of ``_lease.json``. ``owner == ""`` means released.

    ``renewals`` counts the holder's writes under its epoch, so every renewal changes
    the record even when the holder's wall clock stands still: waiters judge liveness
    by change (:class:`LeaseWatch`). Records of earlier versions have none (0); earlier
    versions ignore it.
    """

    owner: str
    epoch: int
    expires_at_ms: int
    renewed_at_ms: int
    renewals: int = 0

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, *, where: str) -> LeaseRecord:
        try:
            doc = json.loads(data)
            return cls(
                owner=str(doc["owner"]),
                epoch=int(doc["epoch"]),
                expires_at_ms=int(doc["expires_at_ms"]),
                renewed_at_ms=int(doc["renewed_at_ms"]),
                renewals=int(doc.get("renewals", 0)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptManifestError(f"lease object is not valid: {exc}", where=where) from exc

    @property
    def lease_ms(self) -> int:
        """The lease time this record states: a duration on its writer's clock (the two
        times are read from one clock at one instant), 0 when it states none."""
        return max(self.expires_at_ms - self.renewed_at_ms, 0)

    def live(self, now_ms: int) -> bool:
        """By the wall clock of the reader: informational only (a waiter never decides
        by it, see :class:`LeaseWatch`)."""
        return bool(self.owner) and self.expires_at_ms > now_ms


@dataclass(frozen=True, slots=True)
class VersionedLease:
    """A lease record with the backend version a conditional write must name."""

    record: LeaseRecord
    version: str


class Liveness(enum.Enum):
    """What one waiter has seen of the lease record so far (:class:`LeaseWatch`)."""

    FREE = "free"  # no record, released, or this writer's own: take it at once
    WATCHING = "watching"  # held, unchanged since first seen, for less than its lease time
    RENEWED = "renewed"  # held, and seen changing within its lease time: its holder lives
    SILENT = "silent"  # held, unchanged for its lease time on our clock: its holder is dead

    @property
    def claimable(self) -> bool:
        return self in (Liveness.FREE, Liveness.SILENT)


@dataclass(frozen=True, slots=True)
class Sighting:
    """One reading of the lease record, judged by :meth:`LeaseWatch.observe`."""

    liveness: Liveness
    current: VersionedLease | None
    unchanged_ms: int  # on the watcher's monotonic clock, since it last saw a change
    lease_ms: int  # how long the record may stay unchanged before its holder is dead

    @property
    def holder(self) -> str:
        """``owner (epoch N)``, or ``nobody``."""
        if self.current is None or not self.current.record.owner:
            return "nobody"
        return f"{self.current.record.owner} (epoch {self.current.record.epoch})"

    @property
    def poll_s(self) -> float:
        """How long to wait before the next reading: four readings per renew interval
        of the holder (its lease time is three), so a renewal is seen within about one
        interval, whatever interval this reader is configured with."""
        return max(self.lease_ms / 12_000, 0.01)

    @property
    def left_s(self) -> float:
        """Seconds of silence still needed before the holder counts as dead."""
        return max(self.lease_ms - self.unchanged_ms, 0) / 1000


class LeaseWatch:
    """A waiter's watch over the lease record, timed on its own monotonic clock.

    :meth:`observe` is called with each reading. A reading that differs from the
    previous one (version or content) restarts the timer and proves the holder alive;
    one unchanged for the record's lease time (:attr:`LeaseRecord.lease_ms`, or
    ``default_lease_ms`` for a record that states none) proves it dead. Readings may be
    far apart: versions never repeat, so "unchanged between two readings an hour apart"
    means nobody wrote the lease in that hour. The first reading proves nothing, so
    even a dead holder is taken over only one lease time after a waiter first looked.
    """

    def __init__(self, clock: Clock, *, owner: str, default_lease_ms: int) -> None:
        self.clock = clock
        self.owner = owner
        self.default_lease_ms = default_lease_ms
        self._last: VersionedLease | None = None
        self._since_ms = 0
        self._seen = False
        self._changes = 0

    def observe(self, current: VersionedLease | None) -> Sighting:
        """Judge ``current`` (just read) against what this watch saw before."""
        now = self.clock.monotonic_ms()
        if not self._seen or current != self._last:
            if self._seen:
                self._changes += 1
            self._seen, self._last, self._since_ms = True, current, now
        unchanged = now - self._since_ms
        record = None if current is None else current.record
        lease_ms = (record.lease_ms if record else 0) or self.default_lease_ms
        if record is None or not record.owner or record.owner == self.owner:
            liveness = Liveness.FREE
        elif unchanged >= lease_ms:
            liveness = Liveness.SILENT
        else:
            liveness = Liveness.RENEWED if self._changes else Liveness.WATCHING
        return Sighting(liveness, current, unchanged, lease_ms)


#: What :meth:`Lease.try_acquire` reports when another claim won a race but the lease
#: object could not be read back: treated as held, so the caller waits and tries again.
_CONTENDED = LeaseRecord(owner="(contended)", epoch=0, expires_at_ms=0, renewed_at_ms=0)


class LeaseObject:
    """The lease object in the cold store as one writer reads and swaps it: the part
    of :class:`Lease` that keeps no holder state (``lease show`` and ``lease break``
    use it alone)."""

    def __init__(
        self,
        backend: Backend,
        key: str,
        clock: Clock,
        *,
        renew_interval: float = 10.0,
        owner: str | None = None,
        allow_unconditional_writes: bool = False,
    ) -> None:
        self.backend = backend
        self.allow_unconditional_writes = allow_unconditional_writes
        self.key = key
        self.clock = clock
        self.renew_interval = renew_interval
        self.owner = owner or new_owner_id()

    @property
    def ttl_ms(self) -> int:
        return int(self.renew_interval * EXPIRY_FACTOR * 1000)

    @property
    def margin_ms(self) -> int:
        """How long before the record's expiry the holder stops writing: one interval."""
        return int(self.renew_interval * 1000)

    async def read(self) -> LeaseRecord | None:
        """Return the current lease record, or None when there has never been one."""
        current = await self.read_versioned()
        return None if current is None else current.record

    async def read_versioned(self) -> VersionedLease | None:
        """Return the current record and its version, or None when there is none.

        A lease that does not parse is read again (up to three reads in all): a
        truncated response must not look like a corrupt lease. Only a lease that stays
        unparseable raises CorruptManifestError.
        """
        for attempt in range(3):
            try:
                got = await self.backend.read_versioned(self.key)
            except ObjectNotFoundError:
                return None
            try:
                return VersionedLease(LeaseRecord.from_json(got.data, where=self.key), got.version)
            except CorruptManifestError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def swap(self, mine: LeaseRecord, current: VersionedLease | None) -> str | None:
        """Write ``mine`` conditionally on ``current`` (None: create if absent); return
        its version, or None if another write won (a lost reply of our own write counts
        as ours)."""
        try:
            if current is None:
                return await self.backend.create(self.key, mine.to_json())
            return await self.backend.replace(self.key, mine.to_json(), version=current.version)
        except ConditionFailedError:
            now = await self.read_versioned()
            if now is not None and now.record == mine:
                return now.version
            return None

    def require_fencing(self) -> None:
        """Refuse (ConfigError) a backend without atomic conditional writes, unless
        ``allow_unconditional_writes`` (then warn): called before the first write."""
        if self.backend.conditional_writes:
            return
        if not self.allow_unconditional_writes:
            raise ConfigError(
                f"cold store {self.backend.url} cannot create objects or swap the lease "
                "atomically (generic fsspec backend): refusing to write; set "
                "cold.allow_unconditional_writes = true to accept weaker fencing "
                "(docs/reliability.md)"
            )
        log.warning(
            "cold store %s has no atomic conditional writes: fencing between sidecars "
            "rests on timing (cold.allow_unconditional_writes)",
            self.backend.url,
        )


class LeaseOptions(TypedDict, total=False):
    """The keyword options of :class:`LeaseObject` (and so of :class:`Lease`)."""

    renew_interval: float
    owner: str | None
    allow_unconditional_writes: bool


class Lease(LeaseObject):
    """This process's view of the broker's writer lease."""

    def __init__(
        self, backend: Backend, key: str, clock: Clock, **options: Unpack[LeaseOptions]
    ) -> None:
        super().__init__(backend, key, clock, **options)
        self.state = LeaseState.NOT_HELD
        self.epoch = 0
        self.renewals = 0  # of the record last written (LeaseRecord.renewals)
        self.expires_at_ms = 0
        self.version = ""
        self.deadline_ms = 0  # on clock.monotonic_ms(): writes stop here
        self.lost_reason = ""
        # Kept for the object's life: earlier readings count (see LeaseWatch).
        self.watch = LeaseWatch(clock, owner=self.owner, default_lease_ms=self.ttl_ms)
        # One swap at a time: the renewal loop and a job's hold_lease may both find a
        # renewal due; two swaps from the same version would fence this writer itself.
        self._swapping = asyncio.Lock()

    def renewal_due(self) -> bool:
        """A renew interval has passed since the last renewal was sent (monotonic)."""
        sent_ms = self.deadline_ms - self.ttl_ms + self.margin_ms
        return self.clock.monotonic_ms() - sent_ms >= self.margin_ms

    def remaining_ms(self) -> int:
        """Milliseconds left before this holder's own deadline (0 when not held)."""
        if self.state is not LeaseState.HELD:
            return 0
        return max(self.deadline_ms - self.clock.monotonic_ms(), 0)

    def _record(self, epoch: int) -> LeaseRecord:
        now = self.clock.now_ms()
        renewals = self.renewals + 1 if epoch == self.epoch else 0
        return LeaseRecord(self.owner, epoch, now + self.ttl_ms, now, renewals)

    def _hold(self, record: LeaseRecord, version: str, sent_ms: int) -> None:
        self.state, self.epoch, self.version = LeaseState.HELD, record.epoch, version
        self.renewals = record.renewals
        self.expires_at_ms = record.expires_at_ms
        self.deadline_ms = sent_ms + self.ttl_ms - self.margin_ms

    async def try_acquire(self) -> LeaseRecord | None:
        """Read the lease once and claim it if free or silent; None on success, else
        the holder's record (judged by :attr:`watch`, so earlier calls count).

        Raises ConfigError on a backend whose conditional writes are not atomic (generic
        fsspec), unless ``allow_unconditional_writes``: every writer takes the lease
        before its first write, so this is where such a backend is refused.
        """
        seen = await self._look()
        if seen.liveness.claimable and await self._claim(seen.current):
            return None
        if seen.current is None or seen.liveness.claimable:  # another claim landed first
            return (await self.read()) or _CONTENDED
        return seen.current.record

    async def _look(self) -> Sighting:
        self.require_fencing()
        return self.watch.observe(await self.read_versioned())

    async def _claim(self, current: VersionedLease | None) -> bool:
        """Take the lease by a swap on ``current``; False if another write landed first."""
        epoch = (current.record.epoch if current else 0) + 1
        mine = self._record(epoch)
        sent = self.clock.monotonic_ms()
        version = await self.swap(mine, current)
        if version is None:
            return False
        self._hold(mine, version, sent)
        log.info("lease acquired: %s epoch %d", self.key, epoch)
        return True

    async def acquire(self, *, wait: bool) -> int:
        """Acquire the lease and return its epoch.

        A free lease (none yet, released, or this writer's) is taken at once. One held
        by another writer is watched (:class:`LeaseWatch`) and taken over once unchanged
        for its lease time on this process's clock. With ``wait`` the watch goes on as
        long as the holder renews; without it, LeaseHeldError is raised as soon as a
        renewal is seen. So ``wait=False`` still takes over a dead holder's lease, after
        one lease time, and refuses a live one within about one renew interval.
        """
        announced = ""
        while True:
            seen = await self._look()
            if seen.liveness.claimable and await self._claim(seen.current):
                return self.epoch
            if seen.liveness is Liveness.RENEWED and not wait:
                raise LeaseHeldError(
                    f"another sidecar, {seen.holder}, holds the writer lease: it renewed "
                    "it while this process watched",
                    where=self.key,
                )
            if seen.holder != announced and not seen.liveness.claimable:
                announced = seen.holder
                log.warning(
                    "the writer lease is held by %s; waiting: taken over if its record stays "
                    "unchanged for %.0fs on this host's clock (lease break: docs/operations.md)",
                    seen.holder,
                    seen.left_s,
                )
            await self.clock.sleep(seen.poll_s)

    async def renew(self) -> None:
        """Extend the lease by a compare-and-swap on the version last written.

        Also reclaims a LAPSED lease (same epoch): the swap on the version this writer
        last wrote succeeds only if nobody wrote the lease since. Raises LeaseLostError
        (and the lease is LOST for good) when the swap finds another version: someone
        else took the lease. A RetryableError leaves the state as it was (HELD until the
        deadline, then LAPSED).
        """
        async with self._swapping:
            self._note_lapse()
            if self.state not in (LeaseState.HELD, LeaseState.LAPSED):
                self.check()  # raises LeaseLostError: not held
            lapsed = self.state is LeaseState.LAPSED
            mine = self._record(self.epoch)
            sent = self.clock.monotonic_ms()
            version = await self.swap(mine, VersionedLease(mine, self.version))
            if version is None:
                holder = await self.read()
                who = f"{holder.owner} (epoch {holder.epoch})" if holder else "nobody"
                if holder is not None and not holder.owner:  # `lease break` fenced us
                    who = f"nobody: released at epoch {holder.epoch} (lease break)"
                raise self._lose(f"lease taken over by {who}")
            self._hold(mine, version, sent)
            if lapsed:
                log.warning(
                    "lease reclaimed after it lapsed: %s epoch %d (nobody else took it)",
                    self.key,
                    self.epoch,
                )

    def check(self) -> None:
        """Raise unless this writer holds the lease right now.

        Local and cheap: the state and the monotonic deadline, nothing read from the
        backend. Called before every write that commits or deletes cold data. Raises
        LeaseLapsedError when the deadline passed before a renewal: the next
        :meth:`renew` reclaims it or finds it lost. Raises LeaseLostError when the lease
        is lost, released or was never held.
        """
        self._note_lapse()
        if self.state is LeaseState.LAPSED:
            raise LeaseLapsedError(
                "lease expired before renewal; writing waits until it is reclaimed",
                where=self.key,
            )
        if self.state is not LeaseState.HELD:
            why = f": {self.lost_reason}" if self.lost_reason else ""
            raise LeaseLostError(f"lease is {self.state.value}{why}", where=self.key)

    def _note_lapse(self) -> None:
        """HELD → LAPSED once the deadline has passed (logged once per lapse)."""
        if self.state is LeaseState.HELD and self.clock.monotonic_ms() >= self.deadline_ms:
            self.state = LeaseState.LAPSED
            log.warning(
                "lease lapsed: %s epoch %d, no renewal before its deadline; writing paused",
                self.key,
                self.epoch,
            )

    async def reclaim_if_lapsed(self) -> None:
        """Reclaim a lease whose deadline passed (:meth:`renew`); no-op in other states.

        Raises LeaseLostError when another writer took it over meanwhile.
        """
        self._note_lapse()
        if self.state is LeaseState.LAPSED:
            await self.renew()

    async def ensure_held(self) -> None:
        """:meth:`check`, for callers that await it (the deadline is local)."""
        self.check()

    def _lose(self, reason: str) -> LeaseLostError:
        if self.state in (LeaseState.HELD, LeaseState.LAPSED):
            log.error("fenced: %s (%s, epoch %d); writing stops", reason, self.key, self.epoch)
        self.state, self.lost_reason = LeaseState.LOST, reason
        return LeaseLostError(reason, where=self.key)

    async def release(self) -> None:
        """Give the lease up (graceful stop). Safe to call twice or when not held.

        A conditional write on the version last written: if another writer took the
        lease meanwhile, the swap fails and nothing of theirs is touched. A renewal
        cancelled mid-request (a shutdown) may have landed without this writer seeing
        its new version: when the swap fails and the record is still this writer's
        (owner and epoch), that version is released instead, so a successor need not
        wait for the record to expire.
        """
        async with self._swapping:
            if self.state not in (LeaseState.HELD, LeaseState.LAPSED):
                return
            now = self.clock.now_ms()
            released = LeaseRecord("", self.epoch, now, now).to_json()
            try:
                await self.backend.replace(self.key, released, version=self.version)
            except ConditionFailedError:
                current = await self.read_versioned()
                if current is not None and (current.record.owner, current.record.epoch) == (
                    self.owner,
                    self.epoch,
                ):
                    with contextlib.suppress(ConditionFailedError):
                        await self.backend.replace(self.key, released, version=current.version)
            self.state = LeaseState.RELEASED
        log.info("lease released: %s epoch %d", self.key, self.epoch)
