"""Object keys: the one rule set every backend enforces before touching storage.

A key is a relative, ``/``-separated name such as ``MANIFEST/00000000000000000000.json``:

* not empty, no NUL character;
* no leading or trailing ``/`` and no empty segment (``a//b``);
* no ``.`` or ``..`` segment, so a key can never name something outside the backend root
  (on POSIX) or alias another key (on object stores).

A list *prefix* is a plain string prefix (``"seg/0"`` matches ``seg/01`` and ``seg/0/x``).
It may be empty; its complete segments (everything before the last ``/``) follow the key
rules, its last, partial segment may be anything without NUL.

Breaking a rule raises :class:`~tieredstore.errors.BackendError` naming the key and the
backend: it is a caller bug that retrying cannot fix. The same rules hold for every
backend, so a key that works on the in-memory backend works on S3 and POSIX too.
"""

from __future__ import annotations

from tieredstore.errors import BackendError

__all__ = ["check_key", "check_prefix", "check_range"]


def check_key(key: str, where: str) -> str:
    """Return ``key`` if it is a valid object key, else raise BackendError.

    ``where`` names the backend (its URL) for the error message.
    """
    if not key:
        raise BackendError("empty object key", where=where)
    if "\x00" in key:
        raise BackendError(f"object key {key!r} contains NUL", where=where)
    _check_segments(key, key, where)
    return key


def check_prefix(prefix: str, where: str) -> str:
    """Return ``prefix`` if it is a valid list prefix, else raise BackendError."""
    if "\x00" in prefix:
        raise BackendError(f"list prefix {prefix!r} contains NUL", where=where)
    if prefix.startswith("/"):
        raise BackendError(f"list prefix {prefix!r} is absolute", where=where)
    head, sep, _ = prefix.rpartition("/")
    if sep:
        _check_segments(head, prefix, where)
    return prefix


def check_range(key: str, start: int, end: int | None, where: str) -> None:
    """Reject a negative ``start`` or ``end``: ranges are absolute byte offsets.

    ``end < start`` is allowed and reads as empty (the range is clipped, not an error).
    """
    if start < 0:
        raise BackendError(f"negative read start {start} of {key!r}", where=where)
    if end is not None and end < 0:
        raise BackendError(f"negative read end {end} of {key!r}", where=where)


def _check_segments(path: str, shown: str, where: str) -> None:
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            raise BackendError(
                f"object key {shown!r} has an empty, '.' or '..' segment "
                "(keys are relative and may not leave the backend root)",
                where=where,
            )
