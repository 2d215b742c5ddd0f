"""Holding the writer lease across a destructive job (expiry, GC, repair).

The sidecar renews its lease in a background loop, but the ``expire``, ``gc`` and
``repair`` commands run no such loop, and a long job would outlive the lease (it expires
three renew intervals after the last renewal). :func:`hold_lease` is called before each
destructive step: it renews when a renew interval has passed since the last renewal and
otherwise only checks, so a job keeps its lease exactly as long as it keeps working and
stops at once when another writer took over.
"""

from __future__ import annotations

from dispatcher.lease import Lease

__all__ = ["hold_lease"]


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
