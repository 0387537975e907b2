"""The indexed files, as the index holds them now (``MemoryCore.files()``, ``memory-core files``).

One row per indexed source file: path, source, chunks, size and mtime as indexed, and when its
content was last indexed (the newest ``updated_at`` of its chunks; None for a file with no chunk,
e.g. an empty one). Reads the index through a short-lived read-only connection, never the writer,
and starts no sync: it lists what the index holds now (``status`` says whether that is behind).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

_FILES_SQL = (
    "SELECT s.source, s.path, s.size, s.mtime, count(c.id), max(c.updated_at)"
    " FROM memory_index_sources s LEFT JOIN memory_index_chunks c ON c.path = s.path AND c.source = s.source"
    " {where} GROUP BY s.source, s.path ORDER BY s.source, s.path"
)


@dataclass(frozen=True)
class IndexedFile:
    """One indexed file: ``size`` in bytes and ``mtime_ms`` as indexed, ``indexed_at`` in ms since
    the epoch."""

    path: str
    source: str
    chunks: int
    size: int | None
    mtime_ms: float | None
    indexed_at: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_indexed_files(db_path: str, sources: list[str] | None = None) -> list[IndexedFile]:
    """The files the index at ``db_path`` holds, by source then path (``[]`` when not indexed yet)."""
    if not os.path.exists(db_path):
        return []
    import apsw

    from host_facades.db.sqlite_read import open_readonly

    where = f"WHERE s.source IN ({','.join('?' * len(sources))})" if sources else ""
    conn = open_readonly(db_path, load_vec=False)
    try:
        rows = list(conn.execute(_FILES_SQL.format(where=where), list(sources or ())))
    except apsw.SQLError as exc:
        if "no such table" in str(exc):
            return []  # the schema is created by the first index
        raise
    finally:
        conn.close()
    return [IndexedFile(path=path, source=source, chunks=int(chunks), size=size, mtime_ms=mtime,
                        indexed_at=None if at is None else int(at))
            for source, path, size, mtime, chunks, at in rows]


def is_indexed_session(db_path: str, rel_path: str) -> bool:
    """Whether the index at ``db_path`` holds the session transcript ``rel_path`` (``sessions/x.jsonl``);
    False when there is no index or no schema yet. An unreadable index raises its typed error."""
    if not os.path.exists(db_path):
        return False
    import apsw

    from host_facades.db.sqlite_read import open_readonly
    from memory_core.store.access import index_errors

    with index_errors(db_path):
        try:
            conn = open_readonly(db_path, load_vec=False)
        except FileNotFoundError:
            return False
    try:
        row = conn.execute("SELECT 1 FROM memory_index_sources WHERE path = ? AND source = 'sessions'",
                           (rel_path,)).fetchone()
        return row is not None
    except apsw.SQLError:
        return False
    finally:
        conn.close()
