"""Replica reports: what each replica of a broker group holds, published in cold.

A RocketMQ broker group is one master and its slaves under one broker name; a slave's
commitlog is a byte-for-byte copy of the master's, at the same physical offsets (HA
replication ships commitlog bytes, and the slave dispatches its own consume queues from
them). One sidecar runs beside every replica, all with the same ``cold.broker``; the
writer lease decides which one tiers. Each sidecar publishes a :class:`ReplicaReport`
(``_replicas/<replica>.json``, :func:`~tieredstore.cold.layout.replica_key`) every tick,
whether it holds the lease or stands by:

* ``confirmed``: a commitlog offset every byte below which this replica's store holds
  *durably*: the end of the newest record dispatched to any consume queue, after the
  sidecar ``fdatasync``\\ ed its commitlog up to there (a power cut of the replica's host
  keeps it);
* ``beat``: a counter raised by every report, so that a reader tells a live replica
  with nothing new from a dead one without comparing clocks of two hosts;
* ``written_ms``: the writer's wall clock, for people reading the object.

The tiering sidecar tiers a record only below the lowest ``confirmed`` of the other
replicas that still report (:mod:`tieredstore.dispatcher.replicas`). So cold is never ahead of a
replica that may take over: whatever cold holds, every such replica's store holds too.

A report is canonical JSON, parsed strictly (:class:`~tieredstore.errors.CorruptProvenanceError`
naming the object). Reports are plain overwrites, one writer per key: each replica writes
only its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tieredstore.backends.base import Backend
from tieredstore.canonical_json import canonical, parse_object
from tieredstore.cold.layout import MANIFEST_SUFFIX, replica_key, replica_prefix
from tieredstore.errors import CorruptProvenanceError, ObjectNotFoundError

__all__ = ["ReplicaReport", "publish_report", "read_reports"]

FORMAT_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class ReplicaReport:
    """One replica's progress (see the module docstring)."""

    replica: str
    confirmed: int
    beat: int
    written_ms: int

    def encode(self) -> bytes:
        return canonical(
            {
                "format_version": FORMAT_VERSION,
                "replica": self.replica,
                "confirmed": self.confirmed,
                "beat": self.beat,
                "written_ms": self.written_ms,
            }
        )

    @classmethod
    def decode(cls, data: bytes, *, where: str) -> ReplicaReport:
        """Parse a report; anything but a version-1 report with these fields raises."""
        f = parse_object(data, error=CorruptProvenanceError, what="replica report", where=where)
        f.version("format_version", {FORMAT_VERSION}, label="replica report ")
        replica = f.scalar("replica", str)
        assert isinstance(replica, str)
        report = cls(replica, f.integer("confirmed"), f.integer("beat"), f.integer("written_ms"))
        extra = set(f.doc) - f.seen
        if extra:
            raise CorruptProvenanceError(
                f"replica report has unknown fields {sorted(extra)}", where=where
            )
        if report.confirmed < 0 or report.beat < 0:
            raise CorruptProvenanceError("replica report has a negative offset", where=where)
        return report


async def publish_report(
    backend: Backend, cluster: str, broker: str, report: ReplicaReport
) -> None:
    """Write ``report`` over this replica's previous one."""
    await backend.write(replica_key(cluster, broker, report.replica), report.encode())


async def read_reports(backend: Backend, cluster: str, broker: str) -> list[ReplicaReport]:
    """Every replica's report under the broker prefix, by replica name.

    A report deleted between the listing and its read is left out; a report named for
    another replica than its key says is corrupt (raises).
    """
    out = []
    for info in await backend.list(replica_prefix(cluster, broker) + "/"):
        name = info.key.rsplit("/", 1)[-1]
        if not name.endswith(MANIFEST_SUFFIX):
            continue
        try:
            data = await backend.read(info.key)
        except ObjectNotFoundError:
            continue
        report = ReplicaReport.decode(data, where=info.key)
        if report.replica != name[: -len(MANIFEST_SUFFIX)]:
            raise CorruptProvenanceError(
                f"replica report names replica {report.replica!r}", where=info.key
            )
        out.append(report)
    return sorted(out, key=lambda r: r.replica)
