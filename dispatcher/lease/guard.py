"""Holding the writer lease across a destructive job (expiry, GC, repair).

The sidecar renews its lease in a background loop, but the ``expire``, ``gc`` and
``repair`` commands run no such loop, and a long job would outlive the lease (it expires
three renew intervals after the last renewal). :func:`hold_lease` is called before each
destructive step: it renews when a renew interval has passed since the last renewal and
otherwise only checks, so a job keeps its lease exactly as long as it keeps working and
stops at once when another writer took over.

:func:`mirror_lease` records the sidecar's hold in the catalogue for ``status``.
"""

from __future__ import annotations

import logging

from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.errors import TieredStoreError
from tieredstore.metadata.catalogue import Catalogue

__all__ = ["hold_lease", "mirror_lease"]

log = logging.getLogger(__name__)


async def hold_lease(lease: Lease) -> None:
    """Make sure ``lease`` is still ours before a destructive step; renew it when due.

    Raises LeaseLostError when the lease was taken over. A lease whose own deadline
    passed (LAPSED: the job was paused or slow) is reclaimed here by the same
    compare-and-swap as a renewal, which fails if anyone else wrote the lease since, so
    a lapse never lets this job write beside a writer that took over meanwhile. The
    check is local (:meth:`Lease.check`).
    """
    await lease.reclaim_if_lapsed()  # or LeaseLostError: taken over
    lease.check()
    if lease.renewal_due():  # on the monotonic clock: a wall-clock step changes nothing
        await lease.renew()


def mirror_lease(catalogue: Catalogue, lease: Lease, *, released: bool = False) -> None:
    """Record who holds the lease, and until when, in the catalogue, where
    ``tieredstore status`` (which never reads the cold store) looks for a writer. The
    sidecar calls it when it takes the lease, after each renewal and after its release.

    A release keeps the owner and ends the hold now, so ``status`` can say who held the
    lease last and since when nobody does; a killed sidecar's hold ends at its last
    renewal's expiry. Informational: a failure to write it is logged, never fatal.
    """
    ends = lease.clock.now_ms() if released else lease.expires_at_ms
    try:
        catalogue.record_lease(lease.owner, lease.epoch, ends)
    except TieredStoreError as exc:
        log.warning("could not record the lease in the catalogue: %s", exc)
