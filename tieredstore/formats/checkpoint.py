"""The broker's ``checkpoint`` file: five big-endian longs at the start of a 4 KiB file."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from tieredstore.errors import StoreNotFoundError, TruncatedDataError

__all__ = ["CHECKPOINT_STRUCT", "Checkpoint", "read_checkpoint"]

CHECKPOINT_STRUCT = struct.Struct(">qqqqq")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Decoded ``checkpoint``.

    ``physic_msg_timestamp`` is the store time of the newest commitlog data the broker
    has flushed: the durability guard never tiers a record stored after it.
    """

    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int
    master_flushed_offset: int
    confirm_phy_offset: int

    def encode(self) -> bytes:
        """Return the 40 meaningful bytes (the broker pads the file to 4 KiB with zeros)."""
        return CHECKPOINT_STRUCT.pack(
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        )

    @classmethod
    def decode(cls, data: bytes, *, where: str = "checkpoint") -> Checkpoint:
        """Decode the first 40 bytes of ``data``; shorter data is truncated."""
        if len(data) < CHECKPOINT_STRUCT.size:
            raise TruncatedDataError(
                f"checkpoint is {len(data)} bytes, needs {CHECKPOINT_STRUCT.size}",
                where=f"{where}@0",
            )
        return cls(*CHECKPOINT_STRUCT.unpack_from(data, 0))


def read_checkpoint(path: Path) -> Checkpoint:
    """Read and decode the checkpoint file at ``path``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StoreNotFoundError(
            f"cannot read checkpoint: {exc.strerror}", where=str(path)
        ) from exc
    return Checkpoint.decode(data, where=str(path))
