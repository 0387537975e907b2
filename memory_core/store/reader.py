"""The owner's cached read-only connection to one agent database.

A full reindex swaps the database file (``memory_core/store/reindex.py``), so a cached handle
is reopened whenever the path names another file (``dev:inode``) than the one it has open.
Used by the in-process search engine and by the provider runtime's point reads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import apsw

from host_facades.sqlite_read import open_readonly
from memory_core.errors import IndexBusy
from memory_core.store.access import index_errors


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

    def __init__(self, db_path: str, *, load_vec: bool = True) -> None:
        self.db_path = db_path
        self.load_vec = load_vec
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
            for _attempt in range(3):
                conn = open_readonly(self.db_path, load_vec=self.load_vec)
                after = file_ident(self.db_path)
                if after == ident:
                    break
                conn.close()  # swapped while opening: the identity must name the file conn has open
                conn, ident = None, after
                if ident is None:
                    return None
            if conn is None:
                raise IndexBusy(f"the index file {self.db_path} kept being replaced while opening it; search again")
            self.conn = conn
            self.ident = ident
        return self.conn

    def run(self, fn: Callable[[apsw.Connection], Any]) -> Any:
        """``fn(conn)`` under this reader's lock; FileNotFoundError when the index was never built,
        IndexCorrupt when the file is not a readable database. A handle that raised is closed, never reused."""
        with self._lock, index_errors(self.db_path):
            conn = self.get()
            if conn is None:
                raise FileNotFoundError(f"memory index database not found: {self.db_path}; run `memory-core index`")
            try:
                return fn(conn)
            except Exception:
                self.close()
                raise

    def close(self) -> None:
        with self._lock:
            if self.conn is not None:
                try:
                    self.conn.close()
                finally:
                    self.conn = None
                    self.ident = None
