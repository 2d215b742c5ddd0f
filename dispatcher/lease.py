"""The single-writer lease: one object ``_lease.json`` in the broker's cold prefix.

A lease record holds the owner (random UUID + hostname: never IP@PID, which collides
between containers sharing a host network), a monotonically increasing epoch, and an
expiry. The holder renews it every ``renew_interval``; it expires after three intervals
without renewal. A graceful stop *releases* it (owner cleared, epoch kept) so a
replacement takes over at once, with the next epoch.

Object stores give no compare-and-swap here, so acquisition is write-then-read-back:
a writer claims an expired or released lease and then re-reads it; if another claim
landed in between, the last write wins and the loser sees a foreign owner and backs
off. Every manifest carries the epoch, and the holder re-checks the lease before each
commit, so a writer that lost its lease stops before writing again.

States (:class:`LeaseState`): NOT_HELD → HELD → (RELEASED | LOST).
"""

from __future__ import annotations

import enum
import json
import logging
import socket
import uuid
from dataclasses import asdict, dataclass

from tieredstore.backends.base import Backend
from tieredstore.clock import Clock
from tieredstore.errors import (
    CorruptManifestError,
    LeaseHeldError,
    LeaseLostError,
    ObjectNotFoundError,
)

__all__ = ["Lease", "LeaseRecord", "LeaseState", "new_owner_id"]

log = logging.getLogger(__name__)

EXPIRY_FACTOR = 3


def new_owner_id() -> str:
    """A unique writer id: random UUID + hostname."""
    return f"{uuid.uuid4()}@{socket.gethostname()}"


class LeaseState(enum.Enum):
    NOT_HELD = "not_held"
    HELD = "held"
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
    ) -> None:
        self.backend = backend
        self.key = key
        self.clock = clock
        self.renew_interval = renew_interval
        self.owner = owner or new_owner_id()
        self.state = LeaseState.NOT_HELD
        self.epoch = 0
        self.expires_at_ms = 0

    @property
    def ttl_ms(self) -> int:
        return int(self.renew_interval * EXPIRY_FACTOR * 1000)

    async def read(self) -> LeaseRecord | None:
        """Return the current lease record, or None when there has never been one.

        A lease that does not parse is read again (up to three reads in all): a
        truncated response must not look like a corrupt lease. Only a lease that stays
        unparseable raises CorruptManifestError.
        """
        for attempt in range(3):
            try:
                data = await self.backend.read(self.key)
            except ObjectNotFoundError:
                return None
            try:
                return LeaseRecord.from_json(data, where=self.key)
            except CorruptManifestError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def _write(self, epoch: int) -> LeaseRecord:
        now = self.clock.now_ms()
        record = LeaseRecord(self.owner, epoch, now + self.ttl_ms, now)
        await self.backend.write(self.key, record.to_json())
        return record

    async def try_acquire(self) -> LeaseRecord | None:
        """Claim the lease if it is free; return None on success, else the holder's record."""
        current = await self.read()
        now = self.clock.now_ms()
        if current is not None and current.live(now) and current.owner != self.owner:
            return current
        epoch = (current.epoch if current else 0) + 1
        mine = await self._write(epoch)
        check = await self.read()
        if check != mine:  # another claim landed after ours: it wins
            return check
        self.state, self.epoch, self.expires_at_ms = LeaseState.HELD, epoch, mine.expires_at_ms
        log.info("lease acquired: %s epoch %d", self.key, epoch)
        return None

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
        """Extend the lease; raises LeaseLostError if someone else owns it now."""
        await self.ensure_held()
        record = await self._write(self.epoch)
        self.expires_at_ms = record.expires_at_ms

    async def ensure_held(self) -> None:
        """Check, against the backend, that this writer still holds the lease.

        Called before every commit. A lease this writer let expire counts as lost even
        if nobody took it: another writer could have committed meanwhile.
        """
        if self.state is not LeaseState.HELD:
            raise LeaseLostError(f"lease is {self.state.value}", where=self.key)
        current = await self.read()
        now = self.clock.now_ms()
        if current is None or current.owner != self.owner or current.epoch != self.epoch:
            self.state = LeaseState.LOST
            holder = current.owner if current else "nobody"
            raise LeaseLostError(f"lease taken over by {holder}", where=self.key)
        if now >= self.expires_at_ms:
            self.state = LeaseState.LOST
            raise LeaseLostError("lease expired before renewal", where=self.key)

    async def release(self) -> None:
        """Give the lease up (graceful stop). Safe to call twice or when not held."""
        if self.state is not LeaseState.HELD:
            return
        current = await self.read()
        if current is not None and current.owner == self.owner:
            now = self.clock.now_ms()
            released = LeaseRecord("", self.epoch, now, now)
            await self.backend.write(self.key, released.to_json())
        self.state = LeaseState.RELEASED
        log.info("lease released: %s epoch %d", self.key, self.epoch)
