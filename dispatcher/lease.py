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

**The holder's deadline is its own.** Each successful acquire or renew sets a deadline on
the process's monotonic clock: the moment the write was *sent*, plus the lease time,
minus a safety margin (one renew interval). :meth:`Lease.check` — called before every
segment upload chunk, manifest, retention delete and gc delete — compares only against
that deadline: no value read earlier, no wall clock. Another writer treats the lease as
free only once the record's wall-clock expiry has passed (``renewed_at + ttl``), which is
later than the holder's deadline by the margin, so the two never overlap while clocks
agree within the margin. Committed data never depends on this timing: manifests are only
created, never replaced, and data objects never share names (:mod:`tieredstore.layout`).

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

__all__ = ["Lease", "LeaseRecord", "LeaseState", "VersionedLease", "new_owner_id"]

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
    """The content of ``_lease.json``. ``owner == ""`` means released."""

    owner: str
    epoch: int
    expires_at_ms: int
    renewed_at_ms: int

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
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptManifestError(f"lease object is not valid: {exc}", where=where) from exc

    def live(self, now_ms: int) -> bool:
        return bool(self.owner) and self.expires_at_ms > now_ms


@dataclass(frozen=True, slots=True)
class VersionedLease:
    """A lease record with the backend version a conditional write must name."""

    record: LeaseRecord
    version: str


#: What :meth:`Lease.try_acquire` reports when another claim won a race but the lease
#: object could not be read back: treated as held, so the caller waits and tries again.
_CONTENDED = LeaseRecord(owner="(contended)", epoch=0, expires_at_ms=0, renewed_at_ms=0)


class Lease:
    """This process's view of the broker's writer lease."""

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
        self.state = LeaseState.NOT_HELD
        self.epoch = 0
        self.expires_at_ms = 0
        self.version = ""
        self.deadline_ms = 0  # on clock.monotonic_ms(): writes stop here
        self.lost_reason = ""
        # One swap at a time: the renewal loop and a job's hold_lease may both find a
        # renewal due; two swaps from the same version would fence this writer itself.
        self._swapping = asyncio.Lock()

    @property
    def ttl_ms(self) -> int:
        return int(self.renew_interval * EXPIRY_FACTOR * 1000)

    @property
    def margin_ms(self) -> int:
        """How long before the record's expiry the holder stops writing: one interval."""
        return int(self.renew_interval * 1000)

    def remaining_ms(self) -> int:
        """Milliseconds left before this holder's own deadline (0 when not held)."""
        if self.state is not LeaseState.HELD:
            return 0
        return max(self.deadline_ms - self.clock.monotonic_ms(), 0)

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

    def _record(self, epoch: int) -> LeaseRecord:
        now = self.clock.now_ms()
        return LeaseRecord(self.owner, epoch, now + self.ttl_ms, now)

    def _hold(self, record: LeaseRecord, version: str, sent_ms: int) -> None:
        self.state, self.epoch, self.version = LeaseState.HELD, record.epoch, version
        self.expires_at_ms = record.expires_at_ms
        self.deadline_ms = sent_ms + self.ttl_ms - self.margin_ms

    async def _swap(self, mine: LeaseRecord, current: VersionedLease | None) -> str | None:
        """Write ``mine`` conditionally on ``current``; return its version, or None if
        another write won (a lost reply of our own write counts as ours)."""
        try:
            if current is None:
                return await self.backend.create(self.key, mine.to_json())
            return await self.backend.replace(self.key, mine.to_json(), version=current.version)
        except ConditionFailedError:
            now = await self.read_versioned()
            if now is not None and now.record == mine:
                return now.version
            return None

    async def try_acquire(self) -> LeaseRecord | None:
        """Claim the lease if it is free; return None on success, else the holder's record.

        Raises ConfigError on a backend whose conditional writes are not atomic (generic
        fsspec), unless ``allow_unconditional_writes``: every writer takes the lease
        before its first write, so this is where such a backend is refused.
        """
        self._require_fencing()
        current = await self.read_versioned()
        now = self.clock.now_ms()
        if current is not None and current.record.live(now) and current.record.owner != self.owner:
            return current.record
        epoch = (current.record.epoch if current else 0) + 1
        mine = self._record(epoch)
        sent = self.clock.monotonic_ms()
        version = await self._swap(mine, current)
        if version is None:  # another claim landed first: it wins
            return (await self.read()) or _CONTENDED
        self._hold(mine, version, sent)
        log.info("lease acquired: %s epoch %d", self.key, epoch)
        return None

    def _require_fencing(self) -> None:
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

    async def acquire(self, *, wait: bool) -> int:
        """Acquire the lease, waiting for the holder's lease to lapse when ``wait``.

        Raises LeaseHeldError when another live writer holds it and ``wait`` is false.
        """
        while True:
            holder = await self.try_acquire()
            if holder is None:
                return self.epoch
            remaining = max(holder.expires_at_ms - self.clock.now_ms(), 0) / 1000
            message = (
                f"another sidecar ({holder.owner}, epoch {holder.epoch}) holds the writer "
                f"lease for {remaining:.0f}s more"
            )
            if not wait:
                raise LeaseHeldError(message, where=self.key)
            log.warning("%s; waiting", message)
            await self.clock.sleep(min(max(remaining, 0.1), self.renew_interval))

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
            version = await self._swap(mine, VersionedLease(mine, self.version))
            if version is None:
                holder = await self.read()
                who = f"{holder.owner} (epoch {holder.epoch})" if holder else "nobody"
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
