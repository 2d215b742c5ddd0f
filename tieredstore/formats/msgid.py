"""The offset message id: storeHost IP + port + physicalOffset, upper-case hex."""

from __future__ import annotations

import struct

from tieredstore.formats.record import HostPort, MessageRecord

__all__ = ["decode_offset_msg_id", "offset_msg_id", "offset_msg_id_for"]


#: Hex of each store host seen (a store has few): the id's prefix, computed once.
_HOST_HEX: dict[HostPort, str] = {}
_HOST_HEX_MAX = 4096


def offset_msg_id_for(store_host: HostPort, physical_offset: int) -> str:
    """Return the id for a store host and commitlog offset (32 hex chars for IPv4)."""
    prefix = _HOST_HEX.get(store_host)
    if prefix is None:
        if len(_HOST_HEX) >= _HOST_HEX_MAX:
            _HOST_HEX.clear()
        prefix = _HOST_HEX[store_host] = store_host.encode().hex().upper()
    return prefix + struct.pack(">q", physical_offset).hex().upper()


def offset_msg_id(record: MessageRecord) -> str:
    """Return the offset message id of a hot record (its physicalOffset field)."""
    return offset_msg_id_for(record.store_host, record.physical_offset)


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """Split an offset message id into (ip, port, physical offset)."""
    import ipaddress

    raw = bytes.fromhex(msg_id)
    if len(raw) not in (16, 28):
        raise ValueError(f"offset message id {msg_id!r} has {len(raw)} bytes, expected 16 or 28")
    n = len(raw) - 12
    ip = ipaddress.ip_address(raw[:n])
    port, offset = struct.unpack(">iq", raw[n:])
    return str(ip), port, offset
