"""Object digests: the checksums a manifest records for its two data objects.

Two algorithms, named in each manifest's ``digest_algorithm`` field:

* ``crc32c`` (written since 0.2): CRC-32C (Castagnoli), the checksum S3 and iSCSI use,
  as 8 lowercase hex digits of the 32-bit value. Computed by ``google-crc32c`` (SSE4.2 /
  ARMv8 CRC instructions, over 10 GB/s here, the GIL released), it costs a few percent
  of tiering where SHA-256 cost about a third.
* ``sha256`` (0.1.0 and early 0.2 manifests): 64 lowercase hex digits. Still read and
  checked everywhere.

A digest guards against damage (a flipped bit, a torn or truncated write, the wrong
object under a name), not against someone who can also rewrite the manifest; CRC-32C
detects every burst error up to 32 bits and misses random damage with probability
2^-32 per object. Whatever writes a manifest uses :data:`WRITTEN`; whatever checks an
object uses the algorithm its manifest names.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import Final, Protocol, TypeAlias

import google_crc32c
import numpy as np
import pyarrow as pa

__all__ = ["WRITTEN", "DigestAlgorithm", "Hasher", "digest", "hasher"]

Data: TypeAlias = bytes | bytearray | memoryview | pa.Buffer


class DigestAlgorithm(StrEnum):
    """A manifest's ``digest_algorithm``."""

    SHA256 = "sha256"
    CRC32C = "crc32c"

    @property
    def hex_length(self) -> int:
        """How many lowercase hex digits one digest has."""
        return _HEX_LENGTH[self]

    @classmethod
    def for_hex(cls, text: str) -> DigestAlgorithm:
        """The algorithm whose digests are as long as ``text`` (lengths differ, and a
        parsed manifest's digests always have its algorithm's length).

        Raises:
            ValueError: no algorithm writes digests of that length.
        """
        for algorithm in cls:
            if len(text) == algorithm.hex_length:
                return algorithm
        raise ValueError(f"no digest algorithm has {len(text)} hex digits")


_HEX_LENGTH: Final = {DigestAlgorithm.SHA256: 64, DigestAlgorithm.CRC32C: 8}

#: What new manifests record.
WRITTEN: Final = DigestAlgorithm.CRC32C


class Hasher(Protocol):
    """An incremental digest: feed bytes in order, then read the hex digest."""

    def update(self, data: Data, /) -> None: ...

    def hexdigest(self) -> str: ...


class _Crc32c:
    """CRC-32C over everything fed so far."""

    __slots__ = ("_crc",)

    def __init__(self) -> None:
        self._crc = 0

    def update(self, data: Data, /) -> None:
        # google-crc32c takes only read-only buffers: an Arrow buffer as it is (the
        # cheapest: the tiering pass feeds 131,000 runs per 2 GiB), anything else
        # through a numpy view (no copy).
        if not isinstance(data, pa.Buffer):
            data = np.frombuffer(data, dtype=np.uint8)
        self._crc = google_crc32c.extend(self._crc, data)

    def hexdigest(self) -> str:
        return f"{self._crc:08x}"


def hasher(algorithm: DigestAlgorithm = WRITTEN) -> Hasher:
    """A fresh incremental digest of ``algorithm``."""
    if algorithm is DigestAlgorithm.CRC32C:
        return _Crc32c()
    return hashlib.sha256()


def digest(data: Data, algorithm: DigestAlgorithm = WRITTEN) -> str:
    """The lowercase hex digest of ``data`` by ``algorithm``."""
    h = hasher(algorithm)
    h.update(data)
    return h.hexdigest()
