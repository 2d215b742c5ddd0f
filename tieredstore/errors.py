"""The one error hierarchy of tieredstore.

Every error raised across a module boundary is one of these. Backend, OS and parser
errors are translated at the seam where they occur (``raise ... from exc``), so callers
only ever decide between two questions: *retry?* (:class:`RetryableError`) or *stop and
tell the operator?* (:class:`FatalError`).

::

    TieredStoreError
    ├── RetryableError                  transient: retry with backoff, never a failure
    │   ├── BackendUnavailableError     connection refused/reset, 5xx
    │   │   └── ColdStoreUnreachableError  every retry of a command failed (exit 3)
    │   ├── BackendTimeoutError         a call exceeded its deadline
    │   └── ThrottledError              SlowDown / 429 / 503 throttling replies
    └── FatalError                      retrying will not help
        ├── ConfigError                 bad setting, file or flag (exit 3)
        ├── InvalidNameError            a cluster/broker/topic name or object key unsafe as a path
        ├── StoreError                  hot side: the broker's store directory
        │   ├── StoreNotFoundError      missing store, file or directory
        │   │   └── NotAStoreError      not a broker store: no commitlog/ or consumequeue/ (exit 3)
        │   ├── UnsupportedStoreError   e.g. a RocksDB consume queue
        │   ├── StoreInUseError         a broker (or a restore) is using the store directory
        │   └── CorruptDataError        bytes that do not parse
        │       ├── CorruptRecordError  commitlog record: magic, CRC, lengths
        │       ├── CorruptUnitError    consume-queue unit
        │       └── TruncatedDataError  shorter than its header says
        ├── ColdDataError               cold side: objects and manifests
        │   ├── ObjectNotFoundError     an object a manifest or caller needs is absent
        │   ├── DamagedObjectError      a committed object found missing, short or not checking
        │   ├── CorruptManifestError    manifest JSON that does not validate
        │   │   └── UnsupportedFormatError  a manifest, fence or batch of a newer format
        │   ├── CorruptBatchError       batch object (or batch fence) that does not validate
        │   ├── CorruptLossRecordError  loss record JSON that does not validate
        │   ├── CorruptProvenanceError  tiering / init / retention record that does not validate
        │   ├── SizeMismatchError       object size differs from its manifest
        │   ├── DigestMismatchError     object digest differs from its manifest
        │   └── OverlapError            two committed segments cover the same offsets (exit 2)
        ├── BackendError                non-retryable backend failure (denied, bad bucket)
        │   ├── ColdStoreAccessError    credentials, permission or bucket refused (exit 3)
        │   └── ConditionFailedError    a conditional write found the object not as expected
        ├── OffsetOutOfRangeError       queue offset outside what is stored
        ├── SpoolTooSmallError          the state dir cannot hold one segment's spool
        ├── DivergedError               hot store no longer agrees with cold
        ├── CatalogueError              the SQLite catalogue
        │   ├── CatalogueBusyError      another process holds the catalogue
        │   └── CatalogueMismatchError  missing, or of another cluster/broker (exit 3)
        └── LeaseError                  single-writer lease
            ├── LeaseHeldError          another writer holds the lease
            ├── LeaseLapsedError        its deadline passed unrenewed: reclaim before writing
            └── LeaseLostError          this writer lost its lease

Messages are one line: *what* went wrong, then *where* (file or object and byte offset
when known). ``str(err)`` is what the CLI prints.
"""

from __future__ import annotations

import enum

__all__ = [
    "AccessFault",
    "BackendError",
    "BackendTimeoutError",
    "BackendUnavailableError",
    "CatalogueBusyError",
    "CatalogueError",
    "CatalogueMismatchError",
    "ColdDataError",
    "ColdStoreAccessError",
    "ColdStoreUnreachableError",
    "ConditionFailedError",
    "ConfigError",
    "CorruptBatchError",
    "CorruptDataError",
    "CorruptFrameError",
    "CorruptLossRecordError",
    "CorruptManifestError",
    "CorruptProvenanceError",
    "CorruptRecordError",
    "CorruptUnitError",
    "Damage",
    "DamagedObjectError",
    "DigestMismatchError",
    "DivergedError",
    "FatalError",
    "InvalidNameError",
    "LeaseError",
    "LeaseHeldError",
    "LeaseLapsedError",
    "LeaseLostError",
    "NotAStoreError",
    "ObjectNotFoundError",
    "OffsetOutOfRangeError",
    "OverlapError",
    "RetryableError",
    "SizeMismatchError",
    "SpoolTooSmallError",
    "StoreError",
    "StoreInUseError",
    "StoreNotFoundError",
    "ThrottledError",
    "TieredStoreError",
    "TruncatedDataError",
    "UnsupportedFormatError",
    "UnsupportedStoreError",
]


class TieredStoreError(Exception):
    """Base of every tieredstore error.

    ``where`` names the file or object (and byte offset) the error is about, when known;
    it is appended to the message so one line tells the operator what and where.
    """

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.message = message
        self.where = where
        super().__init__(f"{message} ({where})" if where else message)


class RetryableError(TieredStoreError):
    """A transient condition: the same call may succeed later."""


class BackendUnavailableError(RetryableError):
    """The backend could not be reached or answered with a server error."""


class ColdStoreUnreachableError(BackendUnavailableError):
    """A command gave up on the cold store: every attempt of one request failed with
    connection errors or timeouts. The one message for this fault, whatever the command
    (``run``, ``verify``, ``read``, ``export``, ``restore``, ``lease``, ...): the store, the
    endpoint, what was tried, how often and for how long, the timeouts, and the last
    error (:func:`tieredstore.backends.retry.unreachable`). Every command exits 3 on it."""


class BackendTimeoutError(RetryableError):
    """A backend call did not complete within its deadline."""


class ThrottledError(RetryableError):
    """The backend asked us to slow down. Not a failure: back off and retry."""


class FatalError(TieredStoreError):
    """Retrying will not help; the operator must look."""


class ConfigError(FatalError):
    """A setting, config file, environment variable or flag is invalid."""


class InvalidNameError(FatalError):
    """A cluster, broker or topic name that cannot be a cold-store path component, or a
    key that is not a tieredstore object key. Names are refused, never mangled."""


class StoreError(FatalError):
    """A problem with the broker's (hot) store directory."""


class StoreNotFoundError(StoreError):
    """A store directory or a file inside it does not exist or cannot be read."""


class NotAStoreError(StoreNotFoundError):
    """The path given as a broker store is not one: it is missing, or it lacks
    ``commitlog/`` or ``consumequeue/`` (often the parent of the real store). Wrong
    input, so the CLI exits 3 rather than reporting an empty store."""


class UnsupportedStoreError(StoreError):
    """The store uses a layout we cannot read (e.g. ``storeType=defaultRocksDB``)."""


class StoreInUseError(StoreError):
    """A broker runs on the store directory (its ``lock`` is held or ``abort`` exists), or
    another restore writes into it."""


class CorruptDataError(StoreError):
    """Bytes that do not parse as what they should be."""


class CorruptRecordError(CorruptDataError):
    """A commitlog record with a bad magic code, CRC or inconsistent lengths."""


class CorruptUnitError(CorruptDataError):
    """A consume-queue unit that cannot be valid."""


class TruncatedDataError(CorruptDataError):
    """Data shorter than its own header says it is."""


class ColdDataError(FatalError):
    """A problem with objects or manifests in the cold store."""


class OverlapError(ColdDataError):
    """Two committed segments of one queue cover the same queue offsets: the history is
    damaged, and which version of those messages is the right one is the operator's
    call. Readers that promise one row per offset (export, restore) refuse it."""


class ObjectNotFoundError(ColdDataError):
    """An object that must exist does not."""


class Damage(enum.Enum):
    """What is wrong with a damaged cold object (:class:`DamagedObjectError`); the value
    is the finding's name (:class:`tieredstore.findings.FindingKind`) in every report."""

    MISSING = "missing_object"  # the object is gone
    SIZE = "size_mismatch"  # not the size its commit point records (cut short)
    UNPARSABLE = "corrupt_manifest"  # its head (a batch's index) does not parse
    DIGEST = "digest_mismatch"  # its bytes are not those its commit point records


class DamagedObjectError(ColdDataError):
    """A committed cold object (a batch object: many queues' slices) is missing, shorter
    than its commit point records, or does not parse or check: damage to data cold had
    committed, found by the read that needed it. Never a store that does not answer
    (that is :class:`ColdStoreUnreachableError`): retrying cannot help. ``key`` names
    the object, ``damage`` says what is wrong with it."""

    def __init__(self, message: str, *, key: str, damage: Damage) -> None:
        super().__init__(message, where=key)
        self.key = key
        self.damage = damage


class CorruptManifestError(ColdDataError):
    """A manifest that is not valid JSON or fails validation."""


class UnsupportedFormatError(CorruptManifestError):
    """A manifest, fence marker, batch object or batch fence whose format version is newer
    than this version reads: written by a newer tieredstore (a rolling upgrade). Not
    damage, but nothing this version may build on: the queue stops until this sidecar is
    upgraded. (A kind of CorruptManifestError for every record, batches included: catch
    it before, or beside, :class:`CorruptBatchError`.)"""


class CorruptBatchError(ColdDataError):
    """A batch object (``_batches/<name>.batch``: many queues' data in one object,
    tieredstore.cold.batch) or a batch fence whose header, index or key does not
    validate, or a slice whose bytes do not match its index."""


class CorruptLossRecordError(ColdDataError):
    """A loss record (``LOSS/<name>.json``) that is not valid JSON or fails validation."""


class CorruptProvenanceError(ColdDataError):
    """A tiering, init or retention record (tieredstore.cold.provenance) that is not valid JSON
    or fails validation."""


class SizeMismatchError(ColdDataError):
    """An object's size differs from the size its manifest records."""


class DigestMismatchError(ColdDataError):
    """An object's digest differs from the digest its manifest records."""


class CorruptFrameError(DigestMismatchError):
    """A compressed (seekable zstd) object whose seek table or a frame does not decode or
    fails its checksum (tieredstore.cold.compressed.frames). A kind of digest mismatch: the stored
    bytes are not the bytes their commit point describes, whichever way they are stored."""


class BackendError(FatalError):
    """A backend failure retrying will not fix (access denied, no such bucket, ...)."""


class AccessFault(enum.Enum):
    """Why a cold store refused a request it did answer: what :class:`ColdStoreAccessError`
    is about. The value is the metric label and the ``status``/``/healthz`` state."""

    NO_CREDENTIALS = "no_credentials"
    """No credentials anywhere the client looked (environment, profile, instance role)."""
    BAD_CREDENTIALS = "bad_credentials"
    """Credentials the store does not accept: unknown key, wrong secret, expired token."""
    DENIED = "denied"
    """The credentials are valid but lack the right for this operation on this key."""
    NO_BUCKET = "no_bucket"
    """The bucket does not exist."""
    WRONG_REGION = "wrong_region"
    """The bucket lives in another region than the client asked (a 301 or 400 redirect)."""


class ColdStoreAccessError(BackendError):
    """The cold store answered but refused a request: no credentials, credentials it does
    not accept, a key without the right for one operation, a missing bucket, a bucket in
    another region (:class:`AccessFault`). The one message for these faults, whatever the
    command: the store, its endpoint and region, the operation and key refused, where
    the credentials came from, and what to do (built by the S3 backend). Every command
    exits 3 on it; the sidecar at run time shows it as a state and resumes when it goes.

    ``op`` is the backend operation refused (``list``, ``read``, ``write``, ``delete``,
    ...): a fault of ``delete`` alone stops expiry and gc, never tiering."""

    def __init__(
        self, message: str, *, fault: AccessFault, op: str, where: str | None = None
    ) -> None:
        super().__init__(message, where=where)
        self.fault = fault
        self.op = op


class ConditionFailedError(BackendError):
    """A conditional write lost: ``create`` found the key already there, or ``replace``
    found another version (or no object) than the one it was conditioned on.

    An ordinary outcome of a race between writers, never damage: nothing was written.
    """


class OffsetOutOfRangeError(FatalError):
    """A queue offset outside the range that is stored."""


class SpoolTooSmallError(FatalError):
    """One segment needs more spool space than the state dir's disk has free (less a
    reserve) or ``tiering.spool_max_bytes`` allows: nothing can be tiered until there is
    room. Smaller rounds cannot help; the queue is retried each tick."""


class DivergedError(FatalError):
    """The hot store no longer agrees with data already committed to cold."""


class CatalogueError(FatalError):
    """The catalogue is unreadable, of an unknown schema, or inconsistent."""


class CatalogueBusyError(CatalogueError):
    """Another process holds the catalogue for writing."""


class CatalogueMismatchError(CatalogueError):
    """The state dir holds no catalogue (read-only open), or one of another cluster or
    broker: wrong input (a wrong ``--state-dir``, ``--cluster`` or ``--broker``), exit 3."""


class LeaseError(FatalError):
    """A problem with the single-writer lease."""


class LeaseHeldError(LeaseError):
    """Another live writer holds the lease for this broker."""


class LeaseLapsedError(LeaseError):
    """This writer's lease deadline passed before a renewal landed (a paused process, a
    blocked event loop). Nothing is written until the lease is reclaimed by a
    compare-and-swap on the version this writer last wrote (the dispatcher abandons the
    segment in hand and tiers it again afterwards); if another writer took the lease
    meanwhile, the reclaim raises :class:`LeaseLostError` instead. Not retried as a
    backend error: retrying the same write cannot help before the reclaim."""


class LeaseLostError(LeaseError):
    """This writer's lease expired or was taken over; it must stop writing."""
