"""Atomic full reindex by file swap (upstream `memory/manager-atomic-reindex.ts`, docs/decisions.md D1).

The new index is built into ``<db>.tmp-<uuid>`` (seeded with the live embedding cache), checkpointed
and closed, then renamed over the live file. Readers that hold the old file keep reading it (POSIX
keeps an unlinked inode alive); new readers open the new one. Any failure deletes the temp files and
leaves the live database untouched and searchable.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TypeVar

from memory_core.errors import IndexBusy
from memory_core.store.access import ensure_writable_dir
from memory_core.store.perms import PRIVATE_FILE
from memory_core.store.writer import IndexWriter

T = TypeVar("T")

TEMP_MAX_AGE_S = 10 * 60
# A folder of more entries than this (a state dir of thousands of agents: 40,000 files at 10,000) is
# listed for temp leftovers at most every TEMP_SCAN_INTERVAL_S while it keeps changing, not at every
# writer start: one listing per opened agent made a server's cold start quadratic in its agents.
TEMP_SCAN_BIG_FOLDER = 1000
TEMP_SCAN_INTERVAL_S = 10.0
_temp_scans: dict[str, tuple[float, int, int, frozenset[str]]] = {}
_clock = time.monotonic
_SIDECARS = ("-wal", "-shm", "-journal")


def lock_path(db_path: str) -> str:
    return db_path + ".reindex.lock"


@contextlib.contextmanager
def reindex_lock(db_path: str) -> Iterator[None]:
    """Hold the per-database reindex lock; raise :class:`IndexBusy` when another live process has it.

    An advisory ``flock``: the kernel releases it when the holder dies, so a killed run never
    leaves a stale lock behind.
    """
    ensure_writable_dir(db_path)
    fd = os.open(lock_path(db_path), os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                holder = ""
                with contextlib.suppress(OSError, ValueError):
                    holder = os.pread(fd, 64, 0).decode().strip()
                raise IndexBusy(
                    f"another process{f' (pid {holder})' if holder else ''} is reindexing {db_path}; "
                    "wait for it to finish and retry"
                ) from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _remove(path: str, attempts: int = 10) -> None:
    for attempt in range(1, attempts + 1):
        try:
            os.remove(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.EPERM, errno.EACCES) or attempt == attempts:
                raise
            time.sleep(0.05 * attempt)


def _rename(src: str, dst: str, attempts: int = 6) -> None:
    for attempt in range(1, attempts + 1):
        try:
            os.replace(src, dst)
            return
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.EPERM, errno.EACCES) or attempt == attempts:
                raise
            time.sleep(0.025 * attempt)


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_db_files(path: str) -> None:
    """Delete a database file and its sidecars (missing files are fine)."""
    for suffix in ("", *_SIDECARS):
        with contextlib.suppress(OSError):
            _remove(path + suffix)


SET_ASIDE_KINDS = ("corrupt", "newer")  # not a readable database; written by a newer memory-core


def set_aside(db_path: str, *, kind: str = "corrupt", now: float | None = None) -> str:
    """Rename an unreadable index and its sidecars to ``<db>.<kind>-<UTC time>`` (+ ``-wal``,
    ``-shm``, ``-journal``; ``kind`` one of :data:`SET_ASIDE_KINDS`): kept for inspection (or for
    the newer memory-core) and never swept. Returns the new path of the file.

    The sidecars go first: a database created later at ``db_path`` must never meet (and replay)
    the old file's write-ahead log or journal. The caller holds the reindex lock."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    if kind not in SET_ASIDE_KINDS:
        raise ValueError(f"set_aside kind must be one of {SET_ASIDE_KINDS}, not {kind!r}")
    target, n = f"{db_path}.{kind}-{stamp}", 1
    while any(os.path.lexists(target + suffix) for suffix in ("", *_SIDECARS)):
        n += 1
        target = f"{db_path}.{kind}-{stamp}-{n}"
    for suffix in (*_SIDECARS, ""):
        if os.path.lexists(db_path + suffix):
            _rename(db_path + suffix, target + suffix)
    with contextlib.suppress(OSError):
        _fsync_path(os.path.dirname(db_path) or ".")
    return target


def sweep_temp_files(db_path: str, *, max_age_s: float = TEMP_MAX_AGE_S, now: float | None = None) -> list[str]:
    """Delete ``<db>.tmp-*`` / ``<db>.backup-*`` leftovers older than ``max_age_s``; returns them."""
    now = time.time() if now is None else now
    removed = []
    for pattern in (glob.escape(db_path) + ".tmp-*", glob.escape(db_path) + ".backup-*"):
        for path in glob.glob(pattern):
            try:
                if now - os.stat(path).st_mtime < max_age_s:
                    continue
                _remove(path)
                removed.append(path)
            except OSError:
                continue
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def _temp_owner(db_path: str, path: str) -> int | None:
    """The pid in ``<db>.tmp-<pid>-<uuid>[-wal|-shm|-journal]`` (None for names without one)."""
    rest = path[len(db_path) + len(".tmp-"):]
    head = rest.split("-", 1)[0]
    return int(head) if head.isdigit() and "-" in rest else None


def _may_have_temp_files(db_path: str) -> bool:
    """Whether ``<db>.tmp-*`` files may exist, from one listing of the folder shared by all its index
    files: listed again when the folder changed, a big one (:data:`TEMP_SCAN_BIG_FOLDER`) at most
    every :data:`TEMP_SCAN_INTERVAL_S` (a leftover that appeared meanwhile goes at a later start)."""
    folder, name = os.path.split(db_path)
    try:
        mtime = os.stat(folder).st_mtime_ns
    except OSError:
        return True  # let the sweep itself find out
    now = _clock()
    seen = _temp_scans.get(folder)
    if seen is None or (seen[1] != mtime and (seen[2] <= TEMP_SCAN_BIG_FOLDER or now - seen[0] >= TEMP_SCAN_INTERVAL_S)):
        try:
            names = os.listdir(folder)
        except OSError:
            return True
        seen = (now, mtime, len(names), frozenset(n.split(".tmp-", 1)[0] for n in names if ".tmp-" in n))
        _temp_scans[folder] = seen
    return name in seen[3]


def sweep_dead_temp_files(db_path: str, *, lock_held: bool = False) -> list[str]:
    """Delete the temp databases (and sidecars) of rebuilds whose process is gone, whatever their
    age; returns them. With the reindex lock free (taken here for the sweep) or held by the caller
    (``lock_held``) no rebuild runs, so every temp file is a leftover; while another process holds
    it, only files whose recorded pid is dead are removed."""
    db_path = os.path.abspath(db_path)
    if not lock_held and not _may_have_temp_files(db_path):
        return []
    fd = None
    free = lock_held
    if not lock_held:
        try:
            fd = os.open(lock_path(db_path), os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            free = True
        except OSError:
            free = False
    try:
        removed = []
        for path in sorted(glob.glob(glob.escape(db_path) + ".tmp-*")):
            owner = _temp_owner(db_path, path)
            if not free and (owner is None or owner == os.getpid() or _pid_alive(owner)):
                continue
            with contextlib.suppress(OSError):
                _remove(path)
                removed.append(path)
        return removed
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def swap_into_place(temp_path: str, db_path: str) -> None:
    """Rename ``temp_path`` over ``db_path`` after moving the target's -wal/-shm aside (with rollback)."""
    backup = f"{db_path}.backup-{uuid.uuid4().hex}"
    moved: list[tuple[str, str]] = []
    try:
        for suffix in ("-wal", "-shm"):
            if os.path.exists(db_path + suffix):
                _rename(db_path + suffix, backup + suffix)
                moved.append((db_path + suffix, backup + suffix))
        _rename(temp_path, db_path)
        with contextlib.suppress(OSError):
            _fsync_path(os.path.dirname(db_path) or ".")
    except BaseException:
        for original, aside in reversed(moved):
            with contextlib.suppress(OSError):
                _rename(aside, original)
        raise
    for _original, aside in moved:
        with contextlib.suppress(OSError):
            _remove(aside)
    for suffix in _SIDECARS:
        with contextlib.suppress(OSError):
            _remove(temp_path + suffix)


def atomic_reindex(
    db_path: str,
    build: Callable[[IndexWriter], T],
    *,
    writer_options: dict | None = None,
    before_swap: Callable[[], None] | None = None,
    after_swap: Callable[[], None] | None = None,
) -> T:
    """Build a fresh index with ``build(temp_writer)`` and swap it in atomically.

    ``build`` must raise on anything that should abort the rebuild (e.g. a failed scan); then the
    temp files are removed and ``db_path`` is untouched. ``before_swap`` runs right before the
    rename (the owner closes its live writer there); ``after_swap`` after it (reopen).
    """
    db_path = os.path.abspath(db_path)
    with reindex_lock(db_path):
        sweep_dead_temp_files(db_path, lock_held=True)
        sweep_temp_files(db_path)
        temp = f"{db_path}.tmp-{os.getpid()}-{uuid.uuid4().hex}"
        writer: IndexWriter | None = None
        live_closed = False
        try:
            writer = IndexWriter(temp, **{**(writer_options or {}), "durable": False})
            writer.seed_from(db_path)
            result = build(writer)
            writer.cache.prune()
            integrity = writer.integrity_check(quick=True)
            if integrity != "ok":
                raise RuntimeError(f"rebuilt index failed quick_check: {integrity}")
            writer.close(checkpoint=True)
            writer = None
            _fsync_path(temp)  # built with synchronous=OFF: make it durable before it becomes live
            if before_swap is not None:
                live_closed = True
                before_swap()
            swap_into_place(temp, db_path)
        except BaseException:
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close(checkpoint=False)
            remove_db_files(temp)
            if live_closed and after_swap is not None:
                after_swap()  # reopen the untouched live database
            raise
        if after_swap is not None:
            after_swap()
        return result
