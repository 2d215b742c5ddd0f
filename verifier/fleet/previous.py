"""Which fingerprint an incremental ``tieredstore fingerprint`` carries blocks forward
from (:func:`previous_fingerprint`): the broker's newest in the cold store, when it can
be trusted for it, and when a full run is due instead (``--full-every``).

The newest is the one of the highest sequence under the broker's ``_fingerprints/``
prefix (:class:`~tieredstore.cold.layout.FingerprintName`), as the fleet job takes it. A
run is **full** (carries nothing) when:

* its sequence is a multiple of ``full_every`` (1: every run is full), so one run in
  ``full_every`` reads every block whole, whatever the carry rule cannot see;
* the broker has no fingerprint yet;
* the newest does not read, is of another format than this version writes, is of another
  cluster or broker or another sequence than its key says, or was taken with other block
  or leaf offsets.

The reason is one line, for the command's output.
"""

from __future__ import annotations

from dataclasses import dataclass

from tieredstore.backends.base import Backend
from tieredstore.cold.fingerprint import FINGERPRINT_FORMAT_VERSION, Fingerprint, read_fingerprint
from tieredstore.cold.layout import FingerprintName, fingerprint_prefix, parse_fingerprint_name
from tieredstore.errors import ColdDataError

__all__ = ["Previous", "list_fingerprints", "previous_fingerprint", "sequence_after"]


@dataclass(frozen=True, slots=True)
class Previous:
    """What a run carries from: ``fingerprint`` (None: a full run, for ``why_full``)."""

    fingerprint: Fingerprint | None
    why_full: str = ""


async def list_fingerprints(cold: Backend, cluster: str, broker: str) -> list[FingerprintName]:
    """The broker's fingerprint names listed in the cold store, oldest first."""
    prefix = fingerprint_prefix(cluster, broker) + "/"
    names = (parse_fingerprint_name(i.key.rsplit("/", 1)[-1]) for i in await cold.list(prefix))
    return sorted(n for n in names if n is not None)


def sequence_after(names: list[FingerprintName]) -> int:
    """One past the highest sequence among ``names`` (0 if none): the next run's."""
    return max((n.sequence for n in names), default=-1) + 1


async def previous_fingerprint(
    cold: Backend,
    names: list[FingerprintName],
    *,
    cluster: str,
    broker: str,
    sequence: int,
    full_every: int,
    block_offsets: int,
    leaf_offsets: int,
) -> Previous:
    """The fingerprint the run of ``sequence`` carries from, among the broker's listed
    ``names`` (oldest first), or why it is a full run (module doc).

    Raises:
        ValueError: ``full_every`` is below 1.
    """
    if full_every < 1:
        raise ValueError(f"full_every must be at least 1, got {full_every}")
    if not names:
        return Previous(None, "no previous fingerprint")
    if sequence % full_every == 0:
        return Previous(None, f"sequence {sequence} is a multiple of --full-every {full_every}")
    newest = names[-1]
    key = f"{fingerprint_prefix(cluster, broker)}/{newest.name}"
    try:
        fp = read_fingerprint(await cold.read(key), key)
    except ColdDataError as exc:  # unreadable, or deleted since it was listed
        return Previous(None, f"the previous fingerprint does not read: {exc}")
    if fp.format_version != FINGERPRINT_FORMAT_VERSION:
        why = f"the previous fingerprint {key} is of format {fp.format_version}"
    elif (fp.cluster, fp.broker) != (cluster, broker):
        why = f"the previous fingerprint {key} is of {fp.cluster}/{fp.broker}"
    elif fp.sequence != newest.sequence:
        why = f"the previous fingerprint {key} says sequence {fp.sequence}"
    elif (fp.block_offsets, fp.leaf_offsets) != (block_offsets, leaf_offsets):
        why = (
            f"the previous fingerprint {key} has blocks of {fp.block_offsets} and leaves of "
            f"{fp.leaf_offsets} offsets"
        )
    else:
        return Previous(fp)
    return Previous(None, why)
