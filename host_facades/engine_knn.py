"""Read-only database access for retrieval (owner and worker processes alike).

Readers open the agent database read-only, ``query_only``, in WAL mode with a busy timeout, and
hold one connection for the life of one query, so all reads of a query see one snapshot
(generation). ``SQLITE_IDLE_HANDLE_TTL_S`` is the one idle lifetime for retained SQLite handles.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import apsw

from host_facades.sqlite_ext import load_sqlite_vec

SQLITE_IDLE_HANDLE_TTL_S = 30 * 60
BUSY_TIMEOUT_MS = 5000


def open_readonly(db_path: str, *, load_vec: bool = True) -> apsw.Connection:
    """Open ``db_path`` read-only (``query_only``, busy timeout); sqlite-vec loaded when available."""
    if not os.path.exists(db_path):
        raise FileNotFoundError(f"memory index database not found: {db_path}; run `memory-core index`")
    conn = apsw.Connection(db_path, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    conn.execute("PRAGMA query_only=ON")
    if load_vec:
        load_sqlite_vec(conn)
    return conn


@contextlib.contextmanager
def read_snapshot(conn: apsw.Connection) -> Iterator[int]:
    """Run reads inside one read transaction; yields the revision (generation) it sees."""
    conn.execute("BEGIN")
    try:
        row = conn.execute("SELECT revision FROM memory_index_state WHERE id = 1").fetchone()
        yield int(row[0]) if row else 0
    finally:
        conn.execute("COMMIT")
