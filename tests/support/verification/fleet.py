"""A synthetic fleet for the fleet verification's tests and bench: one hot store, tiered
under several broker prefixes, each fingerprinted, then damaged the ways the fleet job
must tell apart.

:func:`fleet_image` tiers the hot store once per broker; :func:`damage_flip` rewrites one
commit-log record byte *and* the manifest's digest (a writer that tiered wrong bytes
consistently: only a comparison with hot can see it); :func:`damage_delete_queue` removes
every object of one queue (its init record stays, so the queue is required).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Final

from tests.support.stores.coldimage import ColdImage, tier
from tieredstore.cold.digests import digest
from tieredstore.cold.layout import SegmentKind, kind_prefix
from tieredstore.cold.manifest import Manifest
from tieredstore.hot.store import QueueKey

__all__ = ["CLEAN", "DELETED", "FLIPPED", "NO_FINGERPRINT", "damage_delete_queue",
           "damage_flip", "fleet_image"]  # fmt: skip

CLEAN: Final = "broker-clean"
FLIPPED: Final = "broker-flipped"
NO_FINGERPRINT: Final = "broker-nofp"
DELETED: Final = "broker-deleted"


def fleet_image(hot: Path, cluster: str, brokers: list[str], *, segment_messages: int) -> ColdImage:
    """Every broker's cold image of ``hot``, merged into one."""
    out = ColdImage()
    for broker in brokers:
        image = tier(hot, segment_messages=segment_messages, cluster=cluster, broker=broker)
        out.objects.update(image.objects)
    return out


def _manifests(image: ColdImage, cluster: str, broker: str, queue: QueueKey) -> list[Manifest]:
    mark = f"/{broker}/{queue.topic}/{queue.queue_id}/MANIFEST/"
    found = [Manifest.from_json(v, where=k) for k, v in image.objects.items() if mark in k]
    return sorted((m for m in found if m.cluster == cluster), key=lambda m: m.start_offset)


def damage_flip(
    image: ColdImage, cluster: str, broker: str, queue: QueueKey, *, record: int = 5
) -> tuple[int, str]:
    """Flip the last byte of the ``record``-th record of the queue's first segment, and
    make its manifest agree; return the record's queue offset and the object key."""
    m = _manifests(image, cluster, broker, queue)[0]
    data = bytearray(image.objects[m.commit_log_key])
    pos = 0
    for _ in range(record + 1):
        size = int.from_bytes(data[pos : pos + 4], "big")
        pos += size
    data[pos - 1] ^= 0xFF
    image.objects[m.commit_log_key] = bytes(data)
    ref = dataclasses.replace(m.commit_log, digest=digest(bytes(data), m.algorithm))
    image.objects[m.key] = dataclasses.replace(m, commit_log=ref).to_json()
    return m.start_offset + record, m.commit_log_key


def damage_delete_queue(image: ColdImage, cluster: str, broker: str, queue: QueueKey) -> None:
    """Remove the queue's segments (every COMMIT_LOG, CONSUME_QUEUE and MANIFEST object)."""
    m = _manifests(image, cluster, broker, queue)[0]
    prefixes = tuple(kind_prefix(m.queue, k) + "/" for k in SegmentKind)
    for key in [k for k in image.objects if k.startswith(prefixes)]:
        del image.objects[key]
