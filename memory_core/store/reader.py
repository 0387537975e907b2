"""The owner's cached read-only connection to one agent database.

A full reindex swaps the database file (``memory_core/store/reindex.py``), so a cached handle
is reopened whenever the path names another file (``dev:inode``) than the one it has open.
Used by the in-process search engine and by the provider runtime's point reads.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import apsw

from host_facades.db.sqlite_read import DatabaseUnreadable, open_readonly, swap_transient, wait_out_swap
from memory_core.store.access import index_errors

OPEN_ATTEMPTS = 5
_UNVERIFIED = itertools.count(1)


# what a read-only open or read can raise while another process swaps the file in (its -wal/-shm
# are moved aside around the rename): transient, gone once the new file is in place
TRANSIENT_ERRORS = (apsw.ReadOnlyError, apsw.BusyError, apsw.CantOpenError)


def open_readonly_retrying(db_path: str, *, load_vec: bool, attempts: int = 8, mmap: bool = True) -> apsw.Connection:
    """:func:`open_readonly`, retried with a short backoff while the failure is one a file swap by
    another process causes (the -shm of the old file met, a lock held across the rename)."""
    for attempt in range(attempts):
        try:
            return open_readonly(db_path, load_vec=load_vec, mmap=mmap)
        except DatabaseUnreadable as exc:
            if exc.code in ("index_corrupt", "index_newer") or attempt == attempts - 1:
                raise
        except TRANSIENT_ERRORS:
            if attempt == attempts - 1:
                raise
        time.sleep(min(0.2, 0.01 * (2 ** attempt)))
    raise AssertionError("unreachable")


def file_ident(path: str) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of ``path``; None when it does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class CachedReader:
    """One read-only connection to ``db_path``, reopened when the file was swapped.

    apsw connections must not be used by two threads at once: :meth:`get` leaves that to the
    caller (who holds its own lock around the whole use); :meth:`run` holds this reader's lock,
    and so does :meth:`close`.
    """

    def __init__(self, db_path: str, *, load_vec: bool = True, mmap: bool = True,
                 on_use: Callable[[], None] | None = None) -> None:
        self.db_path = db_path
        self.on_use = on_use  # called after each run() that had a connection (a connection LRU's touch)
        self.load_vec = load_vec
        self.mmap = mmap  # False: point reads (the owner's identity reads), no mapping of the file
        self.conn: apsw.Connection | None = None
        self.ident: tuple[int, int] | None = None  # the identity of the file ``conn`` has open
        self._lock = threading.RLock()

    def get(self) -> apsw.Connection | None:
        """The connection to the file now at ``db_path``; None when there is none."""
        ident = file_ident(self.db_path)
        if ident is None:
            self.close()
            return None
        if self.conn is None or ident != self.ident:
            self.close()
            conn = None
            for _attempt in range(OPEN_ATTEMPTS):
                conn = open_readonly_retrying(self.db_path, load_vec=self.load_vec, mmap=self.mmap)
                after = file_ident(self.db_path)
                if after == ident:
                    break
                if _attempt == OPEN_ATTEMPTS - 1:
                    # Still being swapped: conn has one complete generation open, only which one is
                    # unknown. Read it under an identity no file has (the next call reopens): a
                    # search never fails because another process rebuilds the index.
                    ident = (-1, next(_UNVERIFIED))
                    break
                conn.close()  # swapped while opening: the identity must name the file conn has open
                conn, ident = None, after
                if ident is None:
                    return None
            self.conn = conn
            self.ident = ident
        return self.conn

    def run(self, fn: Callable[[apsw.Connection], Any]) -> Any:
        """``fn(conn)`` under this reader's lock; FileNotFoundError when the index was never built,
        IndexCorrupt when the file is not a readable database. A handle that raised is closed, never
        reused; what a swap of the file by another process causes is retried on a fresh handle."""
        with self._lock, index_errors(self.db_path):
            for attempt in range(3):
                conn = self.get()
                if conn is None:
                    raise FileNotFoundError(f"memory index database not found: {self.db_path}; run `memory-core index`")
                if self.on_use is not None:
                    self.on_use()
                try:
                    return fn(conn)
                except Exception as exc:
                    self.close()
                    short_read = swap_transient(exc)
                    if attempt == 2 or not (short_read or isinstance(exc, TRANSIENT_ERRORS)):
                        raise
                    if short_read:
                        wait_out_swap(attempt)

    def try_close(self) -> bool:
        """Close the connection unless a :meth:`run` is using it now (False: left open)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            self.close()
            return True
        finally:
            self._lock.release()

    def close(self) -> None:
        with self._lock:
            if self.conn is not None:
                try:
                    self.conn.close()
                finally:
                    self.conn = None
                    self.ident = None
