"""A backend on a local (or mounted) directory: plain paths and ``file://`` URLs.

Layout: key ``a/b/c`` is the file ``<root>/a/b/c``; directories are created as needed
and never removed (an empty directory is harmless, and pruning would race a concurrent
writer creating a file in it).

Atomic, durable writes: the bytes go to a temp file in the destination directory,
``.<name>.tmp-<32 hex>``, which is fsynced, renamed over the destination with
:func:`os.replace`, and then the directory is fsynced. A crash leaves either the old
object or the new one, plus at worst a stray temp file. A directory made on the way is
durable (its parent fsynced) before anything is written into it, also when a concurrent
writer made it. Temp files are not objects: ``list`` skips them and keys that look like
them are refused.

Conditional writes: ``create`` publishes the fsynced temp file with :func:`os.link`, which
fails if the destination exists, so create-if-absent is atomic on every POSIX filesystem
(NFS included). ``replace`` holds an exclusive :func:`fcntl.flock` on ``.<name>.lock``
beside the object while it compares the current content digest (the version) and
renames the new bytes over it; every conditional writer takes that lock, so the
compare and the swap are one step. Lock files are not objects either.

Keys are checked by :mod:`tieredstore.backends.key_rules` (no ``..``, no absolute keys, no
NUL), so no key can leave the root; a bad key raises BackendError. Other OS failures
(permission denied, disk full, a key whose parent is a file) raise BackendError too; a
missing file, or a directory where an object is expected, is ObjectNotFoundError.

All blocking calls run in worker threads (:func:`asyncio.to_thread`), never on the loop.
"""

from __future__ import annotations

import asyncio
import builtins
import fcntl
import os
import re
import shutil
import stat
import uuid
from collections.abc import AsyncIterable, Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tieredstore.backends.base import Backend, ObjectInfo, Versioned, content_version
from tieredstore.backends.key_rules import check_key, check_prefix, check_range
from tieredstore.errors import (
    BackendError,
    ConditionFailedError,
    ConfigError,
    ObjectNotFoundError,
)

__all__ = ["PosixBackend", "is_lock_file", "posix_root_from_url"]

# Our own private files beside objects: temp files and the replace() lock files.
_TEMP_NAME = re.compile(r"\..+\.(tmp-[0-9a-f]{32}|lock)")
# Of those, what an interrupted write leaves behind (lock files stay: they are reused).
_LEFTOVER_NAME = re.compile(r"\..+\.tmp-[0-9a-f]{32}")
_LOCK_NAME = re.compile(r"\..+\.lock")


def is_lock_file(name: str) -> bool:
    """Whether a file name is one of this backend's ``replace()`` lock files
    (``.<name>.lock``, kept beside the object and reused): not an object, never garbage.
    Tools that list a POSIX cold store with another client skip them."""
    return _LOCK_NAME.fullmatch(name) is not None


# Small chunks are coalesced so write_chunks makes one thread hop per MiB, not per chunk.
_FLUSH_BYTES = 1 << 20
# "Not an object": the path is missing, or a directory is in the way.
_MISSING = (FileNotFoundError, NotADirectoryError, IsADirectoryError)


def posix_root_from_url(url: str) -> Path:
    """Return the absolute root directory for a plain path or a ``file://`` URL.

    ``file:///data/cold`` and ``/data/cold`` name the same root; a relative plain path
    is made absolute against the current directory. ``file://host/...`` with a host
    other than ``localhost`` raises ConfigError.
    """
    if "://" not in url:
        if not url:
            raise ConfigError("empty cold store path")
        return Path(os.path.abspath(url))
    parts = urlsplit(url)
    if parts.scheme != "file":
        raise ConfigError(f"not a file:// URL: {url!r}")
    if parts.netloc not in ("", "localhost"):
        raise ConfigError(f"file:// URL with a remote host is not supported: {url!r}")
    path = unquote(parts.path)
    if not path.startswith("/"):
        raise ConfigError(f"file:// URL needs an absolute path: {url!r}")
    return Path(path)


class PosixBackend(Backend):
    """Objects as files under ``root`` (which need not exist until the first write)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.abspath(root))
        self.url = self.root.as_uri()

    @classmethod
    def from_url(cls, url: str) -> PosixBackend:
        """Open a plain path or ``file://`` URL (see :func:`posix_root_from_url`)."""
        return cls(posix_root_from_url(url))

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        path = self._path(key)
        check_range(key, start, end, self.url)
        with self._os_errors("read", path, not_found=True):
            return await asyncio.to_thread(_read_range, path, start, end)

    async def write(self, key: str, data: bytes) -> None:
        path = self._path(key)
        with self._os_errors("write", path, not_found=False):
            await asyncio.to_thread(_write_whole, path, data)

    async def write_chunks(self, key: str, chunks: AsyncIterable[bytes]) -> int:
        """Stream ``chunks`` into a temp file, then publish it atomically.

        If the producer raises or the task is cancelled, the temp file is removed and no
        object appears. Each flush opens the temp file anew (append, no create) rather
        than keeping a descriptor across awaits: a flush still running in its thread
        after a cancellation then never races the cleanup over a reused descriptor.
        """
        path = self._path(key)
        with self._os_errors("write", path, not_found=False):
            temp = await asyncio.to_thread(_create_temp, path)
            published = False
            try:
                size = await _stream_into(temp, chunks)
                await asyncio.to_thread(_publish, temp, path)
                published = True
                return size
            finally:
                if not published:
                    await asyncio.to_thread(_remove_quietly, temp)

    async def write_file(
        self, key: str, path: Path, *, chunk_bytes: int, check: Callable[[], None]
    ) -> int:
        """Publish a local file as ``key``: hard-linked into a temp name next to the
        object (a copy when ``path`` is on another filesystem), fsynced, then renamed
        into place. ``check`` runs once before (the bytes move in one step, no chunks);
        ``chunk_bytes`` is unused."""
        check()
        target = self._path(key)
        with self._os_errors("write", target, not_found=False):
            temp, size = await asyncio.to_thread(_link_or_copy, Path(path), target)
            published = False
            try:
                check()
                await asyncio.to_thread(_publish, temp, target)
                published = True
                return size
            finally:
                if not published:
                    await asyncio.to_thread(_remove_quietly, temp)

    async def create(self, key: str, data: bytes) -> str:
        path = self._path(key)
        with self._os_errors("create", path, not_found=False):
            created = await asyncio.to_thread(_create_whole, path, data)
        if not created:
            raise ConditionFailedError("object already exists", where=str(path))
        return content_version(data)

    async def read_versioned(self, key: str) -> Versioned:
        data = await self.read(key)
        return Versioned(data, content_version(data))

    async def replace(self, key: str, data: bytes, *, version: str) -> str:
        path = self._path(key)
        with self._os_errors("replace", path, not_found=False):
            swapped = await asyncio.to_thread(_replace_if, path, data, version)
        if not swapped:
            raise ConditionFailedError("object is not at the expected version", where=str(path))
        return content_version(data)

    async def size(self, key: str) -> int:
        path = self._path(key)
        with self._os_errors("stat", path, not_found=True):
            return (await asyncio.to_thread(_stat_object, path)).st_size

    async def delete(self, key: str) -> None:
        path = self._path(key)
        with self._os_errors("delete", path, not_found=False):
            await asyncio.to_thread(_unlink_object, path)

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        check_prefix(prefix, self.url)
        with self._os_errors("list", self.root, not_found=False):
            return await asyncio.to_thread(_list_objects, self.root, prefix)

    async def list_leftovers(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        """Temp files (``.<name>.tmp-<32 hex>``) under the directory ``prefix`` names."""
        check_prefix(prefix, self.url)
        with self._os_errors("list", self.root, not_found=False):
            return await asyncio.to_thread(_list_leftovers, self.root, prefix)

    async def delete_leftover(self, key: str) -> None:
        check_key(key, self.url)
        if not _LEFTOVER_NAME.fullmatch(key.rsplit("/", 1)[-1]):
            await super().delete_leftover(key)  # refuses: not a temp file
        path = self.root.joinpath(*key.split("/"))
        with self._os_errors("delete", path, not_found=False):
            await asyncio.to_thread(path.unlink, missing_ok=True)

    def _path(self, key: str) -> Path:
        check_key(key, self.url)
        if any(_TEMP_NAME.fullmatch(segment) for segment in key.split("/")):
            raise BackendError(
                f"object key {key!r} looks like a temp file or a lock file "
                "(.<name>.tmp-<hex>, .<name>.lock)",
                where=self.url,
            )
        return self.root.joinpath(*key.split("/"))

    @contextmanager
    def _os_errors(self, op: str, path: Path, *, not_found: bool) -> Iterator[None]:
        """Translate OSError at the seam into BackendError.

        With ``not_found`` (reads), a missing path or a directory in the way means the
        object does not exist: ObjectNotFoundError. For writes the same errors mean a
        key collides with a directory or file, which is a BackendError.
        """
        try:
            yield
        except _MISSING as exc:
            if not_found:
                raise ObjectNotFoundError("no such object", where=str(path)) from exc
            raise BackendError(f"{op} failed: {exc.strerror or exc}", where=str(path)) from exc
        except OSError as exc:
            raise BackendError(f"{op} failed: {exc.strerror or exc}", where=str(path)) from exc


# --- blocking helpers: each runs in a worker thread ------------------------------------


def _read_range(path: Path, start: int, end: int | None) -> bytes:
    with open(path, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise IsADirectoryError(f"not a regular file: {path}")
        if end is None:
            f.seek(start)
            return f.read()
        if end <= start:
            return b""
        f.seek(start)
        return f.read(end - start)


def _stat_object(path: Path) -> os.stat_result:
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise IsADirectoryError(f"not a regular file: {path}")
    return st


def _unlink_object(path: Path) -> None:
    # Delete is idempotent, and a directory is not an object either.
    with suppress(*_MISSING):
        os.unlink(path)


def _temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")


def _write_whole(path: Path, data: bytes) -> None:
    temp = _create_temp(path)
    published = False
    try:
        _append(temp, data)
        _publish(temp, path)
        published = True
    finally:
        if not published:
            _remove_quietly(temp)


def _create_whole(path: Path, data: bytes) -> bool:
    """Publish ``data`` at ``path`` only if nothing is there; False if something was."""
    temp = _create_temp(path)
    try:
        _append(temp, data)
        _fsync_file(temp)
        try:
            os.link(temp, path)
        except FileExistsError:
            return False
        _fsync_dir(path.parent)
        return True
    finally:
        _remove_quietly(temp)


def _replace_if(path: Path, data: bytes, version: str) -> bool:
    """Swap ``data`` in at ``path`` if its current content has ``version``; else False."""
    _make_parents(path.parent)
    lock = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            current = path.read_bytes()
        except _MISSING:
            return False
        if content_version(current) != version:
            return False
        _write_whole(path, data)
        return True
    finally:
        os.close(lock)  # closing releases the flock


def _create_temp(path: Path) -> Path:
    _make_parents(path.parent)
    temp = _temp_path(path)
    os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    return temp


async def _stream_into(temp: Path, chunks: AsyncIterable[bytes]) -> int:
    size = 0
    pending = bytearray()
    async for chunk in chunks:
        size += len(chunk)
        if not pending and len(chunk) >= _FLUSH_BYTES:
            await asyncio.to_thread(_append, temp, chunk)  # big enough: no copy
            continue
        pending += chunk
        if len(pending) >= _FLUSH_BYTES:
            await asyncio.to_thread(_append, temp, bytes(pending))
            pending.clear()
    if pending:
        await asyncio.to_thread(_append, temp, bytes(pending))
    return size


def _append(temp: Path, data: bytes) -> None:
    # No O_CREAT: if cleanup already removed the temp file, a late flush fails instead of
    # resurrecting it.
    fd = os.open(temp, os.O_WRONLY | os.O_APPEND)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _link_or_copy(source: Path, path: Path) -> tuple[Path, int]:
    """A temp file next to ``path`` with the bytes of ``source`` (a hard link if it can),
    and its size."""
    _make_parents(path.parent)
    temp = _temp_path(path)
    try:
        os.link(source, temp)
    except OSError:  # another filesystem, or links not allowed: copy
        shutil.copyfile(source, temp)
    try:
        return temp, os.stat(temp).st_size
    except OSError:
        _remove_quietly(temp)
        raise


def _fsync_file(temp: Path) -> None:
    fd = os.open(temp, os.O_WRONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _publish(temp: Path, path: Path) -> None:
    _fsync_file(temp)
    os.replace(temp, path)
    _fsync_dir(path.parent)


def _remove_quietly(temp: Path) -> None:
    with suppress(FileNotFoundError):
        os.unlink(temp)


def _make_parents(directory: Path) -> None:
    """Create ``directory`` and missing ancestors, each durable (its parent fsynced)
    before the next is made in it. A directory a concurrent writer made first is
    fsynced into its parent here too: that writer may not have got that far yet."""
    missing: builtins.list[Path] = []
    current = directory
    while not current.is_dir():
        missing.append(current)
        current = current.parent
    for d in reversed(missing):
        try:
            os.mkdir(d)
        except FileExistsError:
            if not d.is_dir():
                raise
        _fsync_dir(d.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _list_objects(root: Path, prefix: str) -> builtins.list[ObjectInfo]:
    head, sep, partial = prefix.rpartition("/")
    base_key = head + sep
    base = root.joinpath(*head.split("/")) if head else root
    found: builtins.list[ObjectInfo] = []
    try:
        with os.scandir(base) as it:
            entries = [e for e in it if e.name.startswith(partial)]
    except _MISSING:
        return []
    for entry in entries:
        _collect(entry, base_key + entry.name, found)
    found.sort(key=lambda info: info.key)
    return found


def _list_leftovers(root: Path, prefix: str) -> builtins.list[ObjectInfo]:
    top = root.joinpath(*prefix.rstrip("/").split("/")) if prefix else root
    found: builtins.list[ObjectInfo] = []
    for dirpath, _dirs, files in os.walk(top):
        for name in files:
            if not _LEFTOVER_NAME.fullmatch(name):
                continue
            path = Path(dirpath) / name
            try:
                st = path.stat()
            except FileNotFoundError:
                continue  # published or removed while we walked
            key = path.relative_to(root).as_posix()
            found.append(ObjectInfo(key, st.st_size, st.st_mtime_ns / 1_000_000_000))
    found.sort(key=lambda info: info.key)
    return found


def _collect(entry: os.DirEntry[str], key: str, found: builtins.list[ObjectInfo]) -> None:
    """Add the object at ``entry`` or, for a directory, every object beneath it."""
    try:
        if entry.is_dir(follow_symlinks=False):
            with os.scandir(entry.path) as children:
                for child in children:
                    _collect(child, f"{key}/{child.name}", found)
        elif entry.is_file() and not _TEMP_NAME.fullmatch(entry.name):
            st = entry.stat()
            found.append(ObjectInfo(key, st.st_size, st.st_mtime_ns / 1_000_000_000))
    except _MISSING:
        pass  # deleted while we walked: it is simply not listed
